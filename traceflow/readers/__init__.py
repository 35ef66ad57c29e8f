"""The readers: one input file (nsys SQLite / .nsys-rep / Kineto JSON) -> Arrow files and trace records.

`worker.read_file` is the map step the ingest runs per file (`pool.map_files` on this machine); nothing here touches the
job database.
"""

"""The readers: one input file (nsys SQLite / .nsys-rep / Kineto JSON) -> Arrow files and trace records.

`worker.read_file` is the map step `traceflow.pipeline` runs per file; nothing here touches the
job database.
"""

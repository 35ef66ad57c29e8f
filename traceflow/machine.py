"""What this machine allows: its physical memory, and the memory DuckDB may take of it. A leaf:
the ingest (pipeline.py) and a local Dask cluster's bound (cluster.py) read it.
"""
from __future__ import annotations

import os


def db_config(scratch: str) -> dict:
    """DuckDB spills to disk past this, instead of taking 80% of RAM as it would by default. (2 GiB
    was too little: some of DuckDB's operators cannot spill, and a 16-rank nsys job ran out.)"""
    limit = os.environ.get("TRACEFLOW_MEMORY_LIMIT") or f"{max(1 << 30, min(3 << 30, ram_bytes() // 8)) >> 20}MB"
    return {"memory_limit": limit, "temp_directory": os.path.join(scratch, "duckdb-spill")}


def ram_bytes() -> int:
    """Physical memory, from the standard library (psutil is a dev-only dependency)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system: assume a small machine
        return 8 << 30

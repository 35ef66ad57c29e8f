"""What this machine allows: its physical memory, and the memory DuckDB may take of it. A leaf:
the ingest (pipeline.py) and a local Dask cluster's bound (cluster.py) read it.
"""
from __future__ import annotations

import os


def db_config(scratch: str, memory_limit: str | None = None) -> dict:
    """DuckDB spills to disk past this (`memory_limit`: the user's, $TRACEFLOW_MEMORY_LIMIT, read
    once into options.Options), instead of taking 80% of RAM as it would by default. (2 GiB
    was too little: some of DuckDB's operators cannot spill, and a 16-rank nsys job ran out.)
    Under an address-space limit (ulimit -v) a quarter of it, and a thread per 256 MiB of it: DuckDB
    counts only its buffers, while every thread reserves a stack and malloc arenas besides."""
    limit = memory_limit or f"{max(1 << 30, min(3 << 30, ram_bytes() // 8)) >> 20}MB"
    config: dict = {"memory_limit": limit, "temp_directory": os.path.join(scratch, "duckdb-spill")}
    space = address_space()
    if space is not None:
        if not memory_limit:
            config["memory_limit"] = f"{min(int(limit[:-2]), space // 4 >> 20)}MB"
        config["threads"] = max(1, min(os.cpu_count() or 1, space // (256 << 20)))
    return config


# The least address space (ulimit -v) in which an ingest of the smallest bundled job runs: Python,
# DuckDB and Arrow loaded take ~600 MiB of it before any work (ddp2_flops/stall: a reader's
# MemoryError at 700 MB, done at 1.2 GB).
MIN_ADDRESS_SPACE = 1 << 30


def address_space() -> int | None:
    """The soft limit on this process's address space (ulimit -v) in bytes; None when there is none."""
    import resource
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def check_address_space() -> None:
    """Before an ingest: one line (exit 3) when ulimit -v leaves too little to run at all, instead of
    a reader's MemoryError or an abort in native code. Under a limit, malloc keeps to two arenas:
    glibc reserves 64 MiB of address space for each thread's own, which used the limit up."""
    space = address_space()
    if space is None:
        return
    if space < MIN_ADDRESS_SPACE:
        from .errors import MachineLimit
        raise MachineLimit(f"the address-space limit (ulimit -v) is {space >> 20} MiB, and traceflow needs at least "
                           f"{MIN_ADDRESS_SPACE >> 20} MiB to run (Python, DuckDB and Arrow loaded take ~600): raise it")
    try:
        import ctypes
        ctypes.CDLL(None).mallopt(-8, 2)  # M_ARENA_MAX (malloc.h); a libc without mallopt: left as it is
    except (OSError, AttributeError):
        pass


def ram_bytes() -> int:
    """Physical memory, from the standard library (psutil is a dev-only dependency)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system: assume a small machine
        return 8 << 30

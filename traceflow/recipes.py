"""`traceflow recipe`: run an Nsight Systems recipe and load its Parquet outputs next to our tables."""
from __future__ import annotations

import re
from pathlib import Path

import duckdb

from .duck import connect as duck_connect
from .errors import InputError, UsageError, one_line
from .outputs import atomic_output
from .readers.nsys_cli import run_recipe

_NAME = re.compile(r"^[A-Za-z0-9_]+$")


def load_recipe(name: str, files: list[str], database: str, nsys: str | None = None) -> list[tuple[str, int]]:
    """Runs `nsys recipe NAME` on the reports and stores each Parquet output as recipe_<name>_<table>."""
    if not _NAME.match(name):
        raise UsageError(f"recipe name {name!r}: letters, digits and _ only (e.g. cuda_gpu_kern_sum)")
    for f in files:
        if not Path(f).exists():
            raise InputError(f, "no such file")
    out = run_recipe(name, files, nsys=nsys)
    parquet = sorted(out.rglob("*.parquet"))
    if not parquet:
        raise InputError(name, f"`nsys recipe {name}` wrote no Parquet files into {out}")
    loaded = []
    with atomic_output(database, "database", inputs=files, copy_existing=True) as tmp:
        con = duck_connect(tmp)
        try:
            for p in parquet:
                stem = re.sub(r"[^A-Za-z0-9_]", "_", p.relative_to(out).with_suffix("").as_posix()).strip("_").lower()
                table = f"recipe_{name}_{stem}"
                con.execute(f'CREATE OR REPLACE TABLE "{table}" AS SELECT * FROM read_parquet(?)', [str(p)])
                loaded.append((table, con.execute(f'SELECT count(*) FROM "{table}"').fetchall()[0][0]))
            con.execute("CHECKPOINT")
        except duckdb.Error as e:
            raise InputError(name, f"recipe output is not readable Parquet ({one_line(e)})") from None
        finally:
            con.close()
    return loaded


"""Fixes from a review of what landed (each through the real CLI: exit code, one line, no traceback)."""
from __future__ import annotations

import shutil

import duckdb
import pytest

from conftest import BUNDLED, run_cli


@pytest.fixture(scope="module")
def ddp4(tmp_path_factory):
    out = tmp_path_factory.mktemp("mends") / "ddp4.duckdb"
    r = run_cli("ingest", *sorted(str(p) for p in (BUNDLED / "ddp4_sync_stall").glob("rank-*.pt.trace.json.gz")), "-o", out)
    assert r.returncode == 0, r.stderr
    return out


def _copy(db, tmp_path, name="job.duckdb"):
    p = tmp_path / name
    shutil.copyfile(db, p)
    return p


def _one_line(r, code):
    assert r.returncode == code, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_hostile_memory_view_is_refused_not_swallowed(ddp4, tmp_path):
    """has_memory caught every error: a memory view reading /etc/hostname was taken as 'no memory'."""
    db = _copy(ddp4, tmp_path)
    with duckdb.connect(str(db)) as c:
        c.execute("DROP TABLE memory_ranks")
        c.execute("CREATE VIEW memory_ranks AS SELECT * FROM read_csv('/etc/hostname')")
    line = _one_line(run_cli("report", db, "-o", tmp_path / "r.html"), 3)
    assert "/etc/hostname" in line and "outside itself" in line
    assert not (tmp_path / "r.html").exists()

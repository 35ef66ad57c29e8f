"""Issue 7: every bad input derived from the real fixtures gets exit 3 and one line naming the file,
or is read with a warning when still usable; never a traceback; an existing database is untouched."""
from __future__ import annotations

import hashlib
import shutil

import pytest
from click.testing import CliRunner
from conftest import BUNDLED
from corpus import SHARED, cases

from traceflow.cli import main

CASES = cases()


@pytest.fixture(scope="module")
def existing_db(tmp_path_factory):
    d = tmp_path_factory.mktemp("existing")
    db = d / "job.duckdb"
    r = CliRunner().invoke(main, ["ingest", str(BUNDLED / "ddp4_sync_stall" / "rank-2.pt.trace.json.gz"), "-o", str(db)])
    assert r.exit_code == 0, r.output
    return db


def digest(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.parametrize("name,make,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input(name, make, expected, existing_db, tmp_path):
    db = tmp_path / "job.duckdb"
    shutil.copyfile(existing_db, db)
    before = digest(db)
    inputs = [str(p) for p in make(tmp_path)]
    r = CliRunner().invoke(main, ["ingest", *inputs, "-o", str(db)])
    assert r.exception is None or isinstance(r.exception, SystemExit), f"crashed: {r.exception!r}"
    assert "Traceback" not in r.output and "Traceback" not in r.stderr
    if expected == "error" or (expected == "either" and r.exit_code != 0):
        assert r.exit_code == 3, (r.exit_code, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("traceflow: error: "), r.stderr
        assert any(p in lines[0] for p in inputs), lines[0]
        assert digest(db) == before, "existing database changed"
    else:
        assert r.exit_code == 0, r.stderr
        assert digest(db) != before
    leftovers = [p.name for p in tmp_path.iterdir() if ".traceflow-tmp-" in p.name]
    assert leftovers == []


def test_corpus_size():
    """The fast subset still covers every kind of damage."""
    kinds = {"truncated", "flipped", "empty", "gzip", "backwards", "NaN", "nested", "bomb"}
    text = " ".join(c[0] for c in CASES)
    assert all(k in text for k in kinds), [k for k in kinds if k not in text]
    if not SHARED.is_dir():
        pytest.skip(f"nsys-derived cases need the real fixtures at {SHARED} (../shared is absent)")
    nsys_kinds = {"dropped", "renamed", "StringIds", "duplicate", "mixed"}
    assert all(k in text for k in nsys_kinds), [k for k in nsys_kinds if k not in text]
    assert len(CASES) >= 60

"""Issue 36: the first hour of a new user: what `make demo` prints works, CI runs every test, the
README points at nothing a user lacks, tests keep their files inside the clone."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BUNDLED, ROOT, TMP_ROOT

MAKE = shutil.which("make")


def _demo_next(venv: Path) -> dict[str, str]:
    out = subprocess.run([MAKE, "-s", "--no-print-directory", "-C", str(ROOT), "demo-next", f"VENV={venv}"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return dict(re.findall(r"^(\w+):\s+(.*)$", out, re.M))


@pytest.mark.skipif(MAKE is None, reason="make is not installed")
def test_what_make_demo_prints_last_works(tmp_path):
    """`make demo` ended with `Shell: .venv/bin/duckdb`, which the demo's venv (declared dependencies
    only) does not have. Each command it prints now runs in the venv it names."""
    db = tmp_path / "out" / "postmortem" / "job.duckdb"
    db.parent.mkdir(parents=True)
    import traceflow
    traceflow.ingest([str(BUNDLED / "ddp4_sync_stall")], str(db)).close()
    bare = tmp_path / "bare"  # a venv as `make demo` leaves it: traceflow, no duckdb-cli
    (bare / "bin").mkdir(parents=True)
    (bare / "bin" / "traceflow").symlink_to(Path(sys.executable).parent / "traceflow")
    for venv, has_shell in ((bare, False), (Path(sys.executable).parent.parent, (Path(sys.executable).parent / "duckdb").exists())):
        lines = _demo_next(venv)
        assert {"Report", "Perfetto", "SQL", "Shell"} <= set(lines)
        sql = shlex.split(lines["SQL"])
        r = subprocess.run(sql, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and "host_late" in r.stdout, r.stderr
        shell = lines["Shell"]
        if has_shell:
            cmd = shlex.split(shell)
            assert os.access(cmd[0], os.X_OK)
            r = subprocess.run([*cmd, "-c", "select count(*) from idle_gaps"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
        else:
            assert shell.startswith("make dev, then") and not os.path.exists(shlex.split(shell)[3])


def test_ci_runs_the_quick_and_the_slow_suite():
    """The slow tests left `make test`, not CI: .ci/run runs `make test`, then `make test-slow`, which
    selects exactly the tests `make test` leaves out."""
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert ci[-2:] == ["make test", "make test-slow"]
    make = (ROOT / "Makefile").read_text()
    quick = re.search(r"^test:.*\n\t(.*)$", make, re.M).group(1)
    slow = re.search(r"^test-slow:.*\n\t(.*)$", make, re.M).group(1)
    assert '-m "not slow"' in quick and "-m slow" in slow
    assert "peers" in re.search(r"^test-slow:(.*)$", make, re.M).group(1)  # the HTA comparison needs its venv


def test_readme_points_at_what_a_user_has():
    """The README sent users to ../shared/DESIGN.md and to benchmarks outside the repository."""
    text = (ROOT / "README.md").read_text()
    assert "DESIGN.md" not in text
    for link in re.findall(r"\]\(([^)#]+)\)", text):
        if not link.startswith(("http://", "https://")):
            assert (ROOT / link).exists(), link
    for m in re.finditer(r"\.\./shared", text):
        around = text[max(0, m.start() - 300): m.end() + 300]
        assert "not in the repository" in around or "SHARED=" in around, around


def test_temporary_files_stay_in_the_clone(tmp_path, tmp_path_factory):
    """Tests wrote to /tmp/pytest-of-<user>; now to .pytest-tmp/ inside the clone (ignored by git),
    in xdist's workers too (each in a folder of its own)."""
    assert tmp_path.resolve().is_relative_to(TMP_ROOT.resolve())
    assert tmp_path_factory.getbasetemp().resolve().is_relative_to(TMP_ROOT.resolve())
    if os.environ.get("PYTEST_XDIST_WORKER"):
        assert os.environ["PYTEST_XDIST_WORKER"] in str(tmp_path)
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", str(tmp_path)], timeout=30)
    if shutil.which("git") and (ROOT / ".git").exists():
        assert ignored.returncode == 0

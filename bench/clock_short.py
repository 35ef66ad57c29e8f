"""Clock skew on short captures: how often the rule fires on unshifted jobs, and finds a real shift.

    python bench/clock_short.py [--window 6] [--shift-ms 20]

Every real multi-rank fixture (../shared/fixtures, and $TRACEFLOW_WILD's param DLRM set when present)
is ingested with --align off; its matched collectives' ends are cut into windows of `window`
consecutive collectives (a short capture each), every rank taken as a clock of its own (Kineto
records no host). Per window: a false positive is any rank found shifted on the recorded times; a
detection is the last rank, moved by `shift_ms`, found shifted (and no other).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from traceflow.derive import clock  # noqa: E402

SHARED = ROOT.parent / "shared" / "fixtures"
WILD = Path(os.environ.get("TRACEFLOW_WILD", ROOT.parent / "shared" / "wild"))


def jobs() -> list[tuple[str, list[str]]]:
    out = []
    for d in ("h100/kineto/ddp4_sync_stall", "h100/kineto/ddp4_straggler", "h100/nsys/ddp4_sync_stall",
              "h100/nsys/ddp4_straggler", "public/param-dlrm8", "public/hta-2rank"):
        files = sorted(str(p) for p in (SHARED / d).glob("*") if p.name.endswith((".json.gz", ".sqlite"))
                       and not p.name.startswith("truth"))
        if len(files) >= 2:
            out.append((d, files))
    return out


def matrix(files: list[str]) -> np.ndarray:
    import duckdb

    import traceflow
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "j.duckdb")
        traceflow.ingest(files, db, align="off")
        con = duckdb.connect(db, read_only=True)
        m, _, _ = clock.end_matrix(con)
        con.close()
    return m


def rates(m: np.ndarray, window: int, shift_ns: float) -> tuple[int, int, int]:
    """(windows, false positives, detections)"""
    n, fp, hit = 0, 0, 0
    ranks = m.shape[1]
    for k in range(0, len(m) - window + 1):
        w = m[k:k + window]
        if np.isnan(w).any():
            continue
        n += 1
        units = [clock._Unit(f"rank {r}", [r]) for r in range(ranks)]
        fp += bool(clock.decide(w, units))
        moved = w.copy()
        moved[:, -1] += shift_ns
        units = [clock._Unit(f"rank {r}", [r]) for r in range(ranks)]
        flagged = clock.decide(moved, units)
        hit += [u.cols for u in flagged] == [[ranks - 1]]
    return n, fp, hit


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=int, default=6)
    ap.add_argument("--shift-ms", type=float, default=20.0)
    a = ap.parse_args()
    print(f"| job | ranks | windows of {a.window} | false positives | {a.shift_ms:g} ms shift found |")
    print("|---|---|---|---|---|")
    for name, files in jobs():
        m = matrix(files)
        n, fp, hit = rates(m, a.window, a.shift_ms * 1e6)
        print(f"| {name} | {m.shape[1]} | {n} | {fp} | {hit} |")


if __name__ == "__main__":
    main()

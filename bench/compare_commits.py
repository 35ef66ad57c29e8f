"""Every table of every fixture, before and after a change: `EXCEPT ALL` both ways, per table.

    python bench/compare_commits.py OLD_REV [NEW_REV]      # revisions of this repository (NEW: the working tree)
    python bench/compare_commits.py --trees /tmp/old .     # or two source trees
    python bench/compare_commits.py main --cluster local:2 # each ingest on a Dask LocalCluster of 2 workers

Each fixture folder (the bundled ones, and ../shared/fixtures when present) is ingested with each
tree in a subprocess; every table and view of the two databases (schemas main and tf_internal; a cluster job's per-rank
tables are views over its shards) is then compared row for row.
Columns that are ids given in arrival order (op ids, trace ids) can be left out with --ignore.
Exit status 1 when any table differs.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "fixtures"
INGEST = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]  # the tree named, not this checkout
sys.path.insert(0, sys.argv[1])
import traceflow
assert traceflow.__file__.startswith(sys.argv[1]), traceflow.__file__
cluster = sys.argv[3] or None
traceflow.ingest(sys.argv[4:], sys.argv[2], **({"cluster": cluster} if cluster else {}))
"""


def fixtures() -> list[Path]:
    found = [p for p in sorted((ROOT / "fixtures").rglob("*")) if p.is_dir() and any(p.glob("*.json.gz"))]
    if SHARED.is_dir():
        found += sorted({f.parent for f in SHARED.rglob("*") if f.name.endswith((".sqlite", ".json.gz"))})
    return found


def trace_files(folder: Path) -> list[str]:
    return sorted(str(f) for f in folder.iterdir() if f.name.endswith((".sqlite", ".json.gz")) and not f.name.startswith("truth"))


def worktree(rev: str, where: Path) -> Path:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(where), rev], check=True)
    return where


def compare(a: Path, b: Path, ignore: set[str]) -> list[str]:
    import duckdb
    con = duckdb.connect()
    con.execute(f"ATTACH '{a}' AS a (READ_ONLY)")
    con.execute(f"ATTACH '{b}' AS b (READ_ONLY)")
    listed = """SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name IN ('main', 'tf_internal')
                UNION ALL SELECT schema_name, view_name FROM duckdb_views() WHERE database_name = ? AND NOT internal
                AND schema_name IN ('main', 'tf_internal') ORDER BY ALL"""
    tables = con.execute(listed, ["a", "a"]).fetchall()
    out = [f"{s}.{t}: only in the new database" for s, t in sorted(set(con.execute(listed, ["b", "b"]).fetchall()) - set(tables))]
    for schema, t in tables:
        name = t if schema == "main" else f"{schema}.{t}"
        columns = "SELECT column_name FROM duckdb_columns() WHERE database_name = ? AND schema_name = ? AND table_name = ?"
        cols_a = [r[0] for r in con.execute(columns, ["a", schema, t]).fetchall()]
        cols_b = {r[0] for r in con.execute(columns, ["b", schema, t]).fetchall()}
        if not cols_b:
            out.append(f"{name}: only in the old database")
            continue
        cols = ", ".join(f'"{c}"' for c in cols_a if c in cols_b and c not in ignore)
        if not cols:
            continue
        for x in ("a", "b"):  # a view reads by bare names: in its own database
            con.execute(f"SET search_path = '{x}.main,{x}.tf_internal'")
            con.execute(f'CREATE OR REPLACE TEMP TABLE tf_cmp_{x} AS SELECT {cols} FROM {x}.{schema}."{t}"')
        con.execute("RESET search_path")
        only_a = con.execute("SELECT count(*) FROM (FROM tf_cmp_a EXCEPT ALL FROM tf_cmp_b)").fetchone()[0]
        only_b = con.execute("SELECT count(*) FROM (FROM tf_cmp_b EXCEPT ALL FROM tf_cmp_a)").fetchone()[0]
        if only_a or only_b:
            out.append(f"{name}: {only_a} rows only before, {only_b} only after")
        extra = sorted(set(cols_a) ^ cols_b)
        if extra:
            out.append(f"{name}: columns in one only: {', '.join(extra)}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("revs", nargs="*", help="OLD [NEW] revisions (NEW defaults to the working tree)")
    ap.add_argument("--trees", nargs=2, metavar=("OLD", "NEW"), help="two source trees instead of revisions")
    ap.add_argument("--cluster", default="", help="ingest on this cluster (local:N, a scheduler address); default: locally")
    ap.add_argument("--only", default="", help="only the fixture folders whose path contains this")
    ap.add_argument("--ignore", default="op_id,launch_op_id,node_op_id,next_op_id", help="columns left out of the comparison")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tf-compare-"))
    if args.trees:
        old, new = (Path(t).resolve() for t in args.trees)
    elif args.revs:
        old = worktree(args.revs[0], work / "old")
        new = worktree(args.revs[1], work / "new") if len(args.revs) > 1 else ROOT
    else:
        ap.error("give OLD [NEW] revisions or --trees OLD NEW")
    ignore = {c for c in args.ignore.split(",") if c}
    bad = 0
    for folder in [f for f in fixtures() if args.only in str(f)]:
        files = trace_files(folder)
        dbs = []
        for label, tree in (("old", old), ("new", new)):
            db = work / f"{label}-{abs(hash(str(folder)))}.duckdb"
            r = subprocess.run([sys.executable, "-c", INGEST, str(tree), str(db), args.cluster, *files], capture_output=True, text=True,
                               env=dict(os.environ, PYTHONPATH=""))
            dbs.append(db if r.returncode == 0 else r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed")
        if not all(isinstance(d, Path) for d in dbs):
            same = dbs[0] == dbs[1]  # refused the same way by both (a folder holding two jobs, say)
            print(f"{folder}: {'the same refusal by both' if same else 'ingest failed'}: {dbs[0]}")
            bad += not same
            continue
        diffs = compare(dbs[0], dbs[1], ignore)
        print(f"{folder.relative_to(folder.parents[1])}: {'identical' if not diffs else '; '.join(diffs)}")
        bad += bool(diffs)
    for tree in (old, new):  # the worktrees this run made
        if work in tree.parents:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
    import shutil
    shutil.rmtree(work, ignore_errors=True)  # its databases: ~0.5 GB a run was left in $TMPDIR
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

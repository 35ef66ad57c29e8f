"""Issue 46: formats beside Kineto JSON and nsys SQLite (docs/formats.md). The JAX / XLA trace viewer
JSON and TraceLens's fused file are checked on real public files in test_wild.py; here: the autograd
profiler's JSON list, recorded with torch; and the exports traceflow refuses (nsys parquet / arrow,
nsys-jax archives, an .nsys-rep without nsys), each with the one line that says what to pass instead."""
from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import zipfile

import pytest
from conftest import connect, fixture_files, needs_shared, run_cli

RECORD = """
import sys, torch
with torch.autograd.profiler.profile() as prof:
    x = torch.randn(128, 128)
    for i in range(4):
        with torch.autograd.profiler.record_function(f"ProfilerStep#{i}"):
            (x @ x).relu().sum()
prof.function_events.export_chrome_trace(sys.argv[1])   # EventList: the autograd profiler's JSON list
"""


def _record_list(path):
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-c", RECORD, str(path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    events = json.loads(path.read_text())
    assert isinstance(events, list) and events  # the format under test: a top-level list
    return events


def _refused(r, path, out):
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 3 and len(lines) == 1 and str(path) in lines[0], (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and not out.exists()
    return lines[0]


def test_autograd_profiler_json_list(tmp_path):
    """A top-level JSON list of events (torch.autograd.profiler's EventList.export_chrome_trace) is read:
    its "CPU functions" rows are CPU ops, as many as the raw list's complete events, its ProfilerStep#N
    rows the steps; the postmortem runs on it. Cut mid-list: one line, exit 3, nothing written."""
    path = tmp_path / "autograd.json"
    events = _record_list(path)
    out = tmp_path / "pm"
    r = run_cli("postmortem", path, "-o", out)
    assert r.returncode == 0, r.stderr
    db = connect(out / "job.duckdb")
    assert db.execute("select source_format from traces").fetchall() == [("autograd-json",)]
    cpu = [e for e in events if e.get("ph") == "X" and e.get("pid") == "CPU functions"]
    assert db.execute("select count(*) from host_ops where kind = 'cpu_op'").fetchone()[0] == len(cpu) > 0
    steps = {int(m.group(1)) for e in cpu if (m := re.fullmatch(r"ProfilerStep#(\d+)", e["name"]))}
    assert steps and db.execute("select count(*) from steps").fetchone()[0] == len(steps)
    assert db.execute("select count(*) from gpu_ops").fetchone()[0] == 0  # since PyTorch 1.8 it holds no kernels
    bad = tmp_path / "cut.json"
    bad.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    _refused(run_cli("postmortem", bad, "-o", tmp_path / "pm2"), bad, tmp_path / "pm2")


@needs_shared
def test_exports_not_read_say_what_to_pass(tmp_path):
    """nsys parquetdir / arrowdir exports (a table of a real SQLite export, written by pyarrow as those
    exports write it: one file per table), a folder of them, and an nsys-jax archive (a zip holding
    a .nsys-rep): each refused in one line naming it and the command or file to pass, exit 3, nothing
    written; a zip of something else, and a damaged one, likewise in one line."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq
    src = fixture_files("h100/nsys/graphs")[0]
    with sqlite3.connect(f"file:{src}?mode=ro", uri=True) as c:
        cur = c.execute('select start, "end", deviceId, streamId, correlationId from CUPTI_ACTIVITY_KIND_KERNEL')
        rows = cur.fetchall()
        names = [d[0] for d in cur.description]
    kernels = pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)})
    folder = tmp_path / "report_pqtdir"
    folder.mkdir()
    pq.write_table(kernels, folder / "CUPTI_ACTIVITY_KIND_KERNEL.parquet")
    arrow = tmp_path / "CUPTI_ACTIVITY_KIND_KERNEL.arrow"
    with ipc.new_file(str(arrow), kernels.schema) as w:
        w.write_table(kernels)
    archive = tmp_path / "profile.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(src, "report.nsys-rep")
        z.writestr("install.sh", "#!/bin/sh\n")
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("notes.txt", "no trace\n")
    damaged = tmp_path / "damaged.zip"
    damaged.write_bytes(archive.read_bytes()[:100])
    for path, says in [(folder / "CUPTI_ACTIVITY_KIND_KERNEL.parquet", "nsys export --type sqlite"),
                       (folder, "nsys export --type sqlite"), (arrow, "nsys export --type sqlite"),
                       (archive, "'report.nsys-rep'"), (other, "unzip it"), (damaged, "zip")]:
        out = tmp_path / f"out-{path.name}"
        line = _refused(run_cli("ingest", path, "-o", out), path, out)
        assert says in line, line


def test_nsys_rep_without_nsys_says_the_command(tmp_path):
    """An .nsys-rep with no nsys to export it: one line naming it and the `nsys export` command to run,
    exit 3, nothing written (the report's bytes are not looked at before nsys is found)."""
    rep = tmp_path / "rank0.nsys-rep"
    rep.write_bytes(b"\x00not really a report")
    out = tmp_path / "x.duckdb"
    line = _refused(run_cli("ingest", rep, "-o", out, env={"PATH": "/usr/bin:/bin"}), rep, out)
    assert "nsys export --type sqlite --output rank0.sqlite" in line, line


def test_perfetto_trace_traceflow_wrote_reads_back_to_the_same_gpu_ops(tmp_path):
    """The Perfetto trace `postmortem` writes (gzip'd protobuf), ingested again, plain or gzip'd, gives
    the same GPU ops as the database it was written from: rank, device, stream, kind, name, start,
    end, bytes, category and the launch call each links to; the postmortem runs on it. Damaged copies
    (cut mid-packet, a gzip cut, bytes overwritten): one line naming the file, exit 3, nothing written."""
    import gzip

    from conftest import BUNDLED
    out = tmp_path / "pm"
    r = run_cli("postmortem", BUNDLED / "ddp4_sync_stall", "-o", out)
    assert r.returncode == 0, r.stderr
    trace = out / "job.perfetto-trace"
    plain = tmp_path / "job.pftrace"
    plain.write_bytes(gzip.decompress(trace.read_bytes()))
    q = ("select rank, device, stream, kind, name, start_ns, end_ns, bytes, category, api_name, api_start_ns "
         "from gpu_ops order by all")
    want = connect(out / "job.duckdb").execute(q).fetchall()
    assert len(want) > 10_000
    for path in (trace, plain):
        r = run_cli("ingest", path, "-o", tmp_path / f"{path.name}.duckdb")
        assert r.returncode == 0, r.stderr
        db = connect(tmp_path / f"{path.name}.duckdb")
        assert db.execute(q).fetchall() == want, path
        assert {f for (f,) in db.execute("select source_format from traces").fetchall()} == {"perfetto"}
    r = run_cli("postmortem", plain, "-o", tmp_path / "pm2")
    assert r.returncode == 0, r.stderr
    # the same trace without its GPU stream tracks: a Perfetto trace of a layout traceflow does not
    # read GPU work from, refused in one line naming what it holds
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace
    t = Trace.FromString(plain.read_bytes())
    gpu = {p.track_descriptor.uuid for p in t.packet if p.HasField("track_descriptor")
           and p.track_descriptor.name.startswith("GPU ")}
    keep = [p for p in t.packet if not (p.HasField("track_descriptor") and p.track_descriptor.uuid in gpu)
            and not (p.HasField("track_event") and p.track_event.track_uuid in gpu)]
    other = tmp_path / "no_gpu.pftrace"
    other.write_bytes(Trace(packet=keep).SerializeToString())
    line = _refused(run_cli("ingest", other, "-o", tmp_path / "other.duckdb"), other, tmp_path / "other.duckdb")
    assert "no GPU stream tracks" in line and "tracks:" in line, line
    data = plain.read_bytes()
    for name, bad in [("cut.pftrace", data[: len(data) // 2]), ("cut.pftrace.gz", trace.read_bytes()[:50_000]),
                      ("noise.pftrace", data[:200] + bytes(range(256)) * 40)]:
        p = tmp_path / name
        p.write_bytes(bad)
        _refused(run_cli("ingest", p, "-o", tmp_path / f"{name}.duckdb"), p, tmp_path / f"{name}.duckdb")

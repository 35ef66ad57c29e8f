"""The report's section on a stopped job (Flight Recorder dumps; docs/hang-forensics.md): the
desync rows and where each rank stood, with its timing where a trace was ingested beside the dumps."""
from __future__ import annotations

from .blocks import Note, Section, table

READS = frozenset({"desync", "desync_ranks", "desync_timing_ranks"})  # the tables its SQL reads (tests/test_layers.py)


def section(con, f: dict) -> Section | None:
    """None unless the dumps show a hang (f: the verdict's findings, whose 'hang' holds them)."""
    hang = f.get("hang")
    if not hang:
        return None
    blocks = [Note(hang["sentence"]),
              table(con, """SELECT pg, seq, op, kind, ranks::VARCHAR AS ranks, expected, got, waiting::VARCHAR AS waiting,
                                   no_dump::VARCHAR AS no_dump, fault_last_completed, fault_frame, wait_frame
                            FROM desync ORDER BY created_ns, pg, seq LIMIT 50""",
                    headers=["group", "seq", "op", "kind", "ranks at fault", "expected", "got", "waiting", "no dump",
                             "last completed (at fault)", "where the ranks at fault called", "where the others wait"]),
              Note("Where each rank stood in the group where it stopped (from its dump):"),
              table(con, """SELECT rank, state, last_enqueued, last_completed, op, frame FROM desync_ranks
                            WHERE pg = ? ORDER BY CASE state WHEN 'not_entered' THEN 0 WHEN 'no_dump' THEN 1 ELSE 2 END, rank
                            LIMIT 64""", [hang["rows"][0]["pg"] if hang["rows"] else hang["ranks"][0]["pg"]],
                    headers=["rank", "state", "last enqueued", "last completed", "op", "called from"])]
    if hang.get("timing"):
        blocks += [Note("From each rank's timing trace, from when the hang began to the trace's end:"),
                   table(con, """SELECT rank, where_stuck, host_activity, host_activity_ns, in_collective_ns, gpu_busy_ns,
                                        gpu_at_hang, last_seq FROM desync_timing_ranks ORDER BY rank LIMIT 64""",
                         headers=["rank", "stuck", "host was in", "for (ms)", "in collectives (ms)", "GPU busy, 5 s before (ms)",
                                  "GPU op at the hang", "last collective entered"],
                         ms_cols=("host_activity_ns", "in_collective_ns", "gpu_busy_ns"))]
    return Section("hang", "Why the job stopped (Flight Recorder)", blocks)

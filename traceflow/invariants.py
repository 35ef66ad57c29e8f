"""Invariants checked before any database is written (docs/bad-input.md, "Absurd input").

Two parts, both on the job's tables inside the temp database, before it is renamed into place:

- `drop_absurd`, right after loading: what a profiler cannot have recorded is dropped, and the
  warnings count it per rank: GPU ops recorded twice (a repeated flush, two captures concatenated:
  per-kernel counts and summed times doubled while union-based figures did not), and stray GPU ops
  hours away from the rest of their rank's GPU work (a few kernels with a tiny positive ts, one a day
  late, one lasting 100 days: the rank spanned 53 days, one step window too).
- `check`, after the figures are computed: no step window longer than its rank's capture, no
  negative duration, every step_breakdown row's identities. A violation is a one-line error (exit 3)
  naming the rank's file, the rank and the invariant, never a silent row.
"""
from __future__ import annotations

from .errors import InputError

GAP_NS = 3600 * 10**9       # GPU work this far from the rest of its rank's is not of the same capture
STRAY_MAX_SHARE = 0.01      # at most this share of a rank's GPU ops (and STRAY_MAX_OPS) is dropped as stray
STRAY_MAX_OPS = 100

# what identifies a recorded event: two rows equal in all of these are one event written twice
# (two GPU ops cannot share a stream, a start and an end; host ops nest, hence their name and ids)
_KEYS = {"gpu_ops": "kind, device, stream, start_ns, end_ns, correlation_id, hash(name)",
         "host_ops": "kind, tid, start_ns, end_ns, correlation_id, external_id, hash(name)",
         "ranges": "tid, domain, start_ns, end_ns, on_gpu, hash(name)"}


# Host events of no length are not compared: a Python profiler writes distinct zero-length calls at one
# microsecond (GPUPuzzlers vector_flops1: 80 `<genexpr>` python_function events, each its own Profiler
# Event Index, were dropped as "recorded twice"); one written twice holds no time to double anyway.
_COMPARED = {"gpu_ops": "TRUE", "host_ops": "end_ns > start_ns", "ranges": "end_ns > start_ns"}


def drop_absurd(con) -> list[tuple[int, str]]:
    """Deletes duplicated events and stray GPU ops; returns (rank, what was dropped) for the warnings."""
    # Long because: two passes over the loaded tables (events twice, stray GPU ops), each one SQL
    # statement with the warning that counts what it dropped.
    notes: dict[int, list[str]] = {}
    for table, key in _KEYS.items():
        n_all, n_distinct = con.execute(
            f"SELECT count(*), count(DISTINCT hash(trace_id, {key})) FROM {table} WHERE {_COMPARED[table]}").fetchone()
        if n_all == n_distinct:
            continue
        per_rank = con.execute(f"""
            WITH d AS (SELECT rowid AS rid, rank,
                              row_number() OVER (PARTITION BY trace_id, {key} ORDER BY rowid) AS k FROM {table}
                       WHERE {_COMPARED[table]})
            SELECT rank, count(*), list(rid) FROM d WHERE k > 1 GROUP BY rank""").fetchall()
        for rank, n, rids in per_rank:
            con.execute(f"DELETE FROM {table} WHERE rowid IN (SELECT unnest(?))", [rids])
            notes.setdefault(rank, []).append(f"dropped {n} {table.replace('_', ' ')} recorded twice (same "
                                              "times, thread or stream, name and ids as another)")
    # Stray GPU ops: the rank's GPU work cut where the next op starts more than GAP_NS after every
    # op before it has ended; the burst holding most ops is the capture.
    stray = con.execute(f"""
        WITH o AS (
            SELECT rowid AS rid, rank, trace_id, start_ns, end_ns,
                   max(end_ns) OVER (PARTITION BY trace_id ORDER BY start_ns, end_ns
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before_end,
            FROM gpu_ops
        ), b AS (
            SELECT *, sum(CASE WHEN start_ns > before_end + {GAP_NS} THEN 1 ELSE 0 END)
                        OVER (PARTITION BY trace_id ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING) AS burst
            FROM o
        ), sized AS (
            SELECT *, count(*) OVER (PARTITION BY trace_id, burst) AS n_burst, count(*) OVER (PARTITION BY trace_id) AS n_all
            FROM b
        ), main_burst AS (
            SELECT trace_id, arg_max(burst, n_burst) AS burst FROM sized GROUP BY trace_id
        ), main_last AS (
            SELECT trace_id, m.burst, max(s.start_ns) AS last_start
            FROM sized s JOIN main_burst m USING (trace_id) WHERE s.burst = m.burst GROUP BY trace_id, m.burst
        )
        SELECT s.rank, s.rid, s.n_all, s.end_ns > m.last_start + {GAP_NS} AND s.burst = m.burst AS too_long, s.burst <> m.burst
        FROM sized s JOIN main_last m USING (trace_id)
        WHERE s.burst <> m.burst OR s.end_ns > m.last_start + {GAP_NS}
    """).fetchall()
    by_rank: dict[int, list] = {}
    for rank, rid, n_all, too_long, apart in stray:
        by_rank.setdefault(rank, []).append((rid, n_all, too_long, apart))
    for rank, rows in sorted(by_rank.items()):
        n_all = rows[0][1]
        if len(rows) > max(1, min(STRAY_MAX_OPS, STRAY_MAX_SHARE * n_all)):
            notes.setdefault(rank, []).append(
                f"GPU work comes in bursts more than {GAP_NS // 3600 // 10**9} h apart ({len(rows)} of {n_all} ops "
                "outside the largest): kept as recorded; its windows span the gap")
            continue
        con.execute("DELETE FROM gpu_ops WHERE rowid IN (SELECT unnest(?))", [[r[0] for r in rows]])
        apart = sum(1 for r in rows if r[3])
        long_ = len(rows) - apart
        what = []
        if apart:
            what.append(f"{apart} starting more than {GAP_NS // 3600 // 10**9} h from the rest of the rank's GPU work")
        if long_:
            what.append(f"{long_} ending more than {GAP_NS // 3600 // 10**9} h after the last op starts")
        notes.setdefault(rank, []).append(f"dropped {len(rows)} stray GPU ops of {n_all} ({'; '.join(what)}): "
                                          "not of this capture (damaged times)")
    return [(r, "; ".join(notes[r])) for r in sorted(notes)]


_CHECKS = [
    ("no step window longer than the capture", """
        WITH span AS (SELECT rank, max(end_ns) - min(start_ns) AS ns FROM (
                          SELECT rank, start_ns, end_ns FROM gpu_ops UNION ALL SELECT rank, start_ns, end_ns FROM host_ops)
                      GROUP BY rank)
        SELECT w.rank, 'step ' || coalesce(w.step::VARCHAR, '(none)') || ': window ' || (w.end_ns - w.start_ns)
               || ' ns, capture ' || s.ns || ' ns'
        FROM tf_internal.step_windows w JOIN span s USING (rank) WHERE w.end_ns - w.start_ns > s.ns"""),
    ("no negative duration", """
        SELECT rank, 'a GPU op ends before it starts' FROM gpu_ops WHERE end_ns < start_ns
        UNION ALL SELECT rank, 'step ' || step || ': window ends before it starts' FROM tf_internal.step_windows WHERE end_ns < start_ns
        UNION ALL SELECT rank, part || ' row at ' || start_ns || ': a negative figure' FROM step_breakdown
        WHERE least(wall_ns, busy_ns, idle_ns, compute_ns, exposed_comm_ns, exposed_memory_ns) < 0"""),
    ("busy + idle = wall, compute + exposed comm + exposed memory + idle = wall, per step_breakdown row", """
        SELECT rank, part || ' row at ' || start_ns FROM step_breakdown
        WHERE busy_ns + idle_ns <> wall_ns OR compute_ns + exposed_comm_ns + exposed_memory_ns + idle_ns <> wall_ns"""),
]


def reads() -> set[str]:
    """The tables the checks read (their SQL's FROM and JOIN): what the runner (graph.py) runs them after."""
    from .sqlmodules import referenced
    return set().union(*(referenced(sql) for _, sql in _CHECKS))


def check(con):
    """Raises InputError naming the first rank (its file) whose tables break an invariant."""
    for name, sql in _CHECKS:
        row = con.execute(sql + " LIMIT 1").fetchone()
        if row is not None:
            rank, detail = row
            path = con.execute("SELECT source_path FROM traces WHERE rank = ? LIMIT 1", [rank]).fetchone()
            raise InputError(path[0] if path else f"rank {rank}",
                             f"rank {rank}: invariant '{name}' broken ({detail}): the trace holds times no "
                             "profiler records; nothing was written")

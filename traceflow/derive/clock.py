"""Clock alignment between hosts (DESIGN.md, "Clock alignment").

Ranks on one host share a clock. Ranks on other hosts (or of unknown host) may be skewed by
milliseconds; the end of a matched collective is near-simultaneous on every rank, so a host's
skew is the median over collectives of (its ranks' end - the median end across ranks).
The offset is applied only when it is larger than the spread of those ends.
"""
from __future__ import annotations

SKEW_SQL = """
WITH m AS (
    SELECT comm, step, seq, quantile_disc(end_ns, 0.5) AS med_end
    FROM collectives GROUP BY ALL HAVING count(DISTINCT rank) >= 2
), d AS (
    SELECT c.rank, c.end_ns - m.med_end AS delta FROM collectives c JOIN m USING (comm, step, seq)
), g AS (
    -- one clock domain per host; ranks of unknown host are each their own domain
    SELECT rank, coalesce(nullif(hostname, ''), '?rank' || rank) AS clock_domain FROM traces
)
SELECT g.clock_domain, min(g.rank) AS first_rank, list(DISTINCT g.rank ORDER BY g.rank) AS ranks,
       quantile_disc(d.delta, 0.5) AS skew, count(*) AS n
FROM d JOIN g USING (rank) GROUP BY g.clock_domain ORDER BY first_rank
"""

TIME_COLUMNS = {"gpu_ops": ["start_ns", "end_ns", "api_start_ns", "api_end_ns", "issue_start_ns"],
                "host_ops": ["start_ns", "end_ns"], "ranges": ["start_ns", "end_ns"]}


def align(con, mode: str = "auto") -> list[tuple[int, int]]:
    """Estimates offsets, stores them in traces, shifts the shifted ranks' times. Returns (rank, offset_ns)."""
    rows = con.execute(SKEW_SQL).fetchall()
    if len(rows) < 2:
        return []
    # The domain holding the lowest rank is the reference clock.
    ref_skew = rows[0][3]
    offsets = {domain: -(skew - ref_skew) for domain, _, _, skew, _ in rows}
    rank_offset = {r: offsets[domain] for domain, _, rs, _, _ in rows for r in rs}
    # Residual spread: how far ends still scatter once each rank is corrected.
    con.execute("CREATE OR REPLACE TEMP TABLE tf_offsets (rank INTEGER, off BIGINT)")
    con.executemany("INSERT INTO tf_offsets VALUES (?, ?)", list(rank_offset.items()))
    spread = con.execute("""
        WITH c AS (SELECT c.comm, c.step, c.seq, c.rank, c.end_ns + o.off AS end_ns
                   FROM collectives c JOIN tf_offsets o USING (rank)),
             s AS (SELECT comm, step, seq, max(end_ns) - min(end_ns) AS spread FROM c
                   GROUP BY ALL HAVING count(DISTINCT rank) >= 2)
        SELECT quantile_disc(spread, 0.5) FROM s""").fetchone()[0] or 0
    applied = []
    for rank, off in sorted(rank_offset.items()):
        apply = off != 0 and (mode == "collectives" or abs(off) > spread)
        con.execute("UPDATE traces SET clock_offset_ns = clock_offset_ns + ?, clock_spread_ns = ? WHERE rank = ?",
                    [off if apply else 0, spread, rank])
        if apply:
            applied.append((rank, off))
    for rank, off in applied:
        for table, cols in TIME_COLUMNS.items():
            sets = ", ".join(f"{c} = {c} + {int(off)}" for c in cols)
            con.execute(f"UPDATE {table} SET {sets} WHERE rank = ?", [rank])
    return applied

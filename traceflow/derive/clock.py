"""Clock alignment between hosts (DESIGN.md, "Clock alignment").

Ranks on one host share a clock. Ranks whose host is unknown (Kineto records none) are taken
to share it too unless the collectives contradict that: a rank that finishes collectives
before a peer has even started them cannot be on the same clock, and gets its own.
A clock domain's skew is the median over matched collectives of (its ranks' end - the median
end across ranks), relative to the domain of the lowest rank. The offset is applied when it
is larger than the residual spread: the median distance of those differences from the skew.
"""
from __future__ import annotations

VIOLATION_TOLERANCE_NS = 100_000   # clock noise allowed before an end-before-start counts
VIOLATION_SHARE = 0.10             # share of a rank's collectives that must contradict one clock

DOMAINS_SQL = """
WITH last AS (
    SELECT comm, step, seq, max(start_ns) AS last_start FROM collectives
    GROUP BY ALL HAVING count(DISTINCT rank) >= 2
), v AS (
    SELECT c.rank, avg((c.end_ns < l.last_start - {tol})::INTEGER) AS share
    FROM collectives c JOIN last l USING (comm, step, seq) GROUP BY c.rank
)
SELECT t.rank, CASE WHEN nullif(t.hostname, '') IS NOT NULL THEN 'host:' || t.hostname
                    WHEN coalesce(v.share, 0) > {share} THEN 'rank:' || t.rank
                    ELSE 'host:?' END AS clock_domain
FROM traces t LEFT JOIN v USING (rank)
"""

SKEW_SQL = """
WITH m AS (
    SELECT comm, step, seq, quantile_disc(end_ns, 0.5) AS med_end
    FROM collectives GROUP BY ALL HAVING count(DISTINCT rank) >= 2
), d AS (
    SELECT c.rank, c.comm, c.step, c.seq, c.end_ns - m.med_end AS delta FROM collectives c JOIN m USING (comm, step, seq)
), s AS (
    SELECT g.clock_domain, quantile_disc(d.delta, 0.5) AS skew FROM d JOIN tf_domains g USING (rank) GROUP BY ALL
)
SELECT g.clock_domain, min(g.rank) AS first_rank, list(DISTINCT g.rank ORDER BY g.rank) AS ranks, any_value(s.skew) AS skew,
       quantile_disc(abs(d.delta - s.skew), 0.5) AS spread
FROM d JOIN tf_domains g USING (rank) JOIN s USING (clock_domain)
GROUP BY g.clock_domain ORDER BY first_rank
"""

TIME_COLUMNS = {"gpu_ops": ["start_ns", "end_ns", "api_start_ns", "api_end_ns", "issue_start_ns"],
                "host_ops": ["start_ns", "end_ns"], "ranges": ["start_ns", "end_ns"]}


def align(con, mode: str = "auto") -> list[tuple[int, int]]:
    """Estimates offsets, stores them in traces, shifts the shifted ranks' times. Returns (rank, offset_ns)."""
    domains_sql = DOMAINS_SQL.format(tol=VIOLATION_TOLERANCE_NS, share=VIOLATION_SHARE)
    if mode == "collectives":  # every rank its own clock: estimate all
        domains_sql = "SELECT rank, 'rank:' || rank AS clock_domain FROM traces"
    con.execute(f"CREATE OR REPLACE TEMP TABLE tf_domains AS {domains_sql}")
    rows = con.execute(SKEW_SQL).fetchall()
    if len(rows) < 2:
        return []
    ref_skew = rows[0][3]
    applied = []
    for domain, _, ranks, skew, spread in rows:
        off = -(skew - ref_skew)
        apply = off != 0 and abs(off) > (spread or 0)
        for rank in ranks:
            con.execute("UPDATE traces SET clock_offset_ns = clock_offset_ns + ?, clock_spread_ns = ? WHERE rank = ?",
                        [off if apply else 0, spread, rank])
            if apply:
                applied.append((rank, off))
    for rank, off in applied:
        for table, cols in TIME_COLUMNS.items():
            sets = ", ".join(f"{c} = {c} + {int(off)}" for c in cols)
            con.execute(f"UPDATE {table} SET {sets} WHERE rank = ?", [rank])
    return applied

"""Clock alignment between hosts (docs/clock-alignment.md).

Ranks on one named host share a clock. Every other rank (Kineto records no host name, so this is
the usual case for multi-node Kineto jobs) is tested on its own: a matched collective ends at about
the same moment on every rank, so a rank whose clock is off shows its collective ends shifted, all
the same way, from its peers'.

The evidence for a clock unit (a host's ranks, or one rank of unknown host) is the distribution of
(its end of a collective - the median end among the other ranks), over every collective it shares
with them:
- the estimate is the median of that distribution, its spread the median absolute deviation;
- under one shared clock the differences fall on both sides of zero. Ranks sharing one GPU are the
  hard case: there NCCL kernel ends differ by milliseconds (on the bundled h100 jobs the medians
  reach 3.1 ms, with 48-52% of the differences positive), which is not skew;
- a real shift moves them all one way. A sign test decides whether it is consistent: so many
  differences share the estimate's sign that one shared clock would give that under 1% of the
  time (two-sided binomial test at p = 0.5), with at least MIN_COLLECTIVES collectives;
- a short capture (under MIN_COLLECTIVES, where no sign test can pass) is consistent when every
  difference lies on one side (at least MIN_SHORT) and the estimate is MAGNITUDE_FACTOR spreads
  from zero, with 3 units or more (the natural offsets below need peers to compare with);
- consistent is not enough either: ranks time-sliced on one GPU end collectives in a fixed order,
    each consistently early or late by a few ms. So the estimate must also exceed twice the median
  |estimate| of all units (with 3 units or more) and three times its own spread.
Every unit is decided once, on the recorded times; then the shifted ones are corrected and all are
measured again for the stored figures. Offsets are relative to the clock of the lowest rank.

`--align collectives` treats every rank as its own unit and applies every estimate larger than its
spread; `--align off` changes nothing. Estimates, spreads and the reason are stored in `traces`
(clock_skew_ns, clock_spread_ns, clock_note) whether or not they were applied.

Size: the tests above, each with the measurement that set its threshold, and the offsets stored
(the times move by the graph's clock shift, graph.py, from the declared `time` columns).
"""
from __future__ import annotations

import math
import warnings

import numpy as np

MIN_COLLECTIVES = 8        # fewer matched collectives are too few for the sign test
# Short captures: 6 collectives can never pass the sign test (p >= 0.03). A shift there shows as
# every difference on one side, far outside their spread: a 20 ms shift on a 3-step capture gave
# +22.5 ms with a 1.9 ms spread (ratio 12). Unshifted ranks sharing one GPU also sit on one side, by
# 2-7 ms with spreads of 10 us (ratio up to 660), which the natural-offset rule below tells apart;
# bench/clock_short.py measures both rates on windows of the real jobs.
MIN_SHORT = 4              # at least this many collectives, all on one side
MAGNITUDE_FACTOR = 5.0     # and the estimate this many spreads from zero
SIGN_TEST_P = 0.01         # two-sided p-value under which the differences are not one clock's jitter
NEGLIGIBLE_NS = 50_000     # shifts below this are within the precision of the collective ends
NATURAL_FACTOR = 2.0       # a shift must exceed this many times the peers' median |offset|

_ENDS_SQL = """
WITH m AS (SELECT comm, step, seq FROM collectives GROUP BY ALL HAVING count(DISTINCT rank) >= 2)
SELECT c.rank, (dense_rank() OVER (ORDER BY c.comm, c.step, c.seq) - 1)::BIGINT AS k, max(c.end_ns) AS end_ns
FROM collectives c JOIN m USING (comm, step, seq)
GROUP BY c.rank, c.comm, c.step, c.seq
"""


def _sign_test_p(agree: int, n: int) -> float:
    """Two-sided binomial p-value of `agree` or more of `n` differences sharing one sign at p = 0.5."""
    tail = sum(math.comb(n, k) for k in range(agree, n + 1)) / 2.0 ** n
    return min(1.0, 2 * tail)


class _Unit:
    def __init__(self, name: str, cols: list[int]):
        self.name, self.cols = name, cols
        self.applied = 0.0          # ns subtracted from this unit's times
        self.est: float | None = None
        self.spread: float | None = None
        self.n = self.agree = 0
        self.p = 1.0
        self.reason = ""            # the evidence when it was first found shifted

    def measure(self, m: np.ndarray):
        others = np.setdiff1d(np.arange(m.shape[1]), self.cols)
        if len(others) == 0:
            self.n = 0
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: collectives without peers
            ref = np.nanmedian(m[:, others], axis=1)
        d = (m[:, self.cols] - ref[:, None]).ravel()
        d = d[~np.isnan(d)]
        self.n = len(d)
        if not self.n:
            self.est = self.spread = None
            return
        self.est = float(np.median(d))
        self.spread = float(np.median(np.abs(d - self.est)))
        self.agree = int(np.sum(np.sign(d) == np.sign(self.est))) if self.est else 0
        self.p = _sign_test_p(self.agree, self.n)

    def shifted(self, mode: str, natural: float) -> bool:
        """natural: the median |estimate| of all units (0 with fewer than 3), what time-sliced ranks show."""
        if not self.n or self.est is None or abs(self.est) < NEGLIGIBLE_NS:
            return False
        if mode == "collectives":
            return abs(self.est) > (self.spread or 0)
        consistent = self.n >= MIN_COLLECTIVES and self.p < SIGN_TEST_P
        one_sided = (self.n >= MIN_SHORT and self.agree == self.n
                     and abs(self.est) > MAGNITUDE_FACTOR * (self.spread or 0) and natural > 0)
        if not (consistent or one_sided):
            return False
        # Consistent is not enough: ranks time-sliced on one GPU end their collectives in a fixed
        # order, each consistently early or late (bundled ddp4_straggler: -6.6, +2.1, -2.1, +6.6 ms,
        # spreads of 10 us). A shifted rank stands out of what its peers show.
        return abs(self.est) > max(NATURAL_FACTOR * natural, 3 * (self.spread or 0))

    def evidence(self) -> str:
        if not self.n or self.est is None or self.spread is None:
            return "no collective matched with other ranks"
        return (f"collectives end {self.est / 1e6:+.3f} ms from its peers' (median of {self.n}; "
                f"{self.agree} of {self.n} on that side, spread {self.spread / 1e6:.3f} ms)")


def end_matrix(con) -> tuple[np.ndarray, list[int], list[tuple[int, str | None]]]:
    """Matched collectives' ends (rows) per rank (columns), ns from the earliest; NaN where a rank
    has no part in one. With the ranks (column order) and (rank, hostname) of every trace."""
    traces = con.execute("SELECT rank, nullif(hostname, '') FROM traces ORDER BY rank").fetchall()
    rows = con.execute(_ENDS_SQL).fetchnumpy()
    ranks = sorted({r for r, _ in traces})
    if not len(rows["rank"]):
        return np.full((0, len(ranks)), np.nan), ranks, traces
    col = {r: i for i, r in enumerate(ranks)}
    m = np.full((int(rows["k"].max()) + 1, len(ranks)), np.nan)
    ends = rows["end_ns"].astype(np.int64)
    m[rows["k"].astype(np.int64), [col[int(r)] for r in rows["rank"]]] = (ends - ends.min()).astype(np.float64)
    return m, ranks, traces


def decide(m: np.ndarray, units: list[_Unit], mode: str = "auto") -> list[_Unit]:
    """The units found shifted, each decided once on the recorded times `m`."""
    for u in units:
        u.measure(m)
    ests = [abs(u.est) for u in units if u.est is not None]
    natural = float(np.median(ests)) if len(ests) >= 3 else 0.0
    flagged = [u for u in units if u.shifted(mode, natural)]
    if len(flagged) == len(units):  # every unit off its peers: keep the lowest rank's clock as the reference
        flagged = flagged[1:]
    return flagged


def sliced_groups(con) -> list[list[int]]:
    """Rank groups whose kernels take turns on one GPU as recorded (table gpu_sharing, derive/gpu_sharing.py)."""
    if not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'gpu_sharing'").fetchone()[0]:
        return []
    return [list(r) for (r,) in con.execute("SELECT ranks FROM gpu_sharing WHERE time_sliced ORDER BY device_key").fetchall()]


def clock_units(traces: list[tuple[int, str | None]], col: dict[int, int], mode: str,
                sliced: list[list[int]]) -> list[_Unit]:
    """The clocks to estimate: a named host's ranks share one (mode auto); so do ranks time-slicing
    one GPU in every mode, since their kernels interleave without overlap only at the recorded offset
    (any shift of a turn's length or more runs two contexts on the device at once: bundled
    ddp4_sync_stall, `--align collectives` moved rank 2 by +2.395 ms, one turn, before this rule)."""
    parent = {r: r for r, _ in traces}

    def root(r: int) -> int:
        while parent[r] != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r

    def join(a: int, b: int):
        parent[root(b)] = root(a)

    first_on: dict[str, int] = {}
    for r, host in traces:
        if host is not None and mode == "auto":
            join(first_on.setdefault(host, r), r)
    for group in sliced:
        present = [r for r in group if r in parent]
        for r in present[1:]:
            join(present[0], r)
    members: dict[int, list[int]] = {}
    for r, _ in traces:
        members.setdefault(root(r), []).append(r)
    hosts = dict(traces)
    units = []
    for rs in sorted(members.values()):
        rs = sorted(set(rs))
        host_names = {hosts[r] for r in rs}
        if len(rs) == 1:
            name = f"rank {rs[0]}" if not (mode == "auto" and hosts[rs[0]]) else f"host {hosts[rs[0]]}"
        elif mode == "auto" and len(host_names) == 1 and None not in host_names:
            name = f"host {next(iter(host_names))}"
        else:
            name = f"ranks {', '.join(map(str, rs))} (one GPU, time-sliced)"
        units.append(_Unit(name, sorted({col[r] for r in rs})))
    return units


def align(con, mode: str = "auto") -> tuple[list[str], bool]:
    """Estimates each rank's clock offset and stores it in `traces.clock_offset_ns`; the times move
    by the graph's clock shift (graph.py; a cluster's views add the offset themselves). Returns the
    warnings for the user and whether a rank found off moved."""
    # Long because: one decision (estimate per host, choose, apply, warn) over shared per-host arrays.
    m, ranks, traces = end_matrix(con)
    if len(ranks) < 2 or not len(m):
        return [], False
    col = {r: i for i, r in enumerate(ranks)}

    units = clock_units(traces, col, mode, sliced_groups(con))
    if len(units) < 2:  # one named host, or one GPU time-sliced by every rank: one clock
        if "time-sliced" in units[0].name:  # each rank's estimate stored all the same, as for ranks of unknown host
            for r in ranks:
                u = _Unit(f"rank {r}", [col[r]])
                u.measure(m)
                con.execute("UPDATE traces SET clock_skew_ns = ?, clock_spread_ns = ?, clock_note = ? WHERE rank = ?",
                            [None if u.est is None else round(u.est), None if u.spread is None else round(u.spread),
                             f"not shifted: {u.evidence()}; sign test p = {u.p:.2g}; {units[0].name} share one clock "
                             "(their kernels take turns without overlap only as recorded)", r])
        return [], False

    # One decision for every unit, from the recorded times: corrections made one at a time would
    # cascade (after the most shifted rank is corrected, the fixed ordering of time-sliced ranks
    # makes the next one stand out, and so on).
    flagged = decide(m, units, mode)
    recorded = {id(u): u.est for u in units}  # the skew estimates on the recorded times: what traces stores
    if (len(units) == 2 and len(flagged) == 1 and "time-sliced" in flagged[0].name
            and min(len(u.cols) for u in units) == 1):
        # a time-sliced group and one rank apart: the group's ranks agree among themselves (their
        # kernels take turns), so the lone rank is the one off (a one-step capture: its 7 collectives
        # are too few for the sign test, the group's 21 are not)
        lone = next(u for u in units if u is not flagged[0])
        lone.est, flagged = -(flagged[0].est or 0.0), [lone]
    from .gpu_sharing import fit_offset
    for u in flagged:
        u.reason = u.evidence()
        if len(u.cols) == 1 and u.est is not None and sliced_groups(con):
            # a rank that took turns on a GPU with others: the offset at which their kernels interleave
            fitted = fit_offset(con, ranks[u.cols[0]], u.est)
            if fitted is not None:
                u.reason += f"; fitted to {fitted / 1e6:+.3f} ms, where its kernels take turns with its GPU's other ranks"
                u.est = fitted
        m[:, u.cols] -= u.est
        u.applied = u.est or 0.0
    for u in units:
        u.measure(m)

    ref = next(u.applied for u in units if col[ranks[0]] in u.cols)
    notes = []
    moved = False
    for u in units:
        off = -(u.applied - ref)                 # added to this unit's times
        skew = recorded[id(u)]                   # estimated skew vs the peers, on the recorded times
        applied = abs(u.applied) > 0
        if applied:
            note = f"shifted by {off / 1e6:+.3f} ms: its {u.reason}"
        elif u.n:
            note = f"not shifted: {u.evidence()}" + ("" if mode == "collectives" else
                                                     f"; sign test p = {u.p:.2g}, shifted only below {SIGN_TEST_P}")
        else:
            note = "not shifted: no collective matched with other ranks"
        for c in u.cols:
            rank = ranks[c]
            con.execute("UPDATE traces SET clock_offset_ns = clock_offset_ns + ?, clock_skew_ns = ?, "
                        "clock_spread_ns = ?, clock_note = ? WHERE rank = ?",
                        [round(off), None if skew is None else round(skew),
                         None if u.spread is None else round(u.spread), note, rank])
            if round(off):
                moved = True
        if applied:
            notes.append(f"{u.name}: clock {note}")
    if not any(u.applied for u in units) and mode == "auto":
        big = max((u for u in units if u.n), key=lambda u: abs(u.est or 0), default=None)
        if big is not None:
            # Nothing is wrong here (every bundled job lands here): a note for the report's inputs
            # section, on the rank that came closest, not a warning on every ingest.
            con.execute("UPDATE traces SET clock_note = concat_ws('; ', clock_note, ?) WHERE rank = ?",
                        ["the ranks taken to share one clock (this rank came closest to a consistent "
                         "offset); --align collectives shifts them anyway", ranks[big.cols[0]]])
    return notes, moved


"""Ranks time-slicing one GPU, read from the kernels themselves (docs/findings.md, "Who caused a wait, time slicing").

Candidates are ranks with the same device index on the same host (or no host recorded: Kineto).
Processes on one GPU without MPS time-slice it: the device serves one context for a turn (~2.3 ms on
the bundled ddp4_sync_stall), then the next. A kernel running when its turn ends is preempted and
resumes in its next turn, so its recorded span contains the other ranks' whole turns: such spans
(a kernel containing a whole kernel of another rank) are left out, and among the rest kernels of
different ranks never overlap. Kernels of ranks on different GPUs with the same index (one per
node) run at once and overlap; so do those of a rank whose clock is off (last row):

| job | kernel time overlapping another rank's | with preempted spans left out | turns |
|---|---|---|---|
| bundled ddp4_sync_stall (Kineto, 4 ranks on one H100) | 49 % | 0.00 % | 122, slices of 2.08 ms |
| h100 nsys ddp4_sync_stall (the same job) | 48 % | 0.00 % | 490, slices of 2.05 ms |
| bundled ddp2_flops (2 ranks on one H100) | — | 0.00 % | 84-125 |
| rank 3 of the bundled job moved +20 ms (a test's edit) | — | 1.7 % with ranks 1, 2 | — |

(param-dlrm8 and hta-2rank put each rank on its own device index: no candidates.)
(`python -m traceflow.derive.gpu_sharing DB` prints the table of a database.)

Table gpu_sharing, per candidate device (two ranks or more on it): one row per group of ranks that
take turns pairwise, and one row (time_sliced false) of the ranks in none:
  device_key   VARCHAR    host:device ('' where no host is recorded)
  ranks        INTEGER[]  the group's ranks
  time_sliced  BOOLEAN    the ranks' kernels never overlap (under OVERLAP_MAX_PCT of their kernel time,
                          timestamp rounding) and the device changed hands at least MIN_TURNS times
  turn_ns      BIGINT     the time slice: the 90th percentile of turns, a turn being a run of one rank's kernels
                          with no other rank's between (first start to last end; ns); NULL where not time-sliced
  how          VARCHAR    how it was told, with the figures
  overlap_pct  DOUBLE     share of the ranks' kernel time (preempted spans left out) overlapping another rank's
  turns        BIGINT     turns counted

Size: the detection of turns and the clock fit that uses them share the kernels' arrays.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from .. import sqlmodules

OVERLAP_MAX_PCT = 0.5   # timestamp rounding (Kineto: 1 us) leaves a trace of overlap on a time-sliced GPU
MIN_TURNS = 10          # fewer hand-overs are too few to tell time slicing from chance (one step of the bundled job: 16 per pair)

DECLARED = sqlmodules.declared("""
-- @table gpu_sharing: ranks time-slicing one GPU, told from their kernels (traceflow/derive/gpu_sharing.py)
-- @column device_key VARCHAR key host:device index ('' where no host is recorded)
-- @column ranks INTEGER[] key the ranks of one group: every pair's kernels take turns on the device, or
--     (time_sliced false) the rest
-- @column time_sliced BOOLEAN flag the ranks' kernels never overlap (preempted spans left out) over 10 hand-overs or more
-- @column turn_ns BIGINT figure:ns the time slice: the 90th percentile of turns (ns); NULL where not time-sliced
-- @column how VARCHAR text how it was told, with the figures
-- @column overlap_pct DOUBLE figure:percent share of the ranks' kernel time overlapping another rank's
--     (preempted spans left out)
-- @column turns BIGINT figure:count hand-overs counted
""", __file__)

# the candidate devices: host:device keys with kernels of two ranks or more, in key order
_DEVICES = """
WITH t AS (SELECT rank, any_value(hostname) AS hostname FROM traces GROUP BY rank)
SELECT coalesce(t.hostname, '') || ':' || g.device AS device_key FROM gpu_ops g JOIN t USING (rank)
WHERE g.kind = 'kernel' AND g.device IS NOT NULL GROUP BY 1 HAVING count(DISTINCT g.rank) > 1 ORDER BY 1
"""
# one device's compute kernels, sorted by start (no key string per kernel: 2.1 M of them at 4,096 ranks)
_KERNELS = """
WITH t AS (SELECT rank, any_value(hostname) AS hostname FROM traces GROUP BY rank)
SELECT g.rank, g.start_ns, g.end_ns FROM gpu_ops g JOIN t USING (rank)
WHERE g.kind = 'kernel' AND g.category = 'compute' AND g.device IS NOT NULL AND g.end_ns > g.start_ns
  AND coalesce(t.hostname, '') || ':' || g.device = ?
ORDER BY g.start_ns, g.end_ns
"""


def _union_ns(s: np.ndarray, e: np.ndarray) -> int:
    """Length of the union of intervals sorted by start."""
    if not len(s):
        return 0
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    ends = np.maximum.reduceat(e, idx)
    return int(np.sum(ends - s[idx]))


def against_other_ranks(s: np.ndarray, e: np.ndarray, rank: np.ndarray, test) -> np.ndarray:
    """A flag per kernel (sorted by start): test(my starts, my ends, the others' starts, the others'
    ends) for each rank's kernels against every other rank's on the device (claims.py asks too)."""
    out = np.zeros(len(s), dtype=bool)
    for r in np.unique(rank):
        mine, other = rank == r, rank != r
        if other.any():
            out[np.flatnonzero(mine)] = test(s[mine], e[mine], s[other], e[other])
    return out


def _holds_whole(ms, me, os_, oe):
    j = np.searchsorted(os_, ms, side="left")  # the first other-rank kernel starting after mine
    ok = j < len(os_)
    hold = np.zeros(len(ms), dtype=bool)
    hold[ok] = oe[j[ok]] <= me[ok]
    return hold


def _preempted(s: np.ndarray, e: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Kernels whose span holds a whole kernel of another rank: on a shared GPU, preempted at the end
    of a turn and resumed in the next. (The first other-rank kernel starting after it is the test.)"""
    return against_other_ranks(s, e, rank, _holds_whole)


def _kept(s: np.ndarray, e: np.ndarray, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    keep = ~_preempted(s, e, rank)
    return s[keep], e[keep], rank[keep]


def _overlap_pct(s: np.ndarray, e: np.ndarray, rank: np.ndarray) -> float:
    per_rank = sum(_union_ns(s[rank == r], e[rank == r]) for r in np.unique(rank))
    return 100.0 * (per_rank - _union_ns(s, e)) / per_rank if per_rank else 0.0


def _turn_starts(rank: np.ndarray) -> np.ndarray:
    change = np.ones(len(rank), dtype=bool)
    change[1:] = rank[1:] != rank[:-1]
    return np.flatnonzero(change)


def measure(s: np.ndarray, e: np.ndarray, rank: np.ndarray) -> tuple[float, int, int | None]:
    """(overlap %, turns, median turn ns) of one device's kernels sorted by start."""
    s, e, rank = _kept(s, e, rank)
    overlap = _overlap_pct(s, e, rank)
    if not len(s):
        return overlap, 0, None
    idx = _turn_starts(rank)
    turn_ns = np.maximum.reduceat(e, idx) - s[idx]
    # a turn cut by the time slice is as long as the slice; shorter ones end when the rank runs out
    # of queued work: the 90th percentile is the slice (bundled ddp4_sync_stall: 2.08 ms; median 1.95)
    return overlap, len(idx), int(np.percentile(turn_ns, 90))


def _device_kernels(con, keys: Iterable[str] | None = None) -> Iterator[tuple[str, tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """(device key, (starts, ends, ranks)) of the candidate devices' compute kernels (of `keys` where
    given), sorted by start: one device at a time (a device's are all fetched when the one before is done)."""
    for (key,) in con.execute(_DEVICES).fetchall():
        if keys is not None and key not in keys:
            continue
        k = con.execute(_KERNELS, [key]).fetchnumpy()
        if len(k["rank"]):
            yield key, (np.asarray(k["start_ns"], dtype=np.int64), np.asarray(k["end_ns"], dtype=np.int64),
                        np.asarray(k["rank"], dtype=np.int64))


def _sliced(s: np.ndarray, e: np.ndarray, rank: np.ndarray, idx: np.ndarray) -> tuple[bool, float, int, int | None]:
    """The test of the ranks whose kernels are at positions `idx` (ascending: the device's order)."""
    overlap, turns, turn_ns = measure(s[idx], e[idx], rank[idx])
    return overlap < OVERLAP_MAX_PCT and turns >= MIN_TURNS, overlap, turns, turn_ns


def _by_rank(rank: np.ndarray) -> dict[int, np.ndarray]:
    """{rank: its kernels' positions in the device's order}, in one sort (not a scan of every kernel per rank)."""
    order = np.argsort(rank, kind="stable")  # stable: each rank's positions stay ascending
    cut = np.flatnonzero(np.diff(rank[order])) + 1
    return {int(rank[part[0]]): part for part in np.split(order, cut)}


def _positions(at: dict[int, np.ndarray], ranks) -> np.ndarray:
    """The positions of these ranks' kernels in the device's order (what np.isin over all kernels selects)."""
    return np.sort(np.concatenate([at[r] for r in ranks]))


PASSES = (32, 128, None)  # the bound's passes: a rank's 32, then 128 longest kernels, then all (docs/scale-out.md)
CHUNK = 1 << 22  # elements of a pass's ranks × kernels matrices at a time (bounded memory)


def _pieces(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint pieces of kernels sorted by start: each from its kernel's start or the furthest end of
    the kernels before it, whichever is later, to its end (empty where that is earlier). Starts and
    ends both ascend."""
    prev = np.maximum.accumulate(np.concatenate((s[:1], e[:-1])))
    return np.maximum(s, prev), np.maximum(e, prev)


class _Bound:
    """A sound, cheap rejection of pairs of ranks that `_groups`' exact test would reject: one candidate
    rank against every rank already placed in a group at once (numpy, no loop over ranks).

    The exact test of ranks q, r rejects the pair when (a) 2·min(kernels) + 1 < MIN_TURNS, (b) all of
    one rank's kernels start before the other's first, or (c) after `_kept` its overlap % is not under
    OVERLAP_MAX_PCT (or its turns are too few: not bounded here). (a) and (b) are the exact test's own
    skips, on per-rank counts and first/last starts. For (c) the overlap % is 100·|A∩B| / (|A| + |B|),
    A and B the unions of q's and r's kept kernels. Why the bound below never exceeds it:
    - `_kept` leaves out a kernel k of q exactly when r's first kernel starting at or after k's start
      ends by k's end (`_holds_whole`; one rank's positions keep the device's order, so r's kernels
      alone give the same first kernel as the pair's merged arrays). Each kernel the bound uses is
      tested with that very rule on the partner's full arrays: a kernel called kept is kept.
    - a rank's kernels used are cut to disjoint pieces (`_pieces`: each a part of its kernel), so the
      kept pieces P of q and Q of r lie in A and B, and Σ over pairs of pieces |p ∩ q| = |P ∩ Q| ≤ |A ∩ B|.
    - |A| + |B| ≤ U_q + U_r, the unions of all their kernels, kept or not; and where every kernel
      is tested (the last pass), |A| ≤ the sum of q's kept kernels' lengths, likewise |B| (preempted
      spans are half the kernel time of the bundled ddp4_sync_stall: U alone let 9 of 56 overlapping
      pairs of its derived ranks through).
    So 100·|P∩Q| / (the bound of |A| + |B|) ≤ the overlap %; where it reaches OVERLAP_MAX_PCT (with a margin of
    1e-9 for rounding) the exact test rejects the pair. In PASSES, each on the ranks of the groups the
    one before left in: a rank's 32 longest kernels (most pairs of overlapping ranks), its 128, then
    all (1,024 derived ranks: 523,776 pairs, 64,860 left after the first pass, 2,806 after the second;
    some overlap by as little as 0.74 %, 145 µs apart, which only the last pass sees).
    A group is rejected when one of its members is (the exact test asks all of them: on the derived
    ranks the first member of most groups takes turns with the candidate, the second not); every
    group not rejected is tested exactly as before, in the same order, so the groups are those the
    exhaustive test makes, by construction (tests/test_gpu_sharing.py compares them)."""

    def __init__(self, s: np.ndarray, e: np.ndarray, at: dict[int, np.ndarray]):
        self.s, self.e, self.at = s, e, at
        self.t0 = int(s.min()) if len(s) else 0
        self.span = int(e.max()) - self.t0 + 1 if len(s) else 1
        self.ok = self.span * (len(at) + 1) < 2 ** 62  # the keys below fit in int64 (else: no bound (c))
        # per pass: the kernels it uses of the placed ranks (rows), one rank after the other in the
        # order they were placed, keyed row·span + start - t0 (sorted as rows are added: one search
        # finds each row's), with their ends and pieces
        size = [sum(min(len(p), a or len(p)) for p in at.values()) for a in PASSES]
        self.lv = [{k: np.empty(m, dtype=np.int64) for k in ("key", "e", "ps", "pe")} for m in size]
        self.filled = [0 for _ in PASSES]
        self.seg_end = [np.zeros(len(at), dtype=np.int64) for _ in PASSES]
        self.full = len(PASSES) - 1  # the pass of all kernels (its keys: every kernel of each row)
        self.G = 0  # rows
        self.group, self.n, self.first, self.last = (np.zeros(len(at), dtype=np.int64) for _ in range(4))
        self.union = np.zeros(len(at), dtype=np.float64)

    def rank_info(self, r: int) -> dict:
        pos = self.at[r]
        s, e = self.s[pos], self.e[pos]
        longest = np.argsort(-(e - s), kind="stable")
        lv = []
        for a in PASSES:
            take = np.sort(longest[:a]) if a else slice(None)  # in start order
            lv.append((s[take], e[take], *_pieces(s[take], e[take])))
        return {"n": len(pos), "first": s[0], "last": s[-1], "union": _union_ns(s, e), "lv": lv}

    def add(self, x: dict, group: int) -> None:
        """The rank whose rank_info is x, placed in group number `group`."""
        g = self.G
        for i, (s, e, ps, pe) in enumerate(x["lv"]):
            lv, a, b = self.lv[i], self.filled[i], self.filled[i] + len(s)
            lv["key"][a:b], lv["e"][a:b], lv["ps"][a:b], lv["pe"][a:b] = g * self.span + (s - self.t0), e, ps, pe
            self.filled[i] = self.seg_end[i][g] = b
        self.group[g], self.n[g], self.first[g], self.last[g], self.union[g] = \
            group, x["n"], x["first"], x["last"], x["union"]
        self.G += 1

    def rejected(self, x: dict, groups: int) -> np.ndarray:
        """Per group, True where a pair (one of its members, the rank whose rank_info is x) certainly
        fails the exact test."""
        G, group = self.G, self.group[:self.G]
        out = ((2 * np.minimum(self.n[:G], x["n"]) + 1 < MIN_TURNS)
               | (self.last[:G] < x["first"]) | (x["last"] < self.first[:G]))
        if self.ok and G:
            for lvl in range(len(PASSES)):
                gone = np.bincount(group, weights=out, minlength=groups) > 0
                rows = np.flatnonzero(~gone[group])
                step = max(1, CHUNK // len(x["lv"][lvl][0]))
                for c in range(0, len(rows), step):
                    part = rows[c:c + step]
                    lb, size = self._overlap_lb(lvl, part, x)
                    out[part] = 100.0 * lb >= OVERLAP_MAX_PCT * size * (1 + 1e-9)
        return np.bincount(group, weights=out, minlength=groups) > 0

    def _overlap_lb(self, lvl: int, rows: np.ndarray, x: dict) -> tuple[np.ndarray, np.ndarray]:
        """Per row: |kept pieces of its kernels ∩ kept pieces of x's|, those of pass lvl (ns), and a
        bound of |A| + |B| (the unions of all kernels; in the pass of all kernels, of the kept ones'
        lengths where less)."""
        lv, seg = self.lv[lvl], self.seg_end[lvl]
        lo_end = np.where(rows > 0, seg[rows - 1], 0)
        lens = seg[rows] - lo_end
        rid = np.repeat(np.arange(len(rows)), lens)
        pos = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens - lo_end, lens)
        q_s = lv["key"][pos] - rows[rid] * self.span + self.t0
        q_e, q_ps, q_pe = lv["e"][pos], lv["ps"][pos], lv["pe"][pos]
        x_s, x_e, x_ps, x_pe = x["lv"][lvl]
        xs_all, xe_all = x["lv"][self.full][0], x["lv"][self.full][1]
        # the rows' kernels against x's: kept unless x's first kernel starting at or after one's start
        # ends by its end
        j = np.searchsorted(xs_all, q_s, side="left")
        kq = (j >= len(xs_all)) | (xe_all[np.minimum(j, len(xs_all) - 1)] > q_e)
        # x's kernels against each row's (all of its kernels: the last pass's keys), one search for all rows
        keys, full = self.lv[self.full]["key"][:self.filled[self.full]], self.seg_end[self.full]
        j = np.searchsorted(keys, rows[:, None] * self.span + (x_s - self.t0)[None, :], side="left")
        kr = (j >= full[rows][:, None]) | (self.lv[self.full]["e"][np.minimum(j, len(keys) - 1)] > x_e[None, :])
        # each row piece overlaps x's pieces lo..hi-1, the inner ones whole
        cl = np.zeros((len(rows), len(x_s) + 1), dtype=np.int64)
        np.cumsum(np.where(kr, x_pe - x_ps, 0), axis=1, out=cl[:, 1:])
        lo = np.searchsorted(x_pe, q_ps, side="right")  # x's first piece ending after the piece's start
        hi = np.searchsorted(x_ps, q_pe, side="left")   # x's first piece starting at or after its end
        loc, hic = np.minimum(lo, len(x_s) - 1), np.maximum(hi - 1, 0)
        ov = (cl[rid, hi] - cl[rid, lo] - kr[rid, loc] * np.maximum(0, q_ps - x_ps[loc])
              - kr[rid, hic] * np.maximum(0, x_pe[hic] - q_pe))
        lb = np.bincount(rid, weights=np.where((lo < hi) & kq, ov, 0), minlength=len(rows))
        ua, ub = self.union[rows], np.full(len(rows), x["union"])
        if lvl == self.full:
            ua = np.minimum(ua, np.bincount(rid, weights=np.where(kq, q_e - q_s, 0), minlength=len(rows)))
            ub = np.minimum(ub, np.where(kr, x_e - x_s, 0).sum(axis=1))
        return lb, ua + ub


def _groups(s: np.ndarray, e: np.ndarray, rank: np.ndarray, bound: bool = True) -> list[list[int]]:
    """Ranks that take turns with every other rank of their group (a rank whose clock is off
    overlaps some of them: it is left out, and clock alignment fits it back).
    Each rank, in order, joins the first group all of whose members take turns with it (the exact test:
    each pair measured on its two ranks' kernels alone, merged by position, the device's order), or
    starts a group. `_Bound` first rejects, for all groups at once, those with a member that certainly
    fails the exact test with it; the rest are tested exactly, in order (bound=False: every group, as
    before). The exact tests were quadratic in ranks: 6,112 at 128 derived ranks (docs/scale-out.md)."""
    at = _by_rank(rank)

    def sliced(q: int, r: int) -> bool:
        a, b = at[q], at[r]
        if 2 * min(len(a), len(b)) + 1 < MIN_TURNS:  # too few kernels to change hands that often
            return False
        if s[a[-1]] < s[b[0]] or s[b[-1]] < s[a[0]]:  # one rank's kernels all start before the other's: 2 turns
            return False
        idx = np.sort(np.concatenate((a, b)))
        ks, ke, kr = _kept(s[idx], e[idx], rank[idx])
        # measure's test without its percentile, the turns first (the cheaper)
        return len(_turn_starts(kr)) >= MIN_TURNS and _overlap_pct(ks, ke, kr) < OVERLAP_MAX_PCT

    groups: list[list[int]] = []
    cut = _Bound(s, e, at) if bound else None
    for r in sorted(at):
        if cut is None:
            tried: Iterable = range(len(groups))
        else:
            x = cut.rank_info(r)
            tried = np.flatnonzero(~cut.rejected(x, len(groups)))
        home = next((int(i) for i in tried if all(sliced(q, r) for q in groups[i])), None)
        if home is None:
            home = len(groups)
            groups.append([r])
        else:
            groups[home].append(r)
        if cut is not None:
            cut.add(x, home)
    return groups


def detect(con) -> None:
    """Fill gpu_sharing from gpu_ops (times as they stand: clock alignment calls it on the recorded ones)."""
    con.execute(sqlmodules.create_table("gpu_sharing", DECLARED["gpu_sharing"]))
    rows = []
    for key, (s, e, rank) in _device_kernels(con):
        where = ("the same device index (no host recorded)" if key.startswith(":")
                 else "the same host and device index")
        at = _by_rank(rank)
        groups = _groups(s, e, rank)
        rest = sorted(r for g in groups if len(g) == 1 for r in g)
        for g in [g for g in groups if len(g) > 1] + ([rest] if rest else []):
            sliced, overlap, turns, turn_ns = _sliced(s, e, rank, _positions(at, g))
            sliced = sliced and len(g) > 1
            how = (f"{where}; {overlap:.2f} % of their kernel time overlaps another rank's (preempted spans left out), "
                   f"{turns} turns" + (f", slices of {turn_ns / 1e6:.2f} ms" if sliced and turn_ns else ""))
            rows.append((key, g, sliced, turn_ns if sliced else None, how, round(overlap, 3), turns))
    if rows:
        con.executemany("INSERT INTO gpu_sharing VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    from .. import comments
    comments.comment_declared(con, DECLARED, ["gpu_sharing"])


FIT_WINDOW_NS = 10_000_000  # the collective estimate is off by the ranks' natural offsets: 1.4-6.6 ms measured
FIT_COARSE_NS = 100_000    # steps of the search; a turn is ~2 ms, so the coarse minimum lies in the right one
FIT_FINE_NS = 2_000
FIT_SPAN_NS = 500_000_000  # half the stretch of kernels searched on (100 ms held spurious fits: 13.5 ms for 20)


def _shifted_overlap(s: np.ndarray, e: np.ndarray, rk: np.ndarray, rank: int, d: float) -> float:
    """overlap % with `rank`'s kernels moved by -d"""
    mine = rk == rank
    s2, e2 = s.copy(), e.copy()
    s2[mine] -= round(d)
    e2[mine] -= round(d)
    o = np.argsort(s2, kind="stable")
    return measure(s2[o], e2[o], rk[o])[0]


def fit_offset(con, rank: int, estimate_ns: float) -> float | None:
    """The offset near `estimate_ns` (subtracted from `rank`'s times) at which its kernels take turns
    with a time-sliced group on its device without overlap; None where no such group or offset.
    A shift found from collective ends carries the ranks' natural offsets on a shared GPU (bundled
    ddp4_sync_stall, rank 3 moved +20 ms: estimate 21.44 ms); the kernels' interleaving is exact."""
    groups = con.execute("SELECT device_key, ranks FROM gpu_sharing WHERE time_sliced").fetchall()
    for key, (s, e, rk) in _device_kernels(con, {k for k, g in groups if rank not in g}):
        group = next((list(g) for k, g in groups if k == key and rank not in g), None)
        if group is None or rank not in set(rk.tolist()):
            continue
        sel = np.isin(rk, group + [rank])
        s, e, rk = s[sel], e[sel], rk[sel]
        # search on 1 s of the rank's kernels (the middle of its capture), check on all
        mid = int(np.median(s[rk == rank]))
        win = (s > mid - FIT_SPAN_NS - FIT_WINDOW_NS) & (s < mid + FIT_SPAN_NS + FIT_WINDOW_NS)

        def overlap(d: float, part: np.ndarray | None = None, s=s, e=e, rk=rk) -> float:
            return _shifted_overlap(s, e, rk, rank, d) if part is None else \
                _shifted_overlap(s[part], e[part], rk[part], rank, d)
        coarse = np.arange(estimate_ns - FIT_WINDOW_NS, estimate_ns + FIT_WINDOW_NS + 1, FIT_COARSE_NS)
        cv = np.array([overlap(d, win) for d in coarse])
        lows = coarse[cv <= cv.min() + 1e-9]
        best = lows[np.argmin(np.abs(lows - estimate_ns))]  # of equal fits, the nearest the estimate
        fine = np.arange(best - 1.5 * FIT_COARSE_NS, best + 1.5 * FIT_COARSE_NS + 1, FIT_FINE_NS)
        fv = np.array([overlap(d, win) for d in fine])
        best = float(np.median(fine[fv <= fv.min() + 1e-9]))  # the middle of the offsets that fit as well
        return float(best) if overlap(best) < OVERLAP_MAX_PCT else None
    return None


if __name__ == "__main__":
    import sys

    import duckdb
    mem = duckdb.connect()
    mem.execute(f"ATTACH '{sys.argv[1]}' AS src (READ_ONLY)")
    mem.execute("CREATE TABLE gpu_ops AS SELECT * FROM src.gpu_ops; CREATE TABLE traces AS SELECT * FROM src.traces")
    detect(mem)
    for row in mem.execute("SELECT * FROM gpu_sharing").fetchall():
        print(row)

"""Which rank each traced process is."""
from __future__ import annotations

import os
import re

from ..errors import InputError
from ..options import rank_pattern as compile_rank_pattern
from .model import ProcessTrace

# `rank3.sqlite`, `rank_3`, `rank-3.pt.trace.json`, `..._r3...`, `worker3_...`
DEFAULT_NAME_PATTERNS = [
    re.compile(r"(?i)rank[-_.]?(\d+)"),
    re.compile(r"(?i)(?:^|[^a-z0-9])r(\d+)(?=[^0-9]|$)"),
    re.compile(r"(?i)worker[-_.]?(\d+)"),
]


# The rank_source of a rank a fused file's events name (TraceLens's TraceFuse: `args.rank`,
# readers/kineto.py): one file, several ranks, told apart by it.
IN_FILE = "args.rank"

# Ranks and world sizes are stored as INTEGER: a value past this is a damaged file, not a job.
MAX_RANKS = 2**31 - 1


def _checked(t: ProcessTrace):
    """Drops (with a warning naming what) a world size or a stated rank the trace got wrong."""
    if t.world_size is not None and not (1 <= t.world_size <= MAX_RANKS):
        t.warnings.append(f"states world size {t.world_size}, which is not a world size: ignored")
        t.world_size = None
    r = t.rank_hint
    if r is not None and not (0 <= r < (t.world_size or MAX_RANKS)):
        why = f"not below its world size {t.world_size}" if t.world_size and r >= 0 else "not a rank"
        t.warnings.append(f"states rank {r} ({t.rank_hint_source or 'file'}), {why}: ignored")
        t.rank_hint = None


def rank_from_name(path: str, pattern: str | None = None) -> int | None:
    name = os.path.basename(path)
    if pattern:
        m = compile_rank_pattern(pattern).search(name)
        if not m:
            return None
        try:
            return int(m.group(1) if m.groups() else m.group(0))
        except ValueError:
            return None
    for rx in DEFAULT_NAME_PATTERNS:
        m = rx.search(name)
        if m:
            return int(m.group(1))
    return None


def _name_rank(t: ProcessTrace, r: int | None) -> int | None:
    if r is not None and r > MAX_RANKS:
        t.warnings.append(f"the rank {r} in the file name is not a rank: ignored")
        return None
    return r


def _without_helpers(traces: list[ProcessTrace]) -> list[ProcessTrace]:
    """A process with no GPU work beside processes with GPU work in one file (a data-loader worker, a
    launcher that called cudaGetDevice) is not a rank: left out, with a warning on the file's first
    rank saying how many and which. A file whose processes all lack GPU work keeps them."""
    by_file: dict[str, list[ProcessTrace]] = {}
    for t in traces:
        by_file.setdefault(t.source_path, []).append(t)
    out = []
    for group in by_file.values():
        gpu = [t for t in group if t.counts.get("gpu_ops", 0) > 0]
        if len(group) == 1 or not gpu or len(gpu) == len(group):
            out.extend(group)
            continue
        idle = [t for t in group if t not in gpu]
        for t in gpu:
            t.n_processes = len(gpu)
        host = sum(t.counts.get("host_ops", 0) for t in idle)
        gpu[0].warnings.append(f"{len(idle)} of its {len(group)} processes had no GPU work (pid "
                               f"{', '.join(str(t.pid) for t in idle)}; {host:,} host calls): not ranks, left out")
        out.extend(gpu)
    return out


def _by_device(chosen: list, owner: dict[int, str]) -> None:
    """Several processes of one file, none stating its rank, each on a GPU of its own: rank = the GPU's
    index (a launcher gives local rank k GPU k), when those ranks are free; one warning per file."""
    by_file: dict[str, list[int]] = {}
    for k, (t, _, _) in enumerate(chosen):
        if t.n_processes > 1:
            by_file.setdefault(t.source_path, []).append(k)
    for path, ks in by_file.items():
        group = [chosen[k][0] for k in ks]
        if any(chosen[k][1] is not None for k in ks) or any(len(t.devices) != 1 for t in group):
            continue
        devices = [t.devices[0] for t in group]
        if len(set(devices)) < len(devices) or any(d in owner or d > MAX_RANKS for d in devices):
            continue
        for k, d in zip(ks, devices):
            chosen[k] = (chosen[k][0], d, "device")
            owner[d] = path
        group[0].warnings.append(f"{len(group)} processes, none states its rank: ranks from their GPUs ("
                                 + ", ".join(f"pid {t.pid} on GPU {d} -> rank {d}" for t, d in zip(group, devices)) + ")")


def assign(traces: list[ProcessTrace], pattern: str | None = None, taken: dict[int, str] | None = None) -> list[tuple[ProcessTrace, int, str | None]]:
    """(trace, rank, where the rank came from), in input order, for the processes that are ranks
    (a process with no GPU work beside others that have some is not: _without_helpers).

    Precedence: --rank-pattern on the file name; the rank the file states (NCCL payload,
    Kineto distributedInfo); a number in the file name (single-process files only); for several
    processes in one file, each on its own GPU, the GPU's index; else the lowest free rank in file
    order, with a warning.
    """
    taken = dict(taken or {})
    traces = _without_helpers(traces)
    chosen: list[tuple[ProcessTrace, int | None, str | None]] = []
    for t in traces:
        _checked(t)
        r, src = None, None
        if pattern:
            r = _name_rank(t, rank_from_name(t.source_path, pattern))
            src = "pattern" if r is not None else None
        if r is None and t.rank_hint is not None:
            r, src = t.rank_hint, t.rank_hint_source or "file"
        if r is None and t.n_processes == 1:
            r = _name_rank(t, rank_from_name(t.source_path))
            src = "file name" if r is not None else None
        chosen.append((t, r, src))
    owner: dict[int, str] = dict(taken)
    for t, r, _ in chosen:
        if r is None:
            continue
        if r in owner:
            raise InputError(t.source_path, f"claims rank {r}, which {owner[r]} also claims "
                             "(use --rank-pattern to take ranks from the file names)")
        owner[r] = t.source_path
    _by_device(chosen, owner)
    out = []
    next_free = 0
    for t, r, src in chosen:
        if r is None:
            while next_free in owner:
                next_free += 1
            r, src = next_free, "file order"
            owner[r] = t.source_path
            where = f"process {t.pid}, one of {t.n_processes} in the file, states no rank" if t.n_processes > 1 \
                else "no rank in the file or its name"
            t.warnings.append(f"{where}: took rank {r} from file order")
        out.append((t, r, src))
    return out

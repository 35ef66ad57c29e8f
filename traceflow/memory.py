"""Where the memory went, in words: the memory finding of the verdict (docs/memory.md).

The figures are the memory packs' (queries/memory*.sql); this module only words them. A rank gets
a sentence when its peak reserve comes within tf_memory_limit_pct [10 %] of its device's memory
(memory.near_device_limit), or when its peak lies far above its peers' median
(memory_ranks.far_above_peers, tf_memory_peer_pct [20 %]), naming the op holding most of it.
"""
from __future__ import annotations


def mib(n) -> str:
    """Bytes as the page and the verdict print them."""
    if n is None:
        return "unknown"
    if abs(n) >= 2**30:
        return f"{n / 2**30:,.2f} GiB"
    if abs(n) >= 2**20:
        return f"{n / 2**20:,.1f} MiB"
    return f"{n / 2**10:,.1f} KiB" if abs(n) >= 2**10 else f"{n:,} B"


def has_memory(con, table: str = "memory_ranks") -> bool:
    """Whether the database has this memory pack and any rows in it (older databases have neither)."""
    try:
        return bool(con.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    except Exception:  # noqa: BLE001 - a database from before the memory packs: nothing to say
        return False


def sentences(con) -> list[str]:
    """The memory finding: one sentence per rank near its device's limit, one for a rank far above its peers."""
    if not has_memory(con):
        return []
    out = []
    for rank, dtype, dev, step, reserved, total, headroom in con.execute("""
            SELECT rank, device_type, device, step, peak_reserved_bytes, device_memory_bytes, headroom_pct
            FROM memory WHERE near_device_limit
            QUALIFY row_number() OVER (PARTITION BY rank ORDER BY headroom_pct, step) = 1
            ORDER BY headroom_pct, rank LIMIT 4""").fetchall():
        out.append(f"Rank {rank} is close to running out of memory: its allocator reserved {mib(reserved)} of the "
                   f"{mib(total)} of {dtype}:{dev} in step {step} ({headroom:.1f}% left).")
    for rank, dtype, step, peak, median, pct, op, op_bytes in con.execute("""
            SELECT rank, device_type, step, peak_allocated_bytes, peers_median_bytes, above_peers_pct, top_op, top_op_bytes
            FROM memory_ranks WHERE far_above_peers ORDER BY above_peers_pct DESC LIMIT 2""").fetchall():
        held = f"; {op} holds {mib(op_bytes)} of it" if op else ""
        out.append(f"Rank {rank} peaks at {mib(peak)} of {dtype} memory in step {step}, {pct:.0f}% above its peers' "
                   f"median of {mib(median)}{held}.")
    return out


def hint(con, pack: str) -> str | None:
    """Why a memory pack is empty, for the terminal: the job recorded no memory events (or no snapshot)."""
    table = pack.replace("-", "_")
    if not table.startswith("memory") or has_memory(con, table):
        return None
    if table == "memory_snapshot":
        return "no allocator snapshot in this job: ingest torch.cuda.memory._dump_snapshot() pickles with the traces"
    if not has_memory(con, "memory_events"):
        return "no memory events in this job: record with torch.profiler.profile(..., profile_memory=True)"
    return None

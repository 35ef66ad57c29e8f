"""Where the memory went, in words: the memory findings of the verdict (docs/memory.md).

The figures are the memory packs' (queries/memory*.sql); queries/memory_findings.sql makes them rows
of the verdict's findings columns, and this module only words them. A rank gets a sentence when its
peak reserve comes within tf_memory_limit_pct [10 %] of its device's memory (memory.near_device_limit),
or when its peak lies far above its peers' median (memory_ranks.far_above_peers, tf_memory_peer_pct
[20 %]), naming the op holding most of it.
"""
from __future__ import annotations

READS = frozenset({"memory_findings"})  # the tables its SQL reads (tests/test_layers.py)


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
    """Whether this memory pack has any rows."""
    return bool(con.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


FINDINGS_TABLE = "memory_findings"  # queries/memory_findings.sql: rows of the verdict's findings columns


def _near_limit(r: dict, con) -> str:
    held = f"; {r['evidence']} holds {mib(r['evidence_bytes'])} of its peak" if r.get("evidence") else ""
    return (f"Rank {r['rank']} is close to running out of memory: its allocator reserved {mib(r['bytes'])} of the "
            f"{mib(r['device_memory_bytes'])} of {r['note']} in step {r['step']} ({r['share_pct']:.1f}% left){held}.")


def _above_peers(r: dict, con) -> str:
    held = f"; {r['evidence']} holds {mib(r['evidence_bytes'])} of it" if r.get("evidence") else ""
    return (f"Rank {r['rank']} peaks at {mib(r['bytes'])} of {r['note'].split(':')[0]} memory in step {r['step']}, "
            f"{r['share_pct']:.0f}% above its peers' median of {mib(r['peers_median_bytes'])}{held}.")


# the verdict's words for each kind of memory_findings row (traceflow/verdict.py registers them)
SENTENCES = {"memory_near_limit": _near_limit, "memory_above_peers": _above_peers}


def sentences(con) -> list[str]:
    """The memory findings in words, for a verdict that has no findings rows of its own (a CPU job)."""
    if not has_memory(con, FINDINGS_TABLE):
        return []
    rel = con.execute(f"SELECT * FROM {FINDINGS_TABLE} ORDER BY priority, share_pct DESC, rank")
    cols = [d[0] for d in rel.description]
    return [SENTENCES[r["kind"]](r, con) for r in (dict(zip(cols, row)) for row in rel.fetchall())]


def hint(con, pack: str) -> str | None:
    """Why a memory pack is empty, for the terminal: the job recorded no memory events (or no snapshot)."""
    table = pack.replace("-", "_")
    if not table.startswith("memory") or has_memory(con, table):
        return None
    if table == "memory_snapshot":
        return "no allocator snapshot in this job: ingest torch.cuda.memory._dump_snapshot() pickles with the traces"
    if not has_memory(con, "memory_events"):
        return ("no memory events in this job: record with torch.profiler.profile(..., profile_memory=True), "
                "or nsys profile --cuda-memory-usage=true")
    return None

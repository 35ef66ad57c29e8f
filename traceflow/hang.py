"""Why the job stopped: the first sentence of the verdict when Flight Recorder dumps show a hang.

Reads the `desync` packs (queries/desync.sql, desync_timing.sql); says which collective of which
group, which ranks and what kind, each rank's last completed collective, and where the rank at
fault was: from its timing trace when one was ingested beside the dumps, else from the stack its
dump recorded. docs/hang-forensics.md defines each part.
"""
from __future__ import annotations

import json
from typing import Any

# the tables its SQL reads (tests/test_layers.py)
READS = frozenset({"desync", "desync_ranks", "desync_timing_ranks", "fr_dumps", "fr_entries"})


def _ranks(rs: list[int], cap: int = 8) -> str:
    """'rank 2', 'ranks 0, 1, 3', 'ranks 0–1023' (a run), 'ranks 0, 4, 9, ... (40 in all)'."""
    rs = sorted(rs)
    if len(rs) == 1:
        return f"rank {rs[0]}"
    if len(rs) > 2 and rs == list(range(rs[0], rs[-1] + 1)):
        return f"ranks {rs[0]}–{rs[-1]}"
    if len(rs) > cap:
        return "ranks " + ", ".join(map(str, rs[:cap])) + f", ... ({len(rs)} in all)"
    return "ranks " + ", ".join(map(str, rs))


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _group(pg: str, desc: str | None) -> str:
    if desc == "default_pg":
        return "the default group"
    return f"group {pg}" + (f" ({desc})" if desc and desc != pg else "")


def _value(kind: str, text: str | None) -> str:
    """A dtype list ["Float"] as Float; sizes and ops as recorded."""
    if text is None:
        return "?"
    if kind == "dtype_mismatch":
        try:
            v = json.loads(text)
            if isinstance(v, list) and len(set(v)) == 1:
                return str(v[0])
        except ValueError:
            pass
    return text


def dump_count(con) -> int:
    """Flight Recorder dumps in the database."""
    return con.execute("SELECT count(*) FROM fr_dumps").fetchone()[0]


def findings(con) -> dict[str, Any] | None:
    """None when no dump shows a hang; else {'sentence', 'rows' (desync's first rows), 'ranks'
    (desync_ranks), 'timing' (desync_timing_ranks by rank)}."""
    if not dump_count(con):
        return None
    cols = [d[0] for d in con.execute("SELECT * FROM desync LIMIT 0").description]
    rows = [dict(zip(cols, r)) for r in con.execute("SELECT * FROM desync WHERE first").fetchall()]
    rcols = [d[0] for d in con.execute("SELECT * FROM desync_ranks LIMIT 0").description]
    ranks = [dict(zip(rcols, r)) for r in con.execute("SELECT * FROM desync_ranks").fetchall()]
    tcols = [d[0] for d in con.execute("SELECT * FROM desync_timing_ranks LIMIT 0").description]
    timing = {r[0]: dict(zip(tcols, r)) for r in con.execute("SELECT * FROM desync_timing_ranks").fetchall()}
    out: dict[str, Any] = {"rows": rows, "ranks": ranks, "timing": timing}
    if rows:
        # the group where it began: its first disagreement enqueued earliest (desync is in that order)
        first = rows[0]
        same = [r for r in rows if r["pg"] == first["pg"] and r["seq"] == first["seq"]]
        out["sentence"] = _sentence(same, ranks, timing)
        return out
    waiting = [r for r in ranks if r["state"] == "waiting"]
    if not waiting:
        return None
    pg = min(waiting, key=lambda r: r["last_created_ns"] or 0)["pg"]
    group = [r for r in waiting if r["pg"] == pg]
    seq = min(r["last_enqueued"] for r in group)
    desc = con.execute("SELECT any_value(pg_desc) FROM fr_entries WHERE pg = ?", [pg]).fetchone()[0]
    members = [r for r in ranks if r["pg"] == pg]
    missing = [r["rank"] for r in members if not r["dumped"]]
    s = f"{_cap(_ranks([r['rank'] for r in group]))} waited in {group[0]['op']} #{seq} of {_group(pg, desc)} and none completed it"
    if missing:  # the dumps agree: the one that did not arrive can only be among those without one
        one = len(missing) == 1
        s += (f"; {_ranks(missing)} {'has' if one else 'have'} no dump: {'it' if one else 'they'} never arrived, "
              f"or {'its dump was' if one else 'their dumps were'} lost.")
    else:
        s += "; no rank is missing from it or mismatched in the dumps."
    out["sentence"] = s
    return out


def _sentence(rows: list[dict], ranks: list[dict], timing: dict[int, dict]) -> str:
    """The sentence for one group's first disagreement (rows: its kinds, 'missing' first)."""
    r = rows[0]
    group = _group(r["pg"], r["pg_desc"])
    op, seq, faulty = r["op"], r["seq"], r["ranks"]
    them = "Its" if len(faulty) == 1 else "Their"
    if r["kind"] == "missing":
        s = f"{_cap(_ranks(faulty))} never entered {op} #{seq} of {group}"
    elif r["kind"] == "not_started":
        s = (f"{_cap(_ranks(faulty))} enqueued {op} #{seq} of {group} but {'its GPU' if len(faulty) == 1 else 'their GPUs'} "
             "never started it (earlier GPU work had not finished)")
    elif r["kind"] == "op_mismatch":
        if r["expected"] is None:
            s = f"{_cap(_ranks(faulty))} disagree on the op of #{seq} of {group}: {r['got']}"
        else:
            s = f"{_cap(_ranks(faulty))} called {r['got']} as #{seq} of {group} where the others called {r['expected']}"
    else:
        what = "sizes" if r["kind"] == "size_mismatch" else "dtype"
        if r["expected"] is None:
            s = f"{_cap(_ranks(faulty))} disagree on the {what} of {op} #{seq} of {group}: {r['got']}"
        else:
            s = (f"{_cap(_ranks(faulty))} called {op} #{seq} of {group} with {what} {_value(r['kind'], r['got'])} "
                 f"where the others used {_value(r['kind'], r['expected'])}")
    waited = sorted(set(r["waiting"]) - set(faulty)) if r["kind"] in ("missing", "not_started") else sorted(r["waiting"])
    if waited:
        s += f"; {_ranks(waited)} {'were inside it' if r['kind'] == 'not_started' else 'waited in it'}"
    s += "."
    s += f" {them} last completed collective was " + (
        f"#{r['fault_last_completed']}" if r["fault_last_completed"] is not None else "not recorded")
    where = _where(faulty, r, timing)
    s += (f"; {where}." if where else ".")
    if r["no_dump"]:
        s += f" No dump from {_ranks(r['no_dump'])}: what {'it' if len(r['no_dump']) == 1 else 'they'} did is unknown."
    return s


def _where(faulty: list[int], r: dict, timing: dict[int, dict]) -> str:
    """Where the (first) rank at fault was: its host activity from its timing trace, else the
    frame its dump recorded for its last call into the group."""
    t = timing.get(faulty[0])
    if t and t.get("where_stuck") == "host" and t.get("host_activity"):
        s = f"its host was in `{t['host_activity']}` for {t['host_activity_ns'] / 1e9:.1f} s"
        if r["kind"] == "missing":
            s += ": stuck on the CPU before entering the collective"
        return s
    if t and t.get("where_stuck") == "collective":
        return "its host was inside a communication call" + (f", its GPU in `{t['gpu_at_hang']}`" if t.get("gpu_at_hang") else "")
    if r.get("fault_frame"):
        verb = "called it" if r["kind"] != "missing" else "last called into the group"
        return f"it {verb} from `{r['fault_frame']}`"
    return ""


def sentence(con) -> str | None:
    f = findings(con)
    return f["sentence"] if f else None

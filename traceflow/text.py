"""Text from traces on its way to a terminal.

A kernel name, file name or NVTX text is data from a file someone else wrote: it must never act
on the terminal (an `ESC ] 0 ;` sequence sets the window title, `ESC [ 2 J` clears the screen,
a right-to-left override reorders what the reader sees). Every terminal output goes through
`printable`; JSON output escapes these characters by itself.

Size: every text on its way to the terminal (escaping, short kernel names) in one place.
"""
from __future__ import annotations

import re

# C0 and C1 controls, DEL, the bidirectional overrides and isolates, and lone surrogates (the bytes
# of a file name that are not UTF-8, as Python decodes them: they cannot be printed at all).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    if 0xDC80 <= c <= 0xDCFF:  # a byte of a file name that is not UTF-8 (os.fsdecode's surrogateescape)
        c -= 0xDC00
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def as_text(path) -> str:
    """A file name as valid text (for the database, JSON, HTML): bytes of it that are not UTF-8 as
    `\\xNN`; any other name unchanged."""
    s = str(path)
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def printable(text) -> str:
    """`text` with every control character shown as an escape (`\\x1b`), nothing else changed."""
    s = str(text)
    return _CONTROL.sub(_escape, s) if _CONTROL.search(s) else s


_ANONYMOUS = re.compile(r"\(anonymous namespace\)::|<unnamed>::")
_LAMBDA = re.compile(r"\{lambda[^{}]*\}|\{unnamed type#\d+\}")


def _groups(s: str):
    """(text at depth 0, [top-level template argument strings], had a parameter list): one pass over
    `s` splitting it at its first top-level '<...>' group and cutting at the parameter list."""
    out: list[str] = []
    args: list[str] = []
    cur: list[str] = []
    depth = 0
    seen_args = False
    for ch in s:
        if ch in "<(":
            if depth == 0:
                if ch == "(" and out:
                    return "".join(out), args, True  # the parameter list: the name is complete
                if ch == "<":
                    out.append("<…>")
                    if not seen_args:
                        cur = []
            depth += 1
            if depth == 1:
                continue
        elif ch in ">)" and depth:
            depth -= 1
            if depth == 0:
                if ch == ">" and not seen_args:
                    args.append("".join(cur).strip())
                    seen_args = True
                continue
        elif ch == "," and depth == 1 and not seen_args:
            args.append("".join(cur).strip())
            cur = []
            continue
        if depth == 0:
            out.append(ch)
        elif not seen_args:
            cur.append(ch)
    return "".join(out), args, False


_PY_BUILTIN = re.compile(r"^<built-in (?:function|method) ([\w.]+)(?: of ([\w.]+) object)?.*>$")


def _is_signature(s: str) -> bool:
    return "::" in s or "<" in s or s.startswith("void ")


def payload_name(name: str) -> str | None:
    """A readable name for an NVTX / annotation payload that is a dict written as text (issue 41: a
    verdict quoted `{'mod': 'torch', 'op': 'randn', 'args': []}`): its module and op joined with a
    dot (`torch.randn`), else its other plain values; None where the text is not such a dict."""
    import ast
    if not (name.startswith("{") and name.endswith("}")) or len(name) > 4096:
        return None
    try:
        d = ast.literal_eval(name)  # literals only: never runs code
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    if not isinstance(d, dict) or not d:
        return None
    plain = {str(k): v for k, v in d.items() if isinstance(v, (str, int, float)) and not isinstance(v, bool)}
    head = [str(plain[k]) for k in ("mod", "module", "namespace") if k in plain][:1]
    op = [str(plain[k]) for k in ("op", "name", "func", "function", "fn") if k in plain][:1]
    if op:
        return ".".join(head + op)
    return ", ".join(f"{k} {v}" for k, v in plain.items()) or None


def short_name(name) -> str:
    """A kernel's C++ name as a person reads it: the qualified base name, template arguments and
    parameters elided (`void at::native::vectorized_elementwise_kernel<(int)8, ...>(int, T2, T3)` ->
    `at::native::vectorized_elementwise_kernel<…>`). The full name stays in the database, in
    --format json/csv and on hover in the report. Plain names (ncclDevKernel_..., cuDNN's) pass through.
    Two kernels can share a short name: `short_names` tells them apart. A dict payload written as text
    reads as its op (payload_name)."""
    if (p := payload_name(str(name).strip())) is not None:
        return p
    s = _ANONYMOUS.sub("", str(name))
    # a Python profiler's names: `<built-in function sleep>`, `<built-in method cpu of Tensor object at 0x…>`
    # read as their function, never as a C++ template `<…>` (GPUPuzzlers cuda-queue: "2.9 ms in <…>"
    # where 2.7 ms is time.sleep)
    if (m := _PY_BUILTIN.match(s)) is not None:
        return f"Python built-in {m.group(2) + '.' if m.group(2) else ''}{m.group(1)}"
    if not _is_signature(s):
        return s  # not a C++ signature: `Memcpy HtoD (Pageable -> Device)`, `ncclKernel_...`
    base = _groups(s)[0].strip()
    base = base.rsplit(" ", 1)[-1] if " " in base else base  # drop a return type (`void`)
    return base or s


def _brief(arg: str, detail: int) -> str:
    """A template argument in a few characters: its last named component (`at::native::FillFunctor<float>`
    -> `FillFunctor<…>`, a lambda inside `GeluCUDAKernelImpl(...)::{lambda()#2}` -> `GeluCUDAKernelImpl`),
    with `detail` levels of its own template arguments."""
    a = _LAMBDA.sub("", _ANONYMOUS.sub("", arg)).strip()
    head, args, _ = _groups(a)
    parts = [p.strip() for p in head.replace("<…>", "").split("::")]
    parts = [p for p in parts if p and p not in ("operator", "const") and not p.startswith("operator")]
    last = parts[-1].replace(" const", "").rsplit(" ", 1)[-1] if parts else a  # `float const*` -> `float*`
    if not args:
        return last
    if detail <= 0:
        return f"{last}<…>"
    return f"{last}<{', '.join(_brief(x, detail - 1) for x in args)}>"


def short_names(names) -> dict[str, str]:
    """{full name: short name} for names shown together, the short ones distinct: where `short_name`
    gives two kernels the same text (`at::native::vectorized_elementwise_kernel<…>` is six kernels of
    one small job), the template arguments that differ are kept, in brief (`…<4, FillFunctor<…>>`),
    with more of them until the names differ; what still collides (overloads differing only in their
    parameters) gets a suffix `#2`, `#3` in the order of the full names."""
    full = sorted({str(n) for n in names if n is not None})
    out = {n: short_name(n) for n in full}
    groups: dict[str, list[str]] = {}
    for n in full:
        groups.setdefault(out[n], []).append(n)
    for short, members in groups.items():
        if len(members) < 2:
            continue
        parsed = {n: _groups(_ANONYMOUS.sub("", n))[1] for n in members}
        best: dict[str, str] = {}
        stem = short[:-3] if short.endswith("<…>") else short
        for detail in range(3):
            briefs = {n: [_brief(a, detail) for a in parsed[n]] for n in members}
            width = max(len(b) for b in briefs.values())
            differ = [k for k in range(width) if len({tuple(b[k:k + 1]) for b in briefs.values()}) > 1]
            shown: list[int] = []
            for k in differ[:3]:  # the first arguments that differ, one more while names still collide
                shown.append(k)
                best = {n: _with_args(stem, briefs[n], shown) for n in members}
                if len(set(best.values())) == len(members):
                    break
            if best and len(set(best.values())) == len(members):
                break
        final = best or {n: short for n in members}
        seen: dict[str, int] = {}
        for n in members:  # what is left equal: numbered, in the order of the full names
            seen[final[n]] = seen.get(final[n], 0) + 1
        count: dict[str, int] = {}
        for n in members:
            v = final[n]
            if seen[v] > 1:
                count[v] = count.get(v, 0) + 1
                v = f"{v} #{count[v]}"
            out[n] = v
    return out


def _with_args(stem: str, briefs: list[str], shown: list[int]) -> str:
    """`stem<…, a, …>`: the template arguments at positions `shown`, an ellipsis for those left out."""
    parts: list[str] = []
    for k in range(len(briefs)):
        if k in shown:
            parts.append(briefs[k])
        elif not parts or parts[-1] != "…":
            parts.append("…")
    return f"{stem}<{', '.join(parts)}>"


# Columns holding kernel, op or call names: shown short on a terminal and in the report (the full
# name in --format json/csv, in the database and on hover in the report).
NAME_COLUMNS = ("name", "_op", "kernel", "what", "host_activity")


def is_name_column(col: str) -> bool:
    return col.endswith(NAME_COLUMNS)


def is_percent(col: str) -> bool:
    """A column in percent, by traceflow's naming (`idle_pct`, `delta_pct`, `share_pct`)."""
    return col == "pct" or col.endswith("_pct")


def is_share(col: str) -> bool:
    """A column holding a fraction of 1 (`share`, `busy_share`): shown in percent."""
    return col == "share" or col.endswith("_share")


def decimal_text(v: float) -> str:
    """A double as a person reads it, keeping the precision the query gave it: a value the query
    rounded as it was rounded (`round(x, 1)` -> `12.3`, `4.0`), otherwise two decimals, or three
    significant digits below 0.1 (`0.000123`, never `0.00`). (A column of whole doubles, a count
    computed as a double, is shown as integers by the table that holds it.)"""
    import math
    v = float(v)  # a numpy double's repr is `np.float64(...)`
    if not math.isfinite(v):
        return str(v)
    if abs(v) >= 1e15:
        return f"{v:.4g}"
    r = repr(v)
    if "e" not in r and len(r.split(".")[1]) <= 4:
        return f"{v:,.{len(r.split('.')[1])}f}"
    if abs(v) >= 0.1:
        return f"{v:,.2f}"
    places = 2 - math.floor(math.log10(abs(v)))
    return f"{v:.{places}f}" if places <= 12 else f"{v:.3g}"


def is_identifier(col: str) -> bool:
    """A column of ids (op, trace, correlation, thread, process): labels to copy into a query, not
    quantities, so shown without thousands separators (`WHERE op_id = 13,314` is no query)."""
    return col == "id" or col.endswith(("_id", "tid", "pid"))


def size(n) -> str:
    """Bytes in the largest binary unit that keeps a figure of at least 1: 704 B, 1.5 KiB, 256 MiB
    (never "0 MiB" for 704 bytes)."""
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" or n >= 100 else f"{n:.1f} {unit}".replace(".0 ", " ")
        n /= 1024
    return f"{n:.0f} TiB"  # unreachable

"""Text from traces on its way to a terminal.

A kernel name, file name or NVTX text is data from a file someone else wrote: it must never act
on the terminal (an `ESC ] 0 ;` sequence sets the window title, `ESC [ 2 J` clears the screen,
a right-to-left override reorders what the reader sees). Every terminal output goes through
`printable`; JSON output escapes these characters by itself.
"""
from __future__ import annotations

import re

# C0 and C1 controls, DEL, and the bidirectional overrides and isolates.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text) -> str:
    """`text` with every control character shown as an escape (`\\x1b`), nothing else changed."""
    s = str(text)
    return _CONTROL.sub(_escape, s) if _CONTROL.search(s) else s


_ANONYMOUS = re.compile(r"\(anonymous namespace\)::|<unnamed>::")


def short_name(name) -> str:
    """A kernel's C++ name as a person reads it: the qualified base name, template arguments and
    parameters elided (`void at::native::vectorized_elementwise_kernel<(int)8, ...>(int, T2, T3)` ->
    `at::native::vectorized_elementwise_kernel<…>`). The full name stays in the database, in
    --format json/csv and on hover in the report. Plain names (ncclDevKernel_..., cuDNN's) pass through."""
    s = _ANONYMOUS.sub("", str(name))
    if "::" not in s and "<" not in s and not s.startswith("void "):
        return s  # not a C++ signature: `Memcpy HtoD (Pageable -> Device)`, `ncclKernel_...`
    out: list[str] = []
    depth = 0
    for ch in s:
        if ch in "<(":
            if depth == 0:
                if ch == "(" and out:
                    break  # the parameter list: the name is complete
                if ch == "<":
                    out.append("<…>")
            depth += 1
        elif ch in ">)" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    base = "".join(out).strip()
    base = base.rsplit(" ", 1)[-1] if " " in base else base  # drop a return type (`void`)
    return base or s


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

"""Text from traces on its way to a terminal.

A kernel name, file name or NVTX text is data from a file someone else wrote: it must never act
on the terminal (an `ESC ] 0 ;` sequence sets the window title, `ESC [ 2 J` clears the screen,
a right-to-left override reorders what the reader sees). Every terminal output goes through
`printable`; JSON output escapes these characters by itself.
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

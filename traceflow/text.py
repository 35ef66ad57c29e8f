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

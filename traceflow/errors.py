"""Errors a user sees as one line and exit code 3 (bad input or output path) or 2 (usage)."""
from __future__ import annotations

from .text import printable


class InputError(Exception):
    """An input file traceflow cannot read. Always names the file."""

    exit_code = 3

    def __init__(self, path, problem: str):
        self.path = str(path)
        self.problem = " ".join(str(problem).split())  # one line, whatever the cause said
        # the name as it prints: a newline in it must not cut the error line (nor a byte that is not UTF-8 break it)
        super().__init__(f"{printable(self.path)}: {self.problem}")

    def __reduce__(self):  # crosses process boundaries from the reader pool
        return (type(self), (self.path, self.problem))


class OutputError(InputError):
    """An output path traceflow will not or cannot write (not its kind, an input, disk full...)."""


class OutputBusy(OutputError):
    """Another traceflow process is writing the same file."""


class UsageError(Exception):
    exit_code = 2


class MachineLimit(Exception):
    """A limit of this machine or session (ulimit -v, ulimit -n) the run cannot fit in: exit 3, like
    bad input, as nothing about the command line is wrong."""

    exit_code = 3


def one_line(text: object, limit: int = 300) -> str:
    """The first line of an error's text, shortened: what a user reads after `traceflow: error:`."""
    lines = str(text).strip().splitlines()
    first = lines[0] if lines else ""
    return first if len(first) <= limit else first[:limit - 1] + "…"


def out_of_memory(e: BaseException) -> bool:
    """MemoryError (Arrow's too), DuckDB's OutOfMemoryException, a thread that could not start: under
    ulimit -v these were internal errors, or a reader's "cannot read (RuntimeError: can't start new thread)"."""
    return (isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryException"
            or (isinstance(e, RuntimeError) and "can't start new thread" in str(e)))

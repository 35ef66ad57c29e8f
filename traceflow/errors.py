"""Errors a user sees as one line and exit code 3 (bad input) or 2 (usage)."""
from __future__ import annotations


class InputError(Exception):
    """An input file traceflow cannot read. Always names the file."""

    exit_code = 3

    def __init__(self, path, problem: str):
        self.path = str(path)
        self.problem = " ".join(str(problem).split())  # one line, whatever the cause said
        super().__init__(f"{self.path}: {self.problem}")

    def __reduce__(self):  # crosses process boundaries from the reader pool
        return (type(self), (self.path, self.problem))


class OutputBusy(InputError):
    """Another traceflow process is writing the same database."""


class UsageError(Exception):
    exit_code = 2

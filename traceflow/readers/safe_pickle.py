"""Untrusted pickles (Flight Recorder dumps, allocator snapshots) loaded without running their code.

A pickle names the callables that rebuild it (`find_class`); `pickle.load` calls whatever a file
names, so a dump from another machine could run any code here. Flight Recorder dumps and
`torch.cuda.memory._snapshot()` pickles hold only plain containers and scalars, so no class is
needed beyond a few harmless builtins: every other name is refused, naming the file.
"""
from __future__ import annotations

import io
import pickle
from typing import IO, Any

from ..errors import InputError

# (module, name) pairs a dump may name: containers that pickle as a call, never a function.
ALLOWED = frozenset({
    ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "bytearray"), ("builtins", "complex"),
    ("collections", "OrderedDict"), ("collections", "defaultdict"),
})


class _Restricted(pickle.Unpickler):
    def __init__(self, f: IO[bytes], path: str):
        super().__init__(f)
        self._path = path

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in ALLOWED:
            return super().find_class(module, name)
        raise InputError(self._path, f"refused to unpickle: it names {module}.{name}, which a profiler dump never holds "
                                     "(a pickle can run code; only plain data is loaded)")


def loads(data: bytes, path: str) -> Any:
    """The object pickled in `data` (read from `path`, named in every error); InputError when it is
    not a pickle, is cut short, or names anything but plain data."""
    try:
        return _Restricted(io.BytesIO(data), path).load()
    except InputError:
        raise
    except (pickle.UnpicklingError, EOFError) as e:
        raise InputError(path, f"not a complete pickle ({e or 'cut short'})") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, MemoryError, RecursionError, UnicodeDecodeError) as e:
        raise InputError(path, f"not a readable pickle ({type(e).__name__}: {e})") from None


def load(path: str) -> Any:
    """The object pickled in the file at `path` (see `loads`)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(path, e.strerror or str(e)) from None
    return loads(data, path)

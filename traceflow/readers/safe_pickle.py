"""Untrusted pickles (Flight Recorder dumps, allocator snapshots) loaded without running their code.

A pickle names the callables that rebuild it (`find_class`); `pickle.load` calls whatever a file
names, so a dump from another machine could run any code here. Flight Recorder dumps and
`torch.cuda.memory._snapshot()` pickles hold only plain containers and scalars, so no class is
needed beyond a few harmless builtins: every other name is refused, naming the file.

Plain data can still be a bomb: a pickle refers to an object it already built in two bytes (its
memo), so 205 KB of a Flight Recorder dump held 2,000 entries of the same 100,000 frames (200 M
frames for the readers to walk, minutes), and `bytearray(10**9)` is 84 bytes. What a pickle holds is
bounded by its own size: `bytearray` only copies bytes or text it is given, and the object, counted
as the readers walk it (a shared object once per reference), may hold at most ITEMS_PER_BYTE items
per byte of the file (at least ITEMS_FLOOR).
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

# A pickle spends at least a byte on every item it holds, except a reference to a shared one (two to
# five bytes for the whole object again). Plain pickles of dumps and snapshots hold under one item per
# byte (a frame dict of three strings takes ~60 bytes); 16 leaves room for honest sharing (the same
# frame list in many entries) and stops the 205 KB dump of 200 M frames at 3.3 M items.
ITEMS_PER_BYTE = 16
ITEMS_FLOOR = 1_000_000


def _bytearray(*args):
    """bytearray of the bytes or text given (how pickle protocols 0-4 write one); never of a count."""
    if not args or not isinstance(args[0], (bytes, bytearray, str)):
        raise ValueError("a bytearray made from a count rather than from its bytes (a pickle of plain data never "
                         "holds one)")
    return bytearray(*args)


_CONTAINERS = (dict, list, tuple, set, frozenset)


class _TooBig(Exception):
    pass


def tree_size(obj: Any, limit: int) -> int:
    """How many items `obj` holds walked as a tree (a shared object counted at each reference),
    computed over the graph (each container's count once, by its id: `obj` keeps them alive), so in
    time bounded by the pickle itself; limit + 1 once past `limit`. (A walk of every item was 13x
    the unpickling's time; this one skips scalars by type.) Nesting past Python's recursion limit
    raises RecursionError: no dump nests so deep."""
    sizes: dict[int, int] = {}

    def size(o) -> int:
        k = id(o)
        n = sizes.get(k)
        if n is not None:
            return n
        sizes[k] = 1  # being counted: a cycle through it counts as one item
        children = o.values() if isinstance(o, dict) else o
        n = 1 + len(o)
        for c in children:
            if isinstance(c, _CONTAINERS):
                n += size(c)
        if n > limit:
            raise _TooBig
        sizes[k] = n
        return n
    try:
        return size(obj) if isinstance(obj, _CONTAINERS) else 1
    except _TooBig:
        return limit + 1


def check_size(obj: Any, data_size: int, path: str) -> None:
    """InputError when `obj` holds more than ITEMS_PER_BYTE items per byte of its `data_size`-byte
    pickle (tree_size)."""
    limit = max(ITEMS_FLOOR, ITEMS_PER_BYTE * data_size)
    if tree_size(obj, limit) > limit:
        raise InputError(path, f"a pickle of {data_size:,} bytes that holds more than {limit:,} items ({ITEMS_PER_BYTE} "
                         "per byte of the file; shared objects counted at each reference): refusing a likely bomb")


class _Restricted(pickle.Unpickler):
    def __init__(self, f: IO[bytes], path: str):
        super().__init__(f)
        self._path = path

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("builtins", "bytearray"):
            return _bytearray
        if (module, name) in ALLOWED:
            return super().find_class(module, name)
        raise InputError(self._path, f"refused to unpickle: it names {module}.{name}, which a profiler dump never holds "
                                     "(a pickle can run code; only plain data is loaded)")


def loads(data: bytes, path: str) -> Any:
    """The object pickled in `data` (read from `path`, named in every error); InputError when it is
    not a pickle, is cut short, or names anything but plain data."""
    try:
        obj = _Restricted(io.BytesIO(data), path).load()
        check_size(obj, len(data), path)
        return obj
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

"""An input file's bytes as a reader takes them: hashed as they pass, and read ahead on a thread.

Inflating gzip, hashing and reading a file all release the GIL, so on a thread of their own they
overlap the JSON decode, which holds it. That pays where a core is free (one big file: the hash
was a pass of its own); with a reader process on every core it only moves the work.
"""
from __future__ import annotations

import hashlib
import queue
import threading


def content_hash(path: str) -> str:
    """The trace's identity in the database (`traces.source_hash`): the same bytes are not ingested twice."""
    f = HashedFile(path)
    try:
        return f.hexdigest()
    finally:
        f.close()


class HashedFile:
    """A raw file that hashes what is read from it; `hexdigest()` reads the rest first, so the hash
    is the whole file's, equal to `content_hash(path)`, without reading it a second time."""

    def __init__(self, path: str):
        self.f = open(path, "rb")
        self.h = hashlib.blake2b(digest_size=16)

    def read(self, n=-1):
        b = self.f.read(n)
        self.h.update(b)
        return b

    def hexdigest(self) -> str:
        while self.read(1 << 22):
            pass
        return self.h.hexdigest()

    def fileno(self):
        return self.f.fileno()

    def close(self):
        self.f.close()


class ReadAhead:
    """Iterates over `stream.read(size)` chunks, read on a thread up to `depth` chunks ahead.
    An error on that thread is raised here, at the chunk where it happened. Owns the stream:
    `close()` stops the thread, then closes it."""

    def __init__(self, stream, size: int, depth: int = 1):
        self.stream, self.size = stream, size
        self.q: queue.Queue = queue.Queue(depth)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="traceflow-read-ahead", daemon=True)
        self.thread.start()

    def _run(self):
        try:
            while not self.stopping.is_set():
                chunk = self.stream.read(self.size)
                self._put(chunk)
                if not chunk:
                    return
        except BaseException as e:  # noqa: BLE001 - raised on the reading thread by __iter__
            self._put(e)

    def _put(self, item):
        while not self.stopping.is_set():
            try:
                self.q.put(item, timeout=0.05)
                return
            except queue.Full:
                pass

    def __iter__(self):
        while True:
            item = self.q.get()
            if isinstance(item, BaseException):
                raise item
            if not item:
                return
            yield item

    def close(self):
        self.stopping.set()
        self.thread.join()
        self.stream.close()

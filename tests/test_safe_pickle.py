"""The restricted unpickler: plain data loads, a pickle that names a callable is refused and never runs."""
from __future__ import annotations

import os
import pickle

import pytest

from traceflow.errors import InputError
from traceflow.readers import safe_pickle


class _Evil:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_plain_data_round_trips(tmp_path):
    data = {"version": "2.10", "entries": [{"seq": 1, "sizes": [[4, 4]], "ok": True, "t": 1.5}],
            "pg": {("0", "default"): {1, 2}}, "frozen": frozenset({3})}
    p = tmp_path / "dump.pkl"
    p.write_bytes(pickle.dumps(data))
    assert safe_pickle.load(str(p)) == data


def test_a_callable_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "ran"
    p = tmp_path / "evil.pkl"
    p.write_bytes(pickle.dumps({"entries": [_Evil(str(marker))]}))
    with pytest.raises(InputError, match=r"evil\.pkl: refused to unpickle: it names posix\.mkdir"):
        safe_pickle.load(str(p))
    assert not marker.exists()


@pytest.mark.parametrize("cut", [1, 10, -1])
def test_truncated_and_garbage(tmp_path, cut):
    p = tmp_path / "cut.pkl"
    p.write_bytes(pickle.dumps({"entries": list(range(100))})[:cut])
    with pytest.raises(InputError, match=r"cut\.pkl: not a (complete|readable) pickle"):
        safe_pickle.load(str(p))

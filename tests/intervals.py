"""Plain-Python interval arithmetic: the independent side of the checks on traceflow's SQL."""
from __future__ import annotations


def union(iv):
    """Sorted, merged [(a, b)] of half-open intervals."""
    out = []
    for a, b in sorted((a, b) for a, b in iv if b > a):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1][1] = b
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def clip(iv, lo, hi):
    return [(max(a, lo), min(b, hi)) for a, b in iv if min(b, hi) > max(a, lo)]


def measure(iv):
    return sum(b - a for a, b in union(iv))


def intersect(x, y):
    x, y = union(x), union(y)
    i = j = 0
    out = []
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if b > a:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def difference(x, y):
    """The stretches of x outside y, merged."""
    return [g for a, b in union(x) for g in gaps(y, a, b)]


def subtract(x, y):
    return measure(x) - measure(intersect(x, y))


def gaps(iv, lo, hi):
    """Idle stretches of [lo, hi) not covered by iv."""
    out, t = [], lo
    for a, b in union(clip(iv, lo, hi)):
        if a > t:
            out.append((t, a))
        t = max(t, b)
    if hi > t:
        out.append((t, hi))
    return out

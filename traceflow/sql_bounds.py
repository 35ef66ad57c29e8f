"""Bounds on a read-only query someone else wrote (`traceflow mcp`'s SQL tool): what would scan
without bound is refused before it runs, with the reason, and what still runs too long is stopped.

Read from DuckDB's own tokenizer (`duckdb.tokenize`), so a keyword inside a string or a comment is
not taken for one. Refused: a recursive CTE (its fixpoint has no bound the planner can see), and a
row generator (range, generate_series, repeat as a table) whose arguments are not number literals
or that would make more than MAX_GENERATED rows. A cross join of the job's tables is bounded by the
tables themselves; one that would run for long is stopped by the time bound (`interrupt_after`).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

MAX_GENERATED = 1_000_000  # rows a generator may make: ten times the largest pack of the nsys x16 bench
GENERATORS = ("range", "generate_series", "repeat", "repeat_row")


def tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) of each token: kind one of identifier, numeric_const, string_const, operator,
    keyword, comment."""
    import duckdb
    found = duckdb.tokenize(text)
    out = []
    for i, (pos, kind) in enumerate(found):
        end = found[i + 1][0] if i + 1 < len(found) else len(text)
        out.append((kind.name, text[pos:end].strip()))
    return out


def unbounded(text: str) -> str | None:
    """Why `text` could scan without bound, or None. A statement DuckDB cannot tokenize is left to
    DuckDB to refuse, with its own message."""
    try:
        toks = tokens(text)
    except Exception:  # noqa: BLE001 - DuckDB's parser says what is wrong with it, when it runs
        return None
    for i, (kind, word) in enumerate(toks):
        low = word.lower()
        if kind == "keyword" and low == "recursive":
            return ("a recursive CTE (WITH RECURSIVE) can run without bound: refused; "
                    "the analyses hold the derived tables (list_analyses), or write the levels out")
        if kind in ("keyword", "identifier") and low in GENERATORS and i + 1 < len(toks) and toks[i + 1][1] == "(":
            why = _generator(low, toks[i + 2:])
            if why:
                return why
    return None


def _generator(name: str, rest: list[tuple[str, str]]) -> str | None:
    """Why a call of generator `name` with arguments `rest` (the tokens after its '(') is refused."""
    args: list[list[str]] = [[]]
    depth = 0
    for kind, word in rest:
        if word == "(":
            depth += 1
        elif word == ")":
            if depth == 0:
                break
            depth -= 1
        if word == "," and depth == 0:
            args.append([])
            continue
        args[-1].append(word if kind == "numeric_const" or word == "-" else "?")
    if name in ("repeat", "repeat_row"):
        args = args[-1:]  # repeat(value, count): only the count bounds it
    try:
        nums = [float("".join(a)) for a in args]
    except ValueError:
        return (f"{name}() with arguments that are not number literals can make any number of rows: refused "
                "(give the bounds as numbers)")
    if name in ("repeat", "repeat_row"):
        count = nums[-1] if nums else 0.0
    else:
        lo, hi, step = (0.0, nums[0], 1.0) if len(nums) == 1 else (nums[0], nums[1], nums[2] if len(nums) > 2 else 1.0)
        count = abs((hi - lo) / step) if step else float("inf")
    if count > MAX_GENERATED:
        return f"{name}() would make {count:.3g} rows (or characters), more than the bound of {MAX_GENERATED:,}: refused"
    return None


@contextmanager
def interrupt_after(con, seconds: float):
    """Interrupts what `con` runs once `seconds` have passed (DuckDB raises InterruptException in the
    running statement); `stopped()` inside says whether it fired."""
    fired = threading.Event()

    def stop():
        fired.set()
        con.interrupt()
    timer = threading.Timer(seconds, stop)
    timer.daemon = True
    timer.start()
    try:
        yield fired
    finally:
        timer.cancel()

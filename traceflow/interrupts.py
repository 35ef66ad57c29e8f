"""Ctrl-C and SIGTERM for the command: one line, every temp file removed, exit 130 (Ctrl-C) or 143
(SIGTERM: what `kill`, `timeout`, Slurm at the time limit and systemd send).

Both signals become a KeyboardInterrupt in the main thread, so the one cleanup path runs for both:
the `with` blocks of the outputs (outputs.atomic_output, scratch_folder), the reader pool and the
Dask cluster undo what they made. `install()` sets it up for the command (cli._Guard.main); the
rest of this module is the patching that a Ctrl-C landing at the wrong moment made necessary, each
with the failure it fixes. A library user who imports traceflow gets none of it.

- `starting()`: while the command still imports (nothing to clean up yet), either signal ends it
  at once with the one line; a process that multiprocessing spawns from the command ignores both
  (its parent stops it).
- `install()`: the handlers, the hold of signals while a C extension initialises, the hook that
  delivers a Ctrl-C lost in a weakref callback, and the check before any output replaces its target.
- `exit_interrupted()`: the one line and the exit code.

Size: every signal path (handler, DuckDB interrupter, last resort) must agree, so they live together.
"""
from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager

# SIGHUP (the terminal closed, an ssh session dropped) is handled as SIGTERM is: by default it ended
# the process with no cleanup, leaving the temp database, its WAL, the lock, the scratch and parts
# folders. Unless the command was started ignoring it (nohup): then it stays ignored.
SIGNALS = (signal.SIGINT, signal.SIGTERM) + ((signal.SIGHUP,) if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN else ())
EXIT = {signal.SIGINT: (130, "interrupted"), signal.SIGTERM: (143, "terminated"), signal.SIGHUP: (129, "hung up")}

_seen: dict = {"signal": None}  # the first signal the command received
LAST_RESORT_S = 20.0  # after a signal, DuckDB's queries are interrupted this long, then the process ends (cleanup takes seconds)


def _while_starting(signum, frame):
    code, word = EXIT.get(signum, (130, "interrupted"))
    os.write(2, f"traceflow: {word}\n".encode())
    os._exit(code)


def starting(as_command: bool) -> None:
    """Called first thing when the command's module loads. A process that multiprocessing spawns
    from the command (a Dask nanny or worker of --cluster local:N imports the command's module as
    its __mp_main__ with the command's argv) ignores Ctrl-C, which a terminal sends to the whole
    process group: the command itself stops it (else every worker printed its own KeyboardInterrupt
    traceback, or this module's one line)."""
    if "__mp_main__" in sys.modules:  # set by multiprocessing in the processes it spawns, never in the command
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    elif as_command:
        for s in SIGNALS:
            signal.signal(s, _while_starting)


def _on_signal(signum, frame):
    """A KeyboardInterrupt, remembering which signal it was: an extension module can turn the
    KeyboardInterrupt into its own error (DuckDB's InterruptException, "ImportError:
    initialization failed" from a lazy import of a C extension)."""
    if _seen["signal"] is None:
        _seen["signal"] = signum
    raise KeyboardInterrupt


def raise_if_interrupted() -> None:
    """Raises again a signal that an extension module swallowed: pyarrow turns a KeyboardInterrupt
    raised inside its conversion of a list into its own error, which a reader's fallback for mixed
    values then handled, and the run went on to the end (1 interrupted run in 100 on a loaded
    machine). Called at each progress point (a file read, a phase started) and before any output
    replaces its target (outputs.BEFORE_REPLACE)."""
    if _seen["signal"] is not None:
        raise KeyboardInterrupt


_held: dict = {"depth": 0, "signals": []}  # extension inits running on the main thread, signals held back


def _note(signum, frame):
    _held["signals"].append(signum)


@contextmanager
def deferred():
    """SIGINT and SIGTERM held back while the block runs on the main thread, then delivered (the
    handler in place runs as the block ends). For steps that must not be cut in two: an extension's
    init (below), a reader process's start (readers/pool.py: a SIGTERM inside Process.start left a
    spawned child half-sent its start data, which printed "EOFError: Ran out of input" with a
    traceback after traceflow's one line, 1 interrupted run in a fresh clone's `make test`)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _held["depth"] == 0:
        _held["previous"] = {s: signal.signal(s, _note) for s in SIGNALS}
    _held["depth"] += 1
    try:
        yield
    finally:
        _held["depth"] -= 1
        if _held["depth"] == 0:
            for s, previous in _held.pop("previous").items():
                # None: a handler set from C, not Python's
                signal.signal(s, previous if previous is not None else
                              (signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL))
            pending, _held["signals"] = _held["signals"], []
            if pending:
                signal.raise_signal(pending[0])  # runs the command's handler, now


def _hold_signals_in_extension_inits() -> None:
    """A Ctrl-C while a C extension module initialises (pyarrow's Cython modules, DuckDB, numpy;
    most are imported lazily, some by DuckDB itself) left it half-made: "ImportError:
    initialization failed", then a crash at exit (3 of 80 ingests interrupted while loading ended
    with SIGSEGV). The command holds SIGINT and SIGTERM back while any extension's init runs, on
    the main thread, and delivers them as soon as the outermost one is done."""
    from importlib.machinery import ExtensionFileLoader
    if getattr(ExtensionFileLoader, "traceflow_holds_signals", False):
        return

    def held(method):
        @functools.wraps(method)
        def run(self, arg):
            with deferred():
                return method(self, arg)
        return run
    for name in ("create_module", "exec_module"):
        setattr(ExtensionFileLoader, name, held(getattr(ExtensionFileLoader, name)))
    ExtensionFileLoader.traceflow_holds_signals = True  # type: ignore[attr-defined]


def _unraisable(u) -> None:
    """A Ctrl-C that lands in code whose errors Python only reports (a weakref callback, a
    finalizer) printed "Exception ignored in ..." with a traceback, and was lost: 1 interrupted
    `--cluster local:2` run in 30 on a loaded machine. Deliver it again to the main thread instead."""
    if u.exc_type is not None and issubclass(u.exc_type, KeyboardInterrupt):
        import _thread
        # from another thread, a moment later: raised here it would be lost again in the same callback;
        # once the command has returned (signals ignored) this does nothing
        threading.Timer(0.05, _thread.interrupt_main).start()
        return
    sys.__unraisablehook__(u)


def quiet_c_reports() -> None:
    """From here on, errors Python's C code reports rather than raises stay out of the output (the
    command's process, and each reader process it spawns: they share its stderr)."""
    sys.excepthook = _printed_by_c


def _printed_by_c(exc_type, value, tb) -> None:
    """Python's C code reports some errors it cannot raise through sys.excepthook, with no traceback:
    under ulimit -v 1.5 GB a reader that ran out of memory left "SystemError: deallocated bytearray
    object has exported buffers" above the one error line (CI, 1 run in 2; printed by a spawned reader
    process as often as by the command's). An exception that escapes a command always has a traceback
    (and the command catches them all), so one without is such a report: kept out of the user's
    output unless TRACEFLOW_DEBUG is set."""
    if tb is None and not os.environ.get("TRACEFLOW_DEBUG"):
        return
    sys.__excepthook__(exc_type, value, tb)


def _interrupter(fd: int) -> None:
    """Python runs a signal's handler only when the main thread is back in Python: while DuckDB ran
    a query (a recursive CTE typed into `sql`, a view in a database someone sent) Ctrl-C and SIGTERM
    were lost in most tries, one core at 100 % until kill -9. The signal's byte reaches this thread
    through the wakeup fd (written from C, at once); from then on it interrupts every connection
    traceflow opened (duck.WATCHED) every 50 ms until the process ends: a single interrupt() that
    lands before DuckDB starts the query (still parsing it) is cleared by the query's start."""
    from .duck import WATCHED
    wanted = {int(s) for s in SIGNALS}
    while True:
        try:
            got = os.read(fd, 64)
        except OSError:
            return
        if not got:
            return
        signums = [b for b in got if b in wanted]
        if signums:
            break
    if _seen["signal"] is None:
        _seen["signal"] = signal.Signals(signums[0])
    end = time.monotonic() + LAST_RESORT_S
    while time.monotonic() < end:
        for con in list(WATCHED):
            try:
                con.interrupt()
            except Exception:  # noqa: BLE001 - a connection closed meanwhile
                continue
        time.sleep(0.05)
    # DuckDB did not stop (an interrupt that landed while it set the query up, its close() waiting for
    # a query of a multi-statement text): 1 of 3 runs of an endless `sql` ran on. The process ends.
    code, word = EXIT.get(_seen["signal"], EXIT[signal.SIGINT])
    os.write(2, f"traceflow: {word}\n".encode())
    os._exit(code)


def _start_interrupter() -> None:
    """The thread of _interrupter: started once, from the main thread (set_wakeup_fd's rule)."""
    if getattr(_start_interrupter, "started", False):
        return
    r, w = os.pipe()
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    threading.Thread(target=_interrupter, args=(r,), name="traceflow-interrupter", daemon=True).start()
    _start_interrupter.started = True  # type: ignore[attr-defined]


def install() -> None:
    """From here on, Ctrl-C and SIGTERM raise KeyboardInterrupt in the main thread (the command
    cleans up and ends with exit_interrupted()), and interrupt the DuckDB queries running (_interrupter)."""
    from .outputs import BEFORE_REPLACE
    for s in SIGNALS:
        signal.signal(s, _on_signal)
    _start_interrupter()
    sys.unraisablehook = _unraisable
    quiet_c_reports()
    _hold_signals_in_extension_inits()
    if raise_if_interrupted not in BEFORE_REPLACE:
        BEFORE_REPLACE.append(raise_if_interrupted)


def ignore() -> None:
    """The work is done (or being ended): a late signal in interpreter shutdown must not turn the
    exit into a death by that signal (seen as exit -2 when one landed just after the command returned)."""
    for s in SIGNALS:
        signal.signal(s, signal.SIG_IGN)


def is_interrupt(e: BaseException) -> bool:
    """Any error once a signal came is the signal's doing; DuckDB also names its own."""
    return _seen["signal"] is not None or type(e).__name__ == "InterruptException" or "Query interrupted" in str(e)


def exit_interrupted():
    """The one line and the exit code: 130 for Ctrl-C, 143 for SIGTERM."""
    ignore()
    # CPython 3.11 marks a KeyboardInterrupt that ends an eval() of a string as never handled (and
    # collections.namedtuple evals one per class it builds, while modules import): the interpreter
    # then kills itself with SIGINT at exit, whatever sys.exit says (exit -2, 2 of 80 runs
    # interrupted while starting). An eval() of a string that succeeds clears the mark.
    eval("None")
    code, word = EXIT.get(_seen["signal"], EXIT[signal.SIGINT])
    import click  # (a line of our own words: nothing from a trace to escape, as terminal.say would)
    click.echo(f"traceflow: {word}", err=True)
    sys.exit(code)

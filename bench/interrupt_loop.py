"""Ctrl-C at random moments of `traceflow postmortem` on the bundled job, many times: every run
must end with exit 130 (or 0, when it finished first) and print no traceback.

    python bench/interrupt_loop.py 120 --seed 7 [--cluster local:2] [--load] [--terminal] [--between LO HI]

--load runs a busy process beside it (CI runs two test workers on two cores: the faults showed
only under load). A run that hangs for 40 s gets its threads' stacks written (gdb) and is killed.
--terminal puts the command on a pseudo-terminal, where the progress display redraws from a
thread of its own. Prints the count per exit status, each odd run's stderr, and anything a run left
in its folder (a scratch folder, an empty output folder). How the Ctrl-C faults of sessions 11 and
12 were found and their fixes checked.
"""
from __future__ import annotations

import argparse
import os
import pty
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cluster", help="run with --cluster ADDRESS instead of --jobs 3")
    ap.add_argument("--load", action="store_true", help="a busy process beside the runs")
    ap.add_argument("--terminal", action="store_true", help="stdout and stderr on a pseudo-terminal (the progress display runs)")
    ap.add_argument("--between", type=float, nargs=2, metavar=("LO", "HI"),
                    help="interrupt between LO and HI seconds after the start (default 0.3-3, cluster 0.5-6)")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    inputs = sorted(str(p) for p in (ROOT / "fixtures" / "ddp4_sync_stall").glob("rank-*.json.gz"))
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if a.load else None
    codes: dict[int, int] = {}
    try:
        for _ in range(a.runs):
            d = tempfile.mkdtemp(prefix="interrupt-loop-")
            extra = ["--cluster", a.cluster] if a.cluster else ["--jobs", "3"]
            t0 = time.perf_counter()
            if a.terminal:
                master, slave = pty.openpty()
                outputs: dict = {"stdout": slave, "stderr": slave}
            else:
                outputs = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
            p = subprocess.Popen([sys.executable, "-m", "traceflow.cli", "postmortem", *inputs, "-o", f"{d}/pm", *extra],
                                 start_new_session=True, env=dict(os.environ, TMPDIR=d, PYTHONFAULTHANDLER="1"), cwd=d,
                                 **outputs)
            if a.terminal:
                os.close(slave)
                chunks: list[bytes] = []
                drain = threading.Thread(target=_drain, args=(master, chunks), daemon=True)
                drain.start()
            after = rng.uniform(*(a.between or ((0.5, 6.0) if a.cluster else (0.3, 3.0))))
            time.sleep(after)
            os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
            try:
                if a.terminal:
                    p.wait(timeout=40)
                    drain.join(timeout=10)
                    os.close(master)
                    err = ANSI.sub("", b"".join(chunks).decode("utf-8", "replace"))
                else:
                    _, err = p.communicate(timeout=40)
                left = [x for x in os.listdir(d) if x != "pm"] + ["pm (empty)"] * (os.path.isdir(f"{d}/pm") and not os.listdir(f"{d}/pm"))
                if left:
                    print(f"left behind after exit {p.returncode}: {left}", flush=True)
            except subprocess.TimeoutExpired:
                stacks = subprocess.run(["gdb", "-p", str(p.pid), "-batch", "-ex", "thread apply all bt"],
                                        capture_output=True, text=True).stdout if shutil.which("gdb") else ""
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
                print(f"HANG after {after:.2f} s\n{stacks[-4000:]}", flush=True)
                codes[-999] = codes.get(-999, 0) + 1
                continue
            finally:
                shutil.rmtree(d, ignore_errors=True)
            codes[p.returncode] = codes.get(p.returncode, 0) + 1
            if p.returncode not in (0, 130) or "Traceback" in err:
                print(f"exit {p.returncode} after {after:.2f} s:\n{err[-2000:]}", flush=True)
            elif p.returncode == 0:  # finished before the Ctrl-C, or the Ctrl-C was lost: say which it looks like
                print(f"exit 0: Ctrl-C at {after:.2f} s, exit {time.perf_counter() - t0:.2f} s after the start", flush=True)
    finally:
        if hog:
            hog.kill()
    print(codes)
    return 0 if set(codes) <= {0, 130} else 1


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _drain(fd: int, chunks: list):
    while True:
        try:
            b = os.read(fd, 1 << 16)
        except OSError:  # EIO: the command's side closed
            return
        if not b:
            return
        chunks.append(b)


if __name__ == "__main__":
    sys.exit(main())

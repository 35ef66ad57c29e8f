"""The ingest's settings: one frozen object, checked once, before any work, and handed down whole.

Every setting of an ingest is a field: the command's flags, `traceflow.ingest(...)`'s keywords, and
the two environment variables, read once, here. The object goes down as it is: to the readers
(readers/worker.read_file), to a local ingest's reader processes and, pickled, to a cluster's Dask
workers (rank_task.run): a worker never depends on the environment it was started in. A leaf: the
checks that need the readers' or the cluster's rules (the inflation bound's syntax, local:N's
bound) live here, and those modules take them from here.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from .errors import MachineLimit, UsageError, one_line

ALIGN = ("off", "auto", "collectives")
MAX_JOBS = 1024  # -j: click's IntRange on the command line, the same bound for Python callers
ENV_MAX_INFLATE = "TRACEFLOW_MAX_INFLATE"
ENV_MEMORY_LIMIT = "TRACEFLOW_MEMORY_LIMIT"


@dataclass(frozen=True)
class Options:
    """Every setting of one ingest (the command's flags, `traceflow.ingest`'s keywords). Checked at
    construction: a bad value is a UsageError (exit 2) or MachineLimit (exit 3), in one line,
    before any file is read. Frozen and picklable: a Dask worker gets the same object."""
    append: bool = False
    rank_pattern: str | None = None     # --rank-pattern: a file's rank from its name (first group)
    align: str = "auto"                 # --align: off | auto | collectives (derive/clock)
    nsys: str | None = None             # --nsys: the nsys executable, for .nsys-rep inputs
    jobs: int | None = None             # -j: reader processes (default: one per core)
    step_pattern: str | None = None     # --step-pattern: a regex (DuckDB's RE2) with the step number as group 1
    force: bool = False                 # --force: replace an output traceflow did not write
    max_inflate: str | None = None      # --max-inflate, else $TRACEFLOW_MAX_INFLATE; None: the readers' default
    memory_limit: str | None = None     # $TRACEFLOW_MEMORY_LIMIT: DuckDB's memory_limit for the ingest (machine.db_config)
    peak_tflops: float | None = None    # --peak-tflops / --peak-gbps: the GPUs' peaks (hardware.py)
    peak_gbps: float | None = None
    cluster: Any = None                 # --cluster: 'local:N', a scheduler address, or a dask.distributed.Client
    name: str | None = None             # --name: the job's name in titles (job_name.py)

    def __post_init__(self):
        # the environment, read once: a flag (or keyword) wins over it
        if self.max_inflate is None and os.environ.get(ENV_MAX_INFLATE):
            try:
                parse_limit(os.environ[ENV_MAX_INFLATE])
            except UsageError as e:
                raise UsageError(f"{ENV_MAX_INFLATE}: {str(e).removeprefix('--max-inflate ')}") from None
            object.__setattr__(self, "max_inflate", os.environ[ENV_MAX_INFLATE])
        elif self.max_inflate:
            parse_limit(self.max_inflate)
        if self.memory_limit is None and os.environ.get(ENV_MEMORY_LIMIT):
            _check_memory_limit(os.environ[ENV_MEMORY_LIMIT], ENV_MEMORY_LIMIT)
            object.__setattr__(self, "memory_limit", os.environ[ENV_MEMORY_LIMIT])
        elif self.memory_limit:
            _check_memory_limit(self.memory_limit, "memory_limit")
        self._check()

    def _check(self):
        """Every flag's value, before any work, so a typo costs nothing."""
        if self.cluster is not None and not hasattr(self.cluster, "submit"):  # an address, not a Client
            check_address(self.cluster)
        if self.cluster is not None and self.append:
            raise UsageError("--append cannot be combined with --cluster: a cluster job's tables are views over its "
                             "shards; ingest all the rank files again")
        for flag, v in (("--peak-tflops", self.peak_tflops), ("--peak-gbps", self.peak_gbps)):
            # at least 0.001 (1 GFLOP/s, 1 MB/s): 1e-300 passed, and made the roof times infinite (an internal
            # error at casting them to BIGINT)
            if v is not None and not (isinstance(v, (int, float)) and 1e-3 <= v < 1e7):
                raise UsageError(f"{flag} must be a number from 0.001 to 10,000,000 (TFLOP/s, GB/s), not {v}")
        if self.align not in ALIGN:
            raise UsageError(f"--align must be off, auto or collectives, not {self.align!r}")
        if self.jobs is not None and not (isinstance(self.jobs, int) and 1 <= self.jobs <= MAX_JOBS):
            raise UsageError(f"-j/--jobs must be a number of processes from 1 to {MAX_JOBS}, not {self.jobs!r}")
        if self.step_pattern is not None:
            _check_step_pattern(self.step_pattern)
        if self.rank_pattern is not None:
            rank_pattern(self.rank_pattern)

    def __getstate__(self) -> dict:
        """Pickled for a worker: a Client (a live connection) stays on the client; an address goes along."""
        state = dict(self.__dict__)
        if not isinstance(state["cluster"], (str, type(None))):
            state["cluster"] = None
        return state


def of(options: Options | None = None, **settings) -> Options:
    """`options` as given, or one built from keyword settings (`traceflow.ingest(files, out, align="off")`);
    both at once is a UsageError (which one would win?)."""
    if options is None:
        return Options(**settings)
    if settings:
        raise UsageError(f"give the settings in `options` or as keywords, not both ({', '.join(sorted(settings))})")
    return options


def _check_step_pattern(pattern: str):
    """The pattern runs in DuckDB (RE2 syntax): try it there, before reading anything."""
    import duckdb

    from .duck import connect
    try:
        connect().execute("SELECT regexp_extract('step 1', ?, 1)", [pattern]).fetchall()
    except duckdb.Error as e:
        raise UsageError(f"--step-pattern is not a valid regular expression with one group ({one_line(e)})") from None


def _check_memory_limit(text: str, where: str):
    import duckdb

    from .duck import connect
    try:
        connect().execute("SET memory_limit = ?", [text])
    except duckdb.Error as e:
        raise UsageError(f"{where}={text!r}: not a size DuckDB takes, such as '4GB' ({one_line(e)})") from None


def rank_pattern(pattern: str) -> re.Pattern:
    """--rank-pattern compiled (Python's re: readers/ranks.py runs it on file names)."""
    try:
        return re.compile(pattern)
    except re.error as e:
        raise UsageError(f"--rank-pattern is not a valid regular expression: {e}") from None


# The bound on inflation (--max-inflate / TRACEFLOW_MAX_INFLATE): 'Nx' times the file's size, or a
# size. readers/compressed.py holds the default and applies it.
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40}
_LIMIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:(x)|([kmgt]i?)?b?)\s*$", re.IGNORECASE)


def parse_limit(text: str) -> tuple[str, float]:
    """'100x' -> ('ratio', 100.0); '4GB' -> ('bytes', 4e9); '512MiB' -> ('bytes', 536870912)."""
    m = _LIMIT.match(text or "")
    if not m or float(m.group(1)) <= 0:
        raise UsageError(f"--max-inflate {text!r}: give a ratio such as '100x' or a size such as '4GB'")
    if m.group(2):
        return "ratio", float(m.group(1))
    return "bytes", float(m.group(1)) * _UNITS[(m.group(3) or "").lower()]


# --cluster local:N: how many worker processes this machine can take (cluster.py starts them)

def local_bound() -> int:
    """The most worker processes `local:N` may start here: 4 per core (at least 8), and no more than
    the memory holds at 256 MiB each (a worker's interpreter with Arrow and DuckDB)."""
    from .machine import ram_bytes
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(max(8, 4 * cores), ram_bytes() // (256 << 20)))


def check_address(cluster: Any) -> None:
    """UsageError (exit 2) for a `local:N` that is no number, below 1 or past local_bound(); MachineLimit
    (exit 3) when ulimit -n is too low for it: before any work."""
    text = str(cluster)
    if not text.startswith("local:"):
        return
    try:
        n = int(text.split(":", 1)[1])
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError(f"--cluster {one_line(text, 40)}: local:N needs a number of worker processes, e.g. local:4")
    if n > (bound := local_bound()):
        raise UsageError(f"--cluster {text}: at most local:{bound} on this machine (its cores and memory); for more "
                         "workers, start a Dask cluster and give its scheduler's address (tcp://host:8786)")
    check_open_files(n)


# Open files a LocalCluster of N workers needs (ulimit -n), measured with the ddp2_flops job: local:2
# failed at 40 and ran at 48, local:4 failed at 64 and ran at 80 ("Nanny failed to start", or at 16 a
# hang with Dask's tracebacks); 32 + 12 per worker, with a margin over both.
FILES_BASE, FILES_PER_WORKER = 32, 12


def check_open_files(n: int) -> None:
    """MachineLimit (exit 3) when the open-files limit (ulimit -n) is below what local:N needs."""
    import resource
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = FILES_BASE + FILES_PER_WORKER * n
    if soft != resource.RLIM_INFINITY and soft < need:
        raise MachineLimit(f"--cluster local:{n} needs at least {need} open files, and the limit (ulimit -n) is {soft}: "
                           f"raise it (ulimit -n {need}) or ask for fewer workers")

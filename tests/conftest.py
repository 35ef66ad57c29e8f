"""Shared test setup: where the real fixtures are, and databases ingested once per session."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("TRACEFLOW_SHARED", ROOT.parent / "shared"))
FIX = SHARED / "fixtures"
BUNDLED = ROOT / "fixtures"
# the wild corpus of public traces (tests/wild/README.md): never in the repository
WILD = Path(os.environ.get("TRACEFLOW_WILD", SHARED / "wild"))
WILD_MANIFEST = json.loads((ROOT / "tests" / "wild" / "manifest.json").read_text())


def wild_file(e: dict) -> Path:
    """A manifest entry's file in the wild corpus; the test skips where it is absent or not the
    file the manifest names (its sha256)."""
    import hashlib
    p = WILD / e["file"]
    if not p.exists():
        pytest.skip(f"{e['file']} not in the wild corpus at {WILD} (set TRACEFLOW_WILD)")
    if hashlib.sha256(p.read_bytes()).hexdigest() != e["sha256"]:
        pytest.skip(f"{p}: not the file the manifest names (sha256 differs)")
    return p
TRACEFLOW = [sys.executable, "-m", "traceflow.cli"]

# The developer's terminal size must not change what the commands under test print through a pipe
# (COLUMNS sets a piped table's width): tests that want a width set it themselves.
for _var in ("COLUMNS", "LINES"):
    os.environ.pop(_var, None)

needs_shared = pytest.mark.skipif(not FIX.is_dir(), reason=f"real fixtures not found at {FIX} (../shared is absent)")


def fixture_files(rel: str) -> list[str]:
    """The trace files of a fixture folder, or the one file `rel` names."""
    d = FIX / rel
    if d.is_file():
        return [str(d)]
    if not d.is_dir():
        pytest.skip(f"fixture {rel} not found under {FIX}")
    return sorted(str(p) for p in d.iterdir() if p.name.endswith((".sqlite", ".json.gz", ".json")) and not p.name.startswith("truth"))


def truth(rel: str, rank: int) -> list[dict]:
    p = FIX / rel / f"truth-rank{rank}.json"
    return json.loads(p.read_text()) if p.exists() else []


def run_cli(*args, cwd=None, env=None, input=None, timeout=600):
    """The real command, in a subprocess, as a user runs it."""
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([*TRACEFLOW, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=e,
                          input=input, timeout=timeout)


def on_a_terminal(*args, env=None, columns: int = 100, program=None) -> str:
    """The command's output with a pseudo-terminal of `columns` as its stdout and stderr, as a user
    at a terminal sees it. `program`: what runs with `args` (default: traceflow)."""
    import fcntl
    import pty
    import struct
    import termios
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    e = {**os.environ, **(env or {}), "COLUMNS": str(columns), "LINES": "50"}
    p = subprocess.Popen([*(program or TRACEFLOW), *map(str, args)], stdout=slave, stderr=slave, env=e)
    os.close(slave)
    chunks = []
    while True:
        try:
            b = os.read(master, 1 << 16)
        except OSError:  # EIO: the other side closed
            break
        if not b:
            break
        chunks.append(b)
    p.wait(timeout=120)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


# Temporary files stay inside the clone (ignored by git), not in /tmp/pytest-of-<user>: one folder per run,
# `.pytest-tmp/run-<pid>`, xdist's workers each in a folder of it (popen-gwN). TMPDIR points to a folder
# of the run's own (what the commands under test write to the temp folder: their scratch, Dask's, nsys
# exports), removed at the end. Each passing test's tmp_path goes as it passes (pyproject: tmp_path_retention_policy =
# "failed"); a run that passes removes its folder and `.pytest-tmp` (a full run had left 3.0 GB: every
# test's derived traces and databases); a failed run keeps its folder for a look, the last one only.
TMP_ROOT = ROOT / ".pytest-tmp"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if config.option.basetemp or hasattr(config, "workerinput"):  # given, or a worker (xdist gave it one)
        return
    TMP_ROOT.mkdir(exist_ok=True)
    for d in TMP_ROOT.glob("run-*"):  # the folders of runs that ended (failed ones): this run replaces them
        pid = d.name[4:]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(d, ignore_errors=True)
    run = TMP_ROOT / f"run-{os.getpid()}"
    config.option.basetemp = str(run)
    config._tf_run_dir = run
    # TMPDIR: a folder of this run's own in the system's temp folder, removed at the end whatever the
    # outcome (inside the clone its path was too long for Chromium's singleton socket: exit 21)
    import tempfile
    scratch = Path(tempfile.mkdtemp(prefix="tf-tests-"))
    config._tf_scratch = scratch
    os.environ["TMPDIR"] = str(scratch)  # the workers and every subprocess inherit it
    tempfile.tempdir = None


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    run = getattr(config, "_tf_run_dir", None)
    if (scratch := getattr(config, "_tf_scratch", None)) is not None:
        shutil.rmtree(scratch, ignore_errors=True)
    if run is None or getattr(config, "_tf_failed", True):
        return
    shutil.rmtree(run, ignore_errors=True)
    try:
        TMP_ROOT.rmdir()  # only when no other run's folder is in it
    except OSError:
        pass


def pytest_sessionfinish(session, exitstatus):
    if not hasattr(session.config, "workerinput"):
        session.config._tf_failed = exitstatus not in (0, 5)  # 5: no tests collected


# --- the quick suite and the slow one --------------------------------------------------------------
# `make test` runs what is not marked slow (under 10 minutes on 2 idle cores); `make test-slow`, which CI runs
# too (.ci/run), runs the rest. Measured with `pytest --durations` on 2 cores under a load of ~14
# (session 13): the whole suite was 3,075 s of test time (27.5 min with -n 2); the tests that stay quick
# took 608 s of it, a fifth. Marked here, in one place, with the reason, rather than in each file:
SLOW_MODULES = {
    "test_cluster.py": "Dask clusters: a scheduler and worker processes per test",
    "test_dask_scheduler.py": "a Dask scheduler and workers started as processes, two ingests",
    "test_corpus.py": "the bad-input corpus, 115 damaged files (make fuzz runs the full one)",
    "test_robustness.py": "kill -9 loops, concurrent writers, mutation fuzzing",
    "test_whatif_pairs.py": "replays the long4 benchmark's fixed and faulty runs",
    "test_flight_recorder.py": "records real gloo hangs with torch (~12 s of CPU, 30 s of wall), 2,048 derived dumps, torch's fr_trace",
    "test_claims_read19_path.py": "four wild ingests (ICON stdpar nsys, pipit saxpy, two GPUPuzzlers files), 20-70 s each",
}
SLOW_TESTS = {
    # the longest of the quick suite (10-20 s each on 2 idle cores: `pytest --durations`), moved here so
    # that `make test` stays under 10 minutes (it took 10 min 25 s on a fresh clone with them)
    "test_every_claim_reproduces_its_figure_and_every_view_shows_the_same_rows": "every claim's repro SQL, 20 s",
    "test_the_oracle_checks_launch_names_sharing_dominant_and_mfu_and_catches_moved_ones": "the claim oracle, 17 s",
    "test_mfu_is_a_lower_bound_only_where_flop_ops_lack_flops": "two ingests, one wild, 15 s",
    "test_the_shared_gpu_caveat_says_once_what_was_proven": "the H100 straggler job, both profilers, 20 s",
    "test_sql_never_writes_a_file_nor_reads_one_outside": "every way `sql` could write, 15 s",
    "test_wild_nsys_without_op_ranges_says_why": "a wild nsys post-mortem, 14 s",
    "test_ids_are_printed_whole_quantities_grouped": "every pack at a terminal, 13 s",
    "test_nsys_causes_match_a_sweep_of_the_raw_export": "a sweep of an H100 nsys export, 12 s",
    "test_ddp4_straggler_ranks_nccl_steps_collectives": "the H100 nsys straggler job, 11 s",
    "test_a_trace_whose_memory_events_carry_no_totals_still_gets_its_report": "a 2021 wild trace's postmortem (test_memory.py)",
    "test_a_clusters_worker_gets_the_options": "two ingests on a LocalCluster (test_options.py)",
    # the peer comparison: Holistic Trace Analysis in its own venv (make peers)
    "test_hta_temporal_breakdown_agrees": "runs Holistic Trace Analysis",
    # recordings and big derived inputs
    "test_record_real_trace_with_torch_and_ingest": "records a trace with torch",
    "test_nsys_and_kineto_recordings_agree": "both recordings of a job, ingested",
    "test_mixed_formats_in_one_ingest": "eight files of two formats",
    "test_kineto_of_one_run_and_nsys_of_another_are_refused": "four files of two runs, ingested twice",
    "test_compressed_exports_read_like_the_plain_file": "compresses nsys exports",
    "test_source_hash_is_the_files_blake2b": "hashes every shared fixture",
    "test_a_bomb_of_valid_events_is_refused_by_default": "writes a trace of millions of events",
    "test_inflation_bound_is_a_setting": "inflates big traces",
    "test_the_oracle_recomputes_lateness_and_coverage_and_catches_a_moved_figure": "reads the bundled job's raw files twice",
    # issue 41's leftovers, each on its real file (tests/test_claims_real_inputs.py): one wild ingest each, 15-30 s
    "test_a_one_time_launch_stall_is_replayed_as_its_own_fix": "the wild MI250 job ingested, a whatif subprocess",
    "test_xla_host_events_on_their_own_threads_are_traced_host_work": "the wild 8-GPU JAX trace ingested",
    "test_no_mfu_is_claimed_where_most_flop_time_has_unknown_flops": "a 2021 wild ResNet50 trace ingested, read raw",
    "test_the_replay_matches_collectives_as_collective_waits_does": "the HTA pair and the bundled job, every step replayed",
    # session 17's read, its leftovers (tests/test_claims_read18.py): one real ingest each, 6-11 s
    "test_blocking_read_backs_get_a_fix_or_no_quoted_gain": "the wild vLLM rpd ingested, read raw",
    "test_a_scaling_bound_is_withheld_where_the_host_on_the_path_waits_on_a_busy_gpu": "the wild DeepSeek trace ingested",
    "test_a_launch_stall_in_a_later_step_is_named": "the H100 nsys graphs job ingested",
    "test_the_host_bound_headline_names_each_host_cause": "the fused HTA pair ingested, read raw",
    "test_a_fused_ddp_job_names_no_range_that_cannot_hold_the_time_and_quotes_the_largest_gain": "a 4-rank fused AMD job ingested, 70 s",
    "test_caching_off_is_told_to_turn_it_on_and_allocator_idle_gets_no_launch_fix": "a 3.4 s MI300X step ingested, 40 s",
    "test_rank_in_a_file_name_past_int32": "ingests nsys exports",
    "test_rank_from_file_order_warns_and_pattern_overrides": "three ingests of nsys exports",
    "test_trace_without_distributed_info_takes_rank_from_name": "rewrites traces",
    "test_escape_sequences_in_every_string_field_never_reach_the_terminal": "every command on a hostile trace",
    # derived clock and capture edits, each a fresh ingest of a shared fixture
    "test_gpu_running_behind_the_host": "edits and ingests an nsys job",
    "test_kineto_capture_cut_mid_step": "edits and ingests a Kineto job",
    "test_profiler_step_recorded_as_cpu_op": "edits and ingests a Kineto job",
    "test_nsys_without_metadata_table": "edits and ingests an nsys job",
    "test_alignment_undoes_a_shift": "shifts a rank's clock and ingests again",
    "test_the_shift_gives_the_rows_deriving_again_gives": "shifts a rank's clock of the bundled job and ingests it",
    "test_nsys_kernels_link_to_the_innermost_emit_nvtx_op": "ingests an nsys job under emit_nvtx",
    "test_an_unknown_device_is_a_warning_and_flags_set_the_peaks": "three ingests",
    "test_copy_bytes_follow_from_the_recorded_shapes": "records with torch",
    "test_postmortem_verdict": "postmortem of the nsys job (the bundled one stays quick)",
    "test_annotate_rank_filter_keeps_file_small": "Perfetto traces of the nsys job",
    "test_trace_folders_are_ingested_first": "diff of two trace folders",
    "test_cli_tables_json_csv_and_page": "diff of the shared jobs in three formats and a page",
    "test_clock_skew_found_from_collectives": "shifts clocks of every multi-rank fixture",
    "test_nsys_capture_cut_mid_step": "edits and ingests an nsys job",
    "test_cpu_only_trace_warns": "records with torch",
    "test_convolution_flops_equal_flop_counter_on_a_cpu_trace": "records with torch",
    "test_flops_from_shapes_equal_flop_counter_and_profiler_on_a_cpu_trace": "records with torch",
    "test_small_batches_give_the_same_rows": "reads every fixture in small batches",
    "test_perfetto_trace_interned_with_launch_flows_and_small": "Perfetto traces of the shared jobs",
    "test_packets_equal_protobuf_library": "every packet against the protobuf library",
    "test_cli_json_and_page": "scaling across three ingests",
    "test_every_schema_version_is_read": "ingests an export of every nsys schema version",
    "test_host_calls_loaded_per_step_equal_all_at_once": "walks every fixture twice",
    "test_the_walk_loads_only_the_ranks_it_stands_on": "walks the nsys jobs rank by rank",
    "test_nsys_rep_exported_through_nsys": "runs nsys export",
    # (not measured one by one: judged from what they run)
    "test_thousands_of_ranks": "Flight Recorder dumps of thousands of ranks",
    "test_a_cluster_ingest_gives_the_local_memory_rows": "a Dask cluster",
    "test_sigterm_on_a_local_cluster_leaves_nothing": "a Dask cluster",
    "test_a_local_cluster_run_leaves_no_dask_scratch_space": "a Dask cluster",
    "test_wild_copy_bound_two_gpu_capture": "a wild trace ingested",
    "test_wild_compute_and_host_bound_kineto": "a wild trace ingested",
    "test_a_real_cpu_run_data_loading_and_a_sleep_in_a_range": "records with torch",
    "test_snapshot_again_with_append_is_skipped": "copies and appends to the bundled job's database",
    # traceflow mcp: real servers over stdio driven by the SDK's client, on ingested jobs (test_mcp.py)
    "test_every_tool_agrees_with_the_cli": "MCP server and the CLI on two ingested jobs",
    "test_every_figure_reruns_through_the_sql_tool": "an MCP server on an ingested job",
    "test_replies_are_bounded_and_paged": "MCP servers on an ingested job",
    "test_hostile_calls_are_one_line_errors_and_the_server_lives": "an MCP server, one call stopped by its 10 s bound",
    "test_trace_files_are_ingested_once_and_the_database_goes_with_the_server": "three MCP servers, each ingesting",
    "test_output_keeps_the_database": "an MCP server ingesting",
    "test_question_set": "an MCP server per job of the question set, and the raw files read by the oracle",
    "test_autograd_profiler_json_list": "records with torch",
    "test_perfetto_trace_traceflow_wrote_reads_back_to_the_same_gpu_ops": "two postmortems and two ingests of the bundled job",
    "test_exports_not_read_say_what_to_pass": "six refused ingests, each a subprocess",
    "test_a_shared_gpu_job_gets_no_launch_advice": "ingests a 4-rank nsys job",
    # cross-rank blame (tests/test_blame.py): each ingests a job and reads its raw files
    "test_unnamed_communicators_get_no_cross_rank_wait": "edits and ingests an nsys job (60 s)",
    "test_clock_keeps_time_sliced_ranks_interleaved": "two ingests of the bundled job, raw kernels (25 s each)",
    "test_sharing_lateness_is_not_blamed": "ingests the bundled job, reads its raw launches (20 s)",
    "test_partial_capture_and_point_to_point_hta": "ingests the HTA pair (20 s)",
    # issue 45's hostile round (tests/test_hostile_45.py): each runs a command until a signal or a bound
    "test_a_signal_stops_a_query_that_never_ends": "a query runs 4 s of CPU before its signal, four times",
    "test_a_cluster_address_that_is_no_scheduler": "waits out the 10 s probe of a silent port",
    "test_a_pickle_of_shared_references_is_refused_in_bounded_time": "builds and refuses two pickle bombs",
    "test_an_nsys_rowid_jump_reads_by_rows": "ingests an edited nsys export",
    "test_a_newline_in_a_trace_string_forges_no_line": "a postmortem and two ingests",
    "test_a_huge_kernel_name_is_cut": "a postmortem of a trace with an 8 MB name",
    "test_ctrl_c_during_an_nsys_export_leaves_nothing_in_the_cache": "interrupts an export",
    "test_postmortem_replaces_its_three_outputs_together": "two postmortems per signal",
    "test_an_address_space_limit_is_one_line": "four ingests under ulimit -v",
    "test_too_few_open_files_for_a_local_cluster_is_said_up_front": "a Dask cluster under ulimit -n",
    # the heaviest of the quick suite by CPU-seconds (TRACEFLOW_CPU_TIMES, issue 45), each an ingest or a
    # cluster of its own rather than a share of a session's databases
    "test_a_cluster_ingest_gives_the_local_nsys_memory_rows": "a Dask cluster (12.2 CPU-s)",
    "test_launch_idle_after_the_call_returned_on_one_rank_names_no_cause_it_cannot_see": "one rank ingested alone (13.5 CPU-s)",
    "test_titles_name_the_job_by_its_input": "three ingests and reports (12.6 CPU-s)",
    "test_a_users_pickle_in_a_dump_folder_is_passed_over": "ingests of dump folders (14.7 CPU-s)",
    "test_runs_of_different_models_are_warned_about_loudly": "ingests two jobs (9.2 CPU-s)",
    "test_a_database_from_an_older_traceflow_is_one_line": "copies and rewrites the bundled database twice (9.0 CPU-s)",
    "test_slurm_epilog_runs_the_post_mortem_of_the_job_that_ended": "a post-mortem and two more runs through the epilog",
    "test_regression_gate_fails_the_stalled_step_and_names_what_grew": "ingests both ddp2 runs, three diffs",
    "test_one_step_graph_at_a_time_gives_the_rows_of_all_graphs_kept": "two H100 jobs ingested, the claims built twice (60-90 s each)",
    # session 19's read (tests/test_claims_read19_copies.py)
    "test_a_blocking_figure_over_ranks_gives_its_range_and_directions": "PARAM DLRM's 8 wild rank files ingested, read raw, 12 s",
    "test_syncs_after_pageable_copy_calls_are_claimed_with_the_copies_blocking": "a 4,096-copy wild trace, 50 s",
    "test_pageable_copies_both_ways_are_split_by_direction": "a wild trace of 300 copies and 4,400 launches, 50 s",
    "test_a_host_cause_names_only_an_op_or_range_that_holds_half_of_it": "a 4,096-copy wild trace, 70 s",
}
# Sweeps over every fixture (or every damaged value): the first case stays quick, the others are slow.
SWEEPS = {
    "test_clock_skew_found_from_collectives", "test_every_pack_runs", "test_values_a_trace_gets_wrong_are_refused_with_a_warning",
    "test_nsys_numeric_extremes", "test_report_renders_offline", "test_the_measured_graph_replays_to_the_measured_step",
    "test_counts_match_json", "test_row_counts_match_source", "test_half_durations_halve_gpu_bound_steps",
    "test_segments_tile_each_step", "test_host_activity_is_the_innermost_covering_span", "test_every_pack_reads_at_a_terminal",
    "test_ingest_refuses_outputs_it_does_not_own", "test_conservation_on_every_fixture", "test_step_breakdown_adds_up",
    "test_peer_wait_on_path_equals_collective_waits", "test_fast_and_loose_paths_agree_on_real_traces",
    "test_report_and_annotate_outputs", "test_force_replaces_only_regular_files_that_are_not_inputs",
    "test_real_gpu_traces_peaks_equal_the_sweep",
    "test_wild_trace", "test_each_recorded_fault_gives_its_desync_row_and_sentence", "test_bad_dumps_one_line_exit_3",
    "test_torch_fr_trace_as_oracle", "test_the_first_finding_names_the_injected_fault", "test_damaged_rocm_files_one_line_exit_3",
    "test_damaged_rocprof_csv_one_line_exit_3", "test_postmortem_on_each_rocm_format",
    "test_a_hidden_stall_is_not_charged_and_the_sync_fault_is_found", "test_public_traces_lead_with_their_class",
    "test_extra_sync_figure_is_its_repro_sqls_statistic",
    "test_fault_jobs_claims_pass_the_oracle_and_the_headline_names_the_fault", "test_wild_multi_rank_claims_pass_the_oracle",
    "test_an_accelerator_not_read_is_not_called_cpu_only",  # three wild post-mortems
    "test_the_bounded_grouping_is_the_exhaustive_one", "test_the_bound_rejects_only_pairs_the_exact_test_rejects",
    "test_real_csv_run_kernels_link_to_their_hip_calls", "test_nsys_jax_archive_without_its_report_says_what_it_holds",
    "test_distinct_zero_length_host_events_are_not_dropped_as_recorded_twice",  # 7 wild GPUPuzzlers files
    "test_the_pageable_copy_sentence_gives_each_direction_its_figure", "test_a_program_that_only_copies_is_told_it_computed_nothing",
    "test_advice_on_rocm_uses_rocms_words",
    "test_the_columns_are_the_rows_read_plainly",
}


def pytest_collection_modifyitems(config, items):
    first_of: dict[str, str] = {}
    for item in items:
        fn = getattr(item, "originalname", item.name)
        why = SLOW_MODULES.get(item.path.name) or SLOW_TESTS.get(fn)
        if fn in SWEEPS and first_of.setdefault(f"{item.path.name}::{fn}", item.nodeid) != item.nodeid:
            why = "one case of a sweep (the first runs in the quick suite)"
        if why:
            item.add_marker(pytest.mark.slow(reason=why))


_DBS: dict[str, Path] = {}


@pytest.fixture(scope="session")
def db_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("dbs")


@pytest.fixture(scope="session")
def ingested(db_dir):
    """ingested('h100/nsys/ddp4_sync_stall') -> path of a database of that fixture, made once."""
    import traceflow

    def make(rel: str, **opts) -> str:
        key = rel + repr(sorted(opts.items()))
        if key not in _DBS:
            files = fixture_files(rel)
            out = db_dir / (rel.replace("/", "_") + f"_{len(_DBS)}.duckdb")
            traceflow.ingest(files, str(out), **opts)
            _DBS[key] = out
        return str(_DBS[key])
    return make


def connect(path, copy_to=None):
    """A connection to a database, read-only; with `copy_to`, to a writable copy made there (a test
    that re-runs a pack on changed tables leaves the ingested database as it was)."""
    import duckdb

    from traceflow.duck import use_internal_schema
    if copy_to is not None:
        shutil.copy(path, copy_to)
    con = duckdb.connect(str(copy_to or path), read_only=copy_to is None)
    use_internal_schema(con)  # helper tables (step_windows, ...) by bare name, as traceflow's own SQL does
    return con


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


# --- the Kineto reader's two paths ---------------------------------------------------------------

def read_kineto(src, folder):
    """What the reader makes of a Kineto file: its trace record and each table it wrote, or the InputError."""
    import pyarrow.ipc as ipc

    from traceflow.errors import InputError
    from traceflow.readers.worker import read_file
    folder.mkdir()
    try:
        rec = read_file(str(src), str(folder), 0)[0]
    except InputError as e:
        return e
    tables = {p.name.split(".", 1)[1]: ipc.open_stream(str(p)).read_all() for p in sorted(folder.glob("*.arrow"))}
    return rec, tables


class loose_decoding:
    """Reads with the loose types only: the path odd traces take."""
    def __enter__(self):
        from traceflow.readers import kineto
        self.saved = kineto._strict_events_decoder, kineto._strict_meta_decoder
        kineto._strict_events_decoder, kineto._strict_meta_decoder = kineto._events_decoder, kineto._meta_decoder

    def __exit__(self, *exc):
        from traceflow.readers import kineto
        kineto._strict_events_decoder, kineto._strict_meta_decoder = self.saved


def pytest_terminal_summary(terminalreporter):
    """The skips in one closing line, counted per reason (`-q` hides them): a short run is never a
    surprise, and ../shared's absence is named."""
    skipped = terminalreporter.stats.get("skipped", [])
    reasons: Counter = Counter()
    for r in skipped:
        lr = r.longrepr
        text = lr[2] if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
        text = text.removeprefix("Skipped: ")
        if str(FIX) in text or "../shared" in text:
            text = f"the real fixtures are not at {FIX} (../shared is absent)"
        elif str(WILD) in text:
            text = f"not in the wild corpus at {WILD}"
        reasons[_short(text)] += 1
    if reasons:
        terminalreporter.write_line(f"{sum(reasons.values())} skipped: " + "; ".join(
            f"{n} × {why}" for why, n in reasons.most_common()))


def _short(text: str, width: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def tagged_processes(tag: str) -> list[int]:
    """Processes (of any parent) whose environment carries `tag`: the command's descendants."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if tag.encode() in (d / "environ").read_bytes():
                    found.append(int(d.name))
            except OSError:
                continue
    return found


# --- CPU-seconds per test (wall time under a shared machine's load says little) -------------------
# TRACEFLOW_CPU_TIMES=FILE: each test's CPU time (its process and the subprocesses it waited for,
# setup included) appended to FILE as `seconds<TAB>nodeid`; `sort -rn FILE | head -40` ranks them.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    out = os.environ.get("TRACEFLOW_CPU_TIMES")
    if not out:
        yield
        return
    import resource

    def cpu() -> float:
        s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
    t0 = cpu()
    yield
    with open(out, "a") as f:
        f.write(f"{cpu() - t0:.2f}\t{item.nodeid}\n")

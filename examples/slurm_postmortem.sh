#!/usr/bin/env bash
# traceflow postmortem on Slurm, two ways.
#
# 1. As an epilog (slurm.conf `Epilog=`, or the last line of a job's batch script), no arguments: the
#    post-mortem of the job that just ended, on this node. Slurm sets SLURM_JOB_ID (and SLURM_JOB_NAME,
#    SLURM_SUBMIT_DIR, SLURM_JOB_USER); the job wrote its per-rank traces to $TRACEFLOW_TRACES (default:
#    $SLURM_SUBMIT_DIR/traceflow/$SLURM_JOB_ID). The post-mortem goes to $TRACEFLOW_OUT (default: that
#    folder's postmortem/), its output and verdict to postmortem.log there. A job that wrote no traces is
#    skipped. The epilog always exits 0: Slurm drains a node whose epilog fails, and a bad trace is no
#    reason to take a node out of service (the log says what went wrong, with traceflow's exit code).
#
#      SLURM_JOB_ID=42 SLURM_SUBMIT_DIR=$HOME/train examples/slurm_postmortem.sh     # what Slurm runs
#
# 2. A big job's post-mortem on an allocation of its own: a Dask scheduler on the first node,
#    workers on every node, the rank files read as Dask tasks, the cross-rank phase on this node.
#    Output and inputs must be on storage every node sees (a parallel file system).
#
#      sbatch -N 8 --ntasks-per-node=1 --cpus-per-task=32 examples/slurm_postmortem.sh /lustre/runs/job42 /lustre/pm/job42
#
#    Needs: pip install 'traceflow[cluster]' in an environment every node can use.
#SBATCH --job-name=traceflow-postmortem
#SBATCH --time=01:00:00
set -euo pipefail
TRACEFLOW=${TRACEFLOW:-traceflow}

if [ $# -eq 0 ]; then  # the epilog
    [ -n "${SLURM_JOB_ID:-}" ] || { echo "slurm_postmortem: no arguments and no SLURM_JOB_ID: not run by Slurm" >&2; exit 0; }
    traces=${TRACEFLOW_TRACES:-${SLURM_SUBMIT_DIR:-$PWD}/traceflow/$SLURM_JOB_ID}
    if [ ! -d "$traces" ]; then
        echo "slurm_postmortem: job $SLURM_JOB_ID wrote no traces ($traces): nothing to do"
        exit 0
    fi
    out=${TRACEFLOW_OUT:-$traces/postmortem}
    mkdir -p "$out" || { echo "slurm_postmortem: job $SLURM_JOB_ID: cannot make $out" >&2; exit 0; }
    name="${SLURM_JOB_NAME:-job}-$SLURM_JOB_ID"
    as_user=()  # slurmd runs the epilog as root: the post-mortem runs as the job's user, in the user's folder
    if [ "$(id -u)" = 0 ] && [ -n "${SLURM_JOB_USER:-}" ] && [ "$SLURM_JOB_USER" != root ]; then
        as_user=(runuser -u "$SLURM_JOB_USER" --)
    fi
    rc=0
    "${as_user[@]}" "$TRACEFLOW" postmortem "$traces" -o "$out" --name "$name" >"$out/postmortem.log" 2>&1 || rc=$?
    echo "slurm_postmortem: job $SLURM_JOB_ID: traceflow exit $rc; $out/postmortem.log"
    exit 0
fi

RUNS=${1:?folder of rank files}
OUT=${2:?output folder (on shared storage)}
SCHED="$OUT/.dask-scheduler.json"
mkdir -p "$OUT"

dask scheduler --scheduler-file "$SCHED" --no-dashboard &
sched=$!
trap 'kill $sched 2>/dev/null || true' EXIT
while [ ! -s "$SCHED" ]; do sleep 1; done

# one worker process per core, on every node of the allocation (the readers are single-threaded)
srun --ntasks-per-node=1 dask worker --scheduler-file "$SCHED" --nworkers "${SLURM_CPUS_PER_TASK:-8}" --nthreads 1 \
     --memory-limit 0 &
workers=$!
trap 'kill $workers $sched 2>/dev/null || true' EXIT

addr=$(python -c "import json,sys; print(json.load(open(sys.argv[1]))['address'])" "$SCHED")
"$TRACEFLOW" postmortem "$RUNS" -o "$OUT" --cluster "$addr"

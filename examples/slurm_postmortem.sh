#!/usr/bin/env bash
# traceflow postmortem of a big job on a Slurm allocation: a Dask scheduler on the first node,
# workers on every node, the rank files read as Dask tasks, the cross-rank phase on this node.
# Output and inputs must be on storage every node sees (a parallel file system).
#
#   sbatch -N 8 --ntasks-per-node=1 --cpus-per-task=32 examples/slurm_postmortem.sh /lustre/runs/job42 /lustre/pm/job42
#
# Needs: pip install 'traceflow[cluster]' in an environment every node can use.
#SBATCH --job-name=traceflow-postmortem
#SBATCH --time=01:00:00
set -euo pipefail
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
traceflow postmortem "$RUNS" -o "$OUT" --cluster "$addr"

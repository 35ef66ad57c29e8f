-- collective_waits (pack `collective-waits`): in each collective, how long each rank waited for
-- its peers and how long the transfer itself took.
--
-- Inputs: collectives (matched across ranks by (comm, step, seq)).
--
-- One row per rank in a collective seen on at least two ranks. Times in ns.
--   comm, step, seq, op, rank
--   start_ns          when the rank's NCCL kernel began (ns since epoch)
--   end_ns            when the rank's NCCL kernel ended (ns since epoch)
--   wait_ns      from the rank's own start until the last rank started the collective (waiting for
--                peers; capped at the kernel's length)
--   transfer_ns  the rest of the kernel: end_ns - start_ns - wait_ns
--   last_start_ns  when the last rank started (ns since epoch)
--   n_ranks        ranks that recorded this collective
--   op_id          gpu_ops.op_id of the rank's NCCL kernel
-- collective_waits shows first: comm, step, seq, op, rank, wait_ns, transfer_ns, n_ranks
-- requires: collectives
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE collective_waits AS
WITH g AS (
    SELECT comm, step, seq, max(start_ns) AS last_start_ns, count(DISTINCT rank) AS n_ranks, mode(op) AS op
    FROM collectives GROUP BY comm, step, seq HAVING count(DISTINCT rank) >= 2
)
SELECT c.comm, c.step, c.seq, g.op, c.rank, c.start_ns, c.end_ns,
       least(g.last_start_ns - c.start_ns, c.end_ns - c.start_ns)::BIGINT AS wait_ns,
       (c.end_ns - c.start_ns - least(g.last_start_ns - c.start_ns, c.end_ns - c.start_ns))::BIGINT AS transfer_ns,
       g.last_start_ns, g.n_ranks, c.op_id
FROM collectives c JOIN g USING (comm, step, seq)
ORDER BY c.step, c.comm, c.seq, c.rank;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM collective_waits LIMIT 20;

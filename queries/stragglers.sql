-- @table stragglers: which rank every matched collective waited for.
--
--
-- One row per matched collective. Times in ns.
-- @column comm            VARCHAR  key           the NCCL communicator (process group) of the collective
-- @column step            INTEGER  key           the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every
--     step
-- @column seq             INTEGER  key           the collective's sequence number within its communicator and step
-- @column op              VARCHAR  text          the collective (allreduce, allgather, reduce_scatter, broadcast, ...)
-- @column last_rank       INTEGER  key           the rank that started the collective last
-- @column last_by_ns      BIGINT   figure:ns     how much later it started than the next-latest rank
-- @column total_wait_ns   BIGINT   figure:ns     sum over ranks of wait_ns: the peer wait this collective cost the job
-- @column start_ns        BIGINT   time          when the last rank started (ns since epoch)
-- @column blamed_wait_ns  BIGINT   figure:ns     sum over ranks of blamed_ns: the wait the last rank caused, after the second-last
--     rank's arrival (collective_waits.blamed_ns)
-- @column sharing         BOOLEAN  flag          its lateness is turns of a GPU it time-slices with the second-last rank, its host
--     having issued the collective in time (collective_waits.sharing): not a straggler's
--
-- @table stragglers_by_rank: per rank, the peer wait it caused; ordered by wait_caused_ns.
-- @column rank            INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column times_last      BIGINT   figure:count  collectives this rank started last
-- @column wait_caused_ns  BIGINT   figure:ns     the total_wait_ns of those collectives (ns)
-- @column worst_step      INTEGER  key           the step of the one that cost most; worst_wait_ns its total_wait_ns (ns)
-- @column worst_wait_ns   BIGINT   figure:ns     the total_wait_ns of the worst one (ns)
-- @column blamed_wait_ns  BIGINT   figure:ns     the blamed_wait_ns of those collectives whose lateness was not sharing (ns)
-- @column times_sharing   BIGINT   figure:count  collectives it started last by turns of a shared GPU (sharing)
-- stragglers shows first: comm, step, seq, op, last_rank, last_by_ns, total_wait_ns
-- stragglers_by_rank shows first: rank, times_last, wait_caused_ns, worst_step, worst_wait_ns
-- scope: job
-- requires: collective_waits
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE stragglers AS
WITH r AS (
    SELECT *, row_number() OVER (PARTITION BY comm, step, seq ORDER BY start_ns DESC, rank) AS k
    FROM collective_waits
)
SELECT comm, step, seq, any_value(op) AS op,
       max(rank) FILTER (WHERE k = 1) AS last_rank,
       (max(start_ns) FILTER (WHERE k = 1) - max(start_ns) FILTER (WHERE k = 2))::BIGINT AS last_by_ns,
       sum(wait_ns)::BIGINT AS total_wait_ns,
       max(start_ns) FILTER (WHERE k = 1) AS start_ns,
       sum(blamed_ns)::BIGINT AS blamed_wait_ns, bool_or(sharing) AS sharing
FROM r GROUP BY comm, step, seq ORDER BY step, comm, seq;

CREATE OR REPLACE TABLE stragglers_by_rank AS
SELECT last_rank AS rank, count(*) AS times_last, sum(total_wait_ns)::BIGINT AS wait_caused_ns,
       arg_max(step, total_wait_ns) AS worst_step, max(total_wait_ns) AS worst_wait_ns,
       coalesce(sum(blamed_wait_ns) FILTER (WHERE NOT sharing), 0)::BIGINT AS blamed_wait_ns,
       count(*) FILTER (WHERE sharing) AS times_sharing
FROM stragglers GROUP BY last_rank ORDER BY wait_caused_ns DESC;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM stragglers LIMIT 20;

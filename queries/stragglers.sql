-- stragglers (pack `stragglers`): which rank every matched collective waited for.
--
-- Inputs: collective_waits.
--
-- One row per matched collective. Times in ns.
--   comm, step, seq, op
--   last_rank      the rank that started the collective last
--   last_by_ns     how much later it started than the next-latest rank
--   total_wait_ns  sum over ranks of wait_ns: the peer wait this collective cost the job
--   start_ns       when the last rank started (ns since epoch)
--
-- stragglers_by_rank (pack `stragglers-by-rank`): per rank, the peer wait it caused; ordered by wait_caused_ns.
--   times_last      collectives this rank started last
--   wait_caused_ns  the total_wait_ns of those collectives (ns)
--   worst_step      the step of the one that cost most; worst_wait_ns its total_wait_ns (ns)
--   worst_wait_ns   the total_wait_ns of the worst one (ns)
-- stragglers shows first: comm, step, seq, op, last_rank, last_by_ns, total_wait_ns
-- stragglers_by_rank shows first: rank, times_last, wait_caused_ns, worst_step, worst_wait_ns
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
       max(start_ns) FILTER (WHERE k = 1) AS start_ns
FROM r GROUP BY comm, step, seq ORDER BY step, comm, seq;

CREATE OR REPLACE TABLE stragglers_by_rank AS
SELECT last_rank AS rank, count(*) AS times_last, sum(total_wait_ns)::BIGINT AS wait_caused_ns,
       arg_max(step, total_wait_ns) AS worst_step, max(total_wait_ns) AS worst_wait_ns
FROM stragglers GROUP BY last_rank ORDER BY wait_caused_ns DESC;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM stragglers LIMIT 20;

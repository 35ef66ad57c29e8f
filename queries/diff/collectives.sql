-- @table diff_collectives: collectives by kind and message size, per matched step (the mean over
--     the pairs): how many, their transfer time and the time ranks waited in them for peers.
-- @column op                 VARCHAR  text          the collective (collectives.op)
-- @column bytes              BIGINT   figure:bytes  its message size per rank (bytes)
-- @column a_count            DOUBLE   figure:count  collectives per matched step in run a (all ranks)
-- @column b_count            DOUBLE   figure:count  collectives per matched step in run b (all ranks)
-- @column a_transfer_ns      BIGINT   figure:ns     time moving data, summed over ranks in run a (ns)
-- @column b_transfer_ns      BIGINT   figure:ns     time moving data, summed over ranks in run b (ns)
-- @column delta_transfer_ns  BIGINT   figure:ns     b_transfer_ns - a_transfer_ns (ns)
-- @column a_wait_ns          BIGINT   figure:ns     time waiting for peers, summed over ranks in run a (ns)
-- @column b_wait_ns          BIGINT   figure:ns     time waiting for peers, summed over ranks in run b (ns)
-- @column delta_wait_ns      BIGINT   figure:ns     b_wait_ns - a_wait_ns (ns)
-- @column a_exposed_ns       BIGINT   figure:ns     time in them with no compute running on the rank (exposed_comm_segments), summed over ranks in run a (ns)
-- @column b_exposed_ns       BIGINT   figure:ns     time in them with no compute running on the rank (exposed_comm_segments), summed over ranks in run b (ns)
-- @column delta_exposed_ns   BIGINT   figure:ns     b_exposed_ns - a_exposed_ns (ns)
-- Reads two runs attached as `a` and `b`, and the matched steps in `pairs` (step_a, step_b; traceflow/compare.py).
-- scope: job
-- requires: collective_waits, collectives, exposed_comm_segments, pairs
CREATE OR REPLACE TEMP TABLE diff_collectives AS
WITH xa AS (
    SELECT w.op_id, w.rank, sum(least(w.end_ns, e.end_ns) - greatest(w.start_ns, e.start_ns)) AS ns
    FROM a.collective_waits w JOIN a.tf_internal.exposed_comm_segments e
         ON e.rank = w.rank AND e.start_ns < w.end_ns AND e.end_ns > w.start_ns
    WHERE w.step IN (SELECT step_a FROM pairs) GROUP BY ALL
), xb AS (
    SELECT w.op_id, w.rank, sum(least(w.end_ns, e.end_ns) - greatest(w.start_ns, e.start_ns)) AS ns
    FROM b.collective_waits w JOIN b.tf_internal.exposed_comm_segments e
         ON e.rank = w.rank AND e.start_ns < w.end_ns AND e.end_ns > w.start_ns
    WHERE w.step IN (SELECT step_b FROM pairs) GROUP BY ALL
), wa AS (
    SELECT w.op, c.bytes, count(*) / (SELECT count(*) FROM pairs) AS n,
           sum(w.transfer_ns) / (SELECT count(*) FROM pairs) AS transfer_ns, sum(w.wait_ns) / (SELECT count(*) FROM pairs) AS wait_ns,
           coalesce(sum(x.ns), 0) / (SELECT count(*) FROM pairs) AS exposed_ns
    FROM a.collective_waits w JOIN a.collectives c USING (op_id) LEFT JOIN xa x ON x.op_id = w.op_id AND x.rank = w.rank
    WHERE w.step IN (SELECT step_a FROM pairs) GROUP BY ALL
), wb AS (
    SELECT w.op, c.bytes, count(*) / (SELECT count(*) FROM pairs) AS n,
           sum(w.transfer_ns) / (SELECT count(*) FROM pairs) AS transfer_ns, sum(w.wait_ns) / (SELECT count(*) FROM pairs) AS wait_ns,
           coalesce(sum(x.ns), 0) / (SELECT count(*) FROM pairs) AS exposed_ns
    FROM b.collective_waits w JOIN b.collectives c USING (op_id) LEFT JOIN xb x ON x.op_id = w.op_id AND x.rank = w.rank
    WHERE w.step IN (SELECT step_b FROM pairs) GROUP BY ALL
)
SELECT op, bytes, round(coalesce(wa.n, 0), 1) AS a_count, round(coalesce(wb.n, 0), 1) AS b_count,
       coalesce(wa.transfer_ns, 0)::BIGINT AS a_transfer_ns, coalesce(wb.transfer_ns, 0)::BIGINT AS b_transfer_ns,
       (coalesce(wb.transfer_ns, 0) - coalesce(wa.transfer_ns, 0))::BIGINT AS delta_transfer_ns,
       coalesce(wa.wait_ns, 0)::BIGINT AS a_wait_ns, coalesce(wb.wait_ns, 0)::BIGINT AS b_wait_ns,
       (coalesce(wb.wait_ns, 0) - coalesce(wa.wait_ns, 0))::BIGINT AS delta_wait_ns,
       coalesce(wa.exposed_ns, 0)::BIGINT AS a_exposed_ns, coalesce(wb.exposed_ns, 0)::BIGINT AS b_exposed_ns,
       (coalesce(wb.exposed_ns, 0) - coalesce(wa.exposed_ns, 0))::BIGINT AS delta_exposed_ns
FROM wa FULL JOIN wb USING (op, bytes)
ORDER BY abs(coalesce(wb.wait_ns, 0) + coalesce(wb.transfer_ns, 0) - coalesce(wa.wait_ns, 0) - coalesce(wa.transfer_ns, 0)) DESC;

-- diff collectives: collectives by kind and message size, per matched step (the mean over the
-- pairs): how many, their transfer time and the time ranks waited in them for peers.
--
-- Inputs (attached as `a` and `b`): collective_waits, collectives; `pairs` (step_a, step_b).
--
--   op, bytes              the collective and its message size per rank (bytes)
--   a_count, b_count       collectives per matched step (all ranks)
--   a_transfer_ns, b_transfer_ns, delta_transfer_ns   time moving data, summed over ranks (ns)
--   a_wait_ns, b_wait_ns, delta_wait_ns               time waiting for peers, summed over ranks (ns)
CREATE OR REPLACE TEMP TABLE diff_collectives AS
WITH wa AS (
    SELECT w.op, c.bytes, count(*) / (SELECT count(*) FROM pairs) AS n,
           sum(w.transfer_ns) / (SELECT count(*) FROM pairs) AS transfer_ns, sum(w.wait_ns) / (SELECT count(*) FROM pairs) AS wait_ns
    FROM a.collective_waits w JOIN a.collectives c USING (op_id)
    WHERE w.step IN (SELECT step_a FROM pairs) GROUP BY ALL
), wb AS (
    SELECT w.op, c.bytes, count(*) / (SELECT count(*) FROM pairs) AS n,
           sum(w.transfer_ns) / (SELECT count(*) FROM pairs) AS transfer_ns, sum(w.wait_ns) / (SELECT count(*) FROM pairs) AS wait_ns
    FROM b.collective_waits w JOIN b.collectives c USING (op_id)
    WHERE w.step IN (SELECT step_b FROM pairs) GROUP BY ALL
)
SELECT op, bytes, round(coalesce(wa.n, 0), 1) AS a_count, round(coalesce(wb.n, 0), 1) AS b_count,
       coalesce(wa.transfer_ns, 0)::BIGINT AS a_transfer_ns, coalesce(wb.transfer_ns, 0)::BIGINT AS b_transfer_ns,
       (coalesce(wb.transfer_ns, 0) - coalesce(wa.transfer_ns, 0))::BIGINT AS delta_transfer_ns,
       coalesce(wa.wait_ns, 0)::BIGINT AS a_wait_ns, coalesce(wb.wait_ns, 0)::BIGINT AS b_wait_ns,
       (coalesce(wb.wait_ns, 0) - coalesce(wa.wait_ns, 0))::BIGINT AS delta_wait_ns
FROM wa FULL JOIN wb USING (op, bytes)
ORDER BY abs(coalesce(wb.wait_ns, 0) + coalesce(wb.transfer_ns, 0) - coalesce(wa.wait_ns, 0) - coalesce(wa.transfer_ns, 0)) DESC;

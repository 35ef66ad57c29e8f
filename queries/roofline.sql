-- @table roofline: per op class and op, where its kernels ran against the GPU's roofs, and
--     the time they would save at the roof (docs/roofline.md).
--
--
-- @column rank              INTEGER  rank          the rank (peaks are per device)
-- @column op_class          VARCHAR  text          the class (op_work.op_class)
-- @column op                VARCHAR  text          the CPU op's name
-- @column ops               BIGINT   figure:count  ops of this name
-- @column gpu_ns            BIGINT   figure:ns     their kernels' summed time (ns)
-- @column time_share_pct    DOUBLE   figure:percent  gpu_ns in percent of all op work's GPU time on the rank
-- @column known_pct         DOUBLE   figure:percent  share of gpu_ns whose ops have known flops or bytes (percent)
-- @column flops             BIGINT   figure:flop   FLOPs summed over the ops with known FLOPs
-- @column bytes             BIGINT   figure:bytes  bytes summed over the ops with known bytes
-- @column median_intensity  DOUBLE   figure:ratio  median of the ops' flops / bytes (FLOP per byte)
-- @column achieved_tflops   DOUBLE   figure:tflops  summed FLOPs over the summed time of the ops with FLOPs known (TFLOP/s)
-- @column achieved_gbps     DOUBLE   figure:gbps   summed bytes over the summed time of the ops with bytes known (GB/s)
-- @column roof_ns           BIGINT   figure:ns     the time the ops would take at the roof: Σ max(flops / peak FLOP/s, bytes / peak
--     bandwidth) (ns)
-- @column headroom_ns       BIGINT   figure:ns     gpu_ns of the ops with known work minus roof_ns: what running at the roof would save (ns)
-- @column bound             VARCHAR  text          the bound most of the time went to (op_work.bound)
-- roofline shows first: rank, op_class, op, gpu_ns, time_share_pct, achieved_tflops, headroom_ns, bound
-- scope: rank
-- requires: op_work
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE roofline AS
WITH o AS (
    SELECT *, greatest(coalesce(flops / (peak_tflops * 1e3), 0), coalesce(bytes / peak_gbps, 0)) AS at_roof_ns,
           flops IS NOT NULL OR bytes IS NOT NULL AS known
    FROM op_work
)
SELECT rank, op_class, name AS op, count(*) AS ops, sum(gpu_ns)::BIGINT AS gpu_ns,
       round(100.0 * sum(gpu_ns) / sum(sum(gpu_ns)) OVER (PARTITION BY rank), 2) AS time_share_pct,
       round(100.0 * sum(gpu_ns) FILTER (WHERE known) / sum(gpu_ns), 1) AS known_pct,
       sum(flops)::BIGINT AS flops, sum(bytes)::BIGINT AS bytes,
       round(median(intensity), 2) AS median_intensity,
       round(sum(flops) / nullif(sum(gpu_ns) FILTER (WHERE flops IS NOT NULL), 0) / 1e3, 3) AS achieved_tflops,
       round(sum(bytes) / nullif(sum(gpu_ns) FILTER (WHERE bytes IS NOT NULL), 0), 2) AS achieved_gbps,
       sum(at_roof_ns) FILTER (WHERE known AND at_roof_ns > 0)::BIGINT AS roof_ns,
       CASE WHEN bool_or(known AND at_roof_ns > 0) THEN greatest(sum(gpu_ns) FILTER (WHERE known AND at_roof_ns > 0)
                                                          - sum(at_roof_ns) FILTER (WHERE known AND at_roof_ns > 0), 0) END::BIGINT
           AS headroom_ns,
       arg_max(bound, gpu_ns) AS bound
FROM o GROUP BY rank, op_class, name
ORDER BY rank, gpu_ns DESC;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM roofline LIMIT 20;

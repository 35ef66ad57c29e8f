-- @table launch_overhead: what launching each GPU op cost, and how much of it
--     the GPU sat idle for.
--
--
-- One row per launched GPU op (launch call found in the trace). Times in ns.
-- @column rank               INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column step               INTEGER  key           the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every
--     step
-- @column name               VARCHAR  text          the name of the op, kernel or call (kernels: the full demangled C++ name)
-- @column kind               VARCHAR  text          what kind of op or segment this is
-- @column stream             BIGINT   key           the CUDA stream
-- @column op_id              BIGINT   id:gpu_ops    the GPU op (gpu_ops.op_id)
-- @column api_name           VARCHAR  text          the launch call (cudaLaunchKernel, ...)
-- @column api_start_ns       BIGINT   time          when the launch call began (ns since epoch)
-- @column issue_start_ns     BIGINT   time          when the host began issuing the op: the start of the CPU op that made the launch
--     call (gpu_ops.cpu_op_id: by External id, or by nesting on the launching thread, as for
--     nsys's emit_nvtx ops); the launch call's start where unknown
-- @column api_ns             BIGINT   figure:ns     api_end - api_start: time in the launch call
-- @column queue_ns           BIGINT   figure:ns     max(0, gpu_start - api_end): waiting in the stream queue (nsys "queue time")
-- @column latency_ns         BIGINT   figure:ns     gpu_start - api_start
-- @column dispatch_ns        BIGINT   figure:ns     api_start - issue_start: framework time before the launch call; NULL where it
--     cannot be answered from the trace (see cannot_answer)
-- @column exposed_ns         BIGINT   figure:ns     part of [issue_start, gpu_start] during which the rank's GPU ran nothing at all,
--     in the idle stretch that this op ended (an earlier idle stretch inside a long
--     queueing latency was ended by another op and is charged to that one, so the
--     exposed_ns of a step's ops add up without counting any idle time twice).
--     For tiny kernels the framework dispatch is most of what issuing them costs, so it
--     counts; without a CPU op this is DESIGN.md's [api_start, gpu_start].
-- @column exposed_queued_ns  BIGINT   figure:ns     the part of exposed_ns after the launch call returned: the op was enqueued and
--     had not started while the rank's GPU ran nothing of the rank's. Microseconds are the
--     driver's launch latency; milliseconds are the device busy with work the trace does not
--     hold (other processes' kernels on a shared GPU: up to 7 ms per op on h100
--     ddp4_sync_stall, where four ranks share one H100), which no launch fix removes
-- @column gpu_ns             BIGINT   figure:ns     the op's own run time on the GPU: gpu_end - gpu_start
-- @column stall              BOOLEAN  flag          the launch call took over 50x the rank's median launch call: a one-time stall
--     inside the call (lazy loading of the kernel's module / code object at its first launch:
--     one hipLaunchKernel of 6,543 us on hta's mi250_minitoy, the others 3.7-12.7 us), not launch
--     throughput; graphs or fusion remove none of it, a warm-up or eager loading does
-- @column cannot_answer      VARCHAR  text          NULL, or why dispatch_ns is NULL: 'no CPU op contains the launch call' (none
--     recorded around it on its thread, as in nsys without NVTX ops) or 'CPU ops on a
--     clock the runtime calls do not share' (traces.cpu_clock_consistent = FALSE)
--
-- @table launch_overhead_summary: per rank and kernel name, what launching it cost.
-- @column rank                     INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column name                     VARCHAR  text          the name of the op, kernel or call (kernels: the full demangled C++ name)
-- @column count                    BIGINT   figure:count  launches
-- @column total_exposed_ns         BIGINT   figure:ns     sum of exposed_ns: GPU idle while these ops were being issued (ns)
-- @column total_exposed_queued_ns  BIGINT   figure:ns     sum of exposed_queued_ns: of that, after the launch call had returned (ns)
-- @column total_gpu_ns             BIGINT   figure:ns     the kernels' own run time (ns)
-- @column launch_bound             BOOLEAN  flag          total_exposed_ns > total_gpu_ns: the GPU idled longer waiting for these launches
--     than it ran the kernels (the report and the verdict use this same definition)
-- @column mean_api_ns              BIGINT   figure:ns     mean time in the launch call itself: the launch cost (ns)
-- @column mean_queue_ns            BIGINT   figure:ns     mean wait in the stream behind earlier work, e.g. a running NCCL kernel: not a
--     launch cost (ns)
-- @column total_latency_ns         BIGINT   figure:ns     sum of latency_ns, launch call start to kernel start: call and queue together (ns)
-- @column mean_latency_ns          BIGINT   figure:ns     mean of latency_ns (ns)
-- @column p50_latency_ns           BIGINT   figure:ns     median of latency_ns (ns)
-- @column p99_latency_ns           BIGINT   figure:ns     99th percentile of latency_ns (ns)
-- @column total_api_ns             BIGINT   figure:ns     sum of api_ns (ns)
-- launch_overhead shows first: rank, step, name, exposed_ns, gpu_ns, api_ns, queue_ns, latency_ns, dispatch_ns
-- launch_overhead_summary shows first: rank, name, count, total_exposed_ns, total_gpu_ns, launch_bound, mean_api_ns, mean_queue_ns
-- launch_overhead sorts by: exposed_ns DESC NULLS LAST, rank
-- launch_overhead_summary sorts by: rank, total_exposed_ns DESC
-- scope: rank
-- requires: gpu_islands, gpu_ops, traces
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE launch_overhead AS
WITH l AS (
    SELECT rank, step, name, kind, stream, op_id, api_name, api_start_ns, api_end_ns, start_ns AS gpu_start_ns,
           end_ns AS gpu_end_ns, coalesce(issue_start_ns, api_start_ns) AS issue_start_ns,
           CASE WHEN trace_id IN (SELECT trace_id FROM traces WHERE cpu_clock_consistent IS FALSE)
                     THEN 'CPU ops on a clock the runtime calls do not share'
                WHEN cpu_op_id IS NULL THEN 'no CPU op contains the launch call' END AS cannot_answer
    FROM gpu_ops WHERE api_start_ns IS NOT NULL AND step IS NOT NULL
), ended AS (
    -- the op that started each busy island ended the idle stretch before it
    SELECT first_op_id AS op_id, lag(end_ns) OVER (PARTITION BY rank ORDER BY start_ns) AS gap_start_ns
    FROM gpu_islands
)
SELECT l.rank, l.step, l.name, l.kind, l.stream, l.op_id, l.api_name, l.api_start_ns, l.issue_start_ns,
       l.api_end_ns - l.api_start_ns AS api_ns,
       greatest(0, l.gpu_start_ns - l.api_end_ns) AS queue_ns,
       l.gpu_start_ns - l.api_start_ns AS latency_ns,
       CASE WHEN l.cannot_answer IS NULL THEN l.api_start_ns - l.issue_start_ns END AS dispatch_ns,
       CASE WHEN e.gap_start_ns IS NULL THEN 0  -- greatest() would skip the NULL: no gap ended here
            ELSE greatest(0, l.gpu_start_ns - greatest(l.issue_start_ns, e.gap_start_ns)) END::BIGINT AS exposed_ns,
       CASE WHEN e.gap_start_ns IS NULL THEN 0
            ELSE greatest(0, l.gpu_start_ns - greatest(l.api_end_ns, l.issue_start_ns, e.gap_start_ns)) END::BIGINT AS exposed_queued_ns,
       l.gpu_end_ns - l.gpu_start_ns AS gpu_ns,
       l.api_end_ns - l.api_start_ns > 50 * median(l.api_end_ns - l.api_start_ns) OVER (PARTITION BY l.rank) AS stall,
       l.cannot_answer
FROM l LEFT JOIN ended e USING (op_id)
ORDER BY l.rank, l.api_start_ns;

CREATE OR REPLACE TABLE launch_overhead_summary AS
SELECT rank, name, count(*) AS count, sum(exposed_ns)::BIGINT AS total_exposed_ns,
       sum(exposed_queued_ns)::BIGINT AS total_exposed_queued_ns,
       sum(gpu_ns)::BIGINT AS total_gpu_ns, sum(exposed_ns) > sum(gpu_ns) AS launch_bound,
       round(avg(api_ns))::BIGINT AS mean_api_ns, round(avg(queue_ns))::BIGINT AS mean_queue_ns,
       sum(latency_ns)::BIGINT AS total_latency_ns, round(avg(latency_ns))::BIGINT AS mean_latency_ns,
       quantile_disc(latency_ns, 0.5) AS p50_latency_ns, quantile_disc(latency_ns, 0.99) AS p99_latency_ns,
       sum(api_ns)::BIGINT AS total_api_ns
FROM launch_overhead GROUP BY rank, name ORDER BY rank, total_exposed_ns DESC;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM launch_overhead LIMIT 20;

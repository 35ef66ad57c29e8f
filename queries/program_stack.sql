-- @table program_stack: what each rank's program is written in, from what its trace
--     holds. Advice fits it: no OpenACC or OpenMP offload program is told to try torch.compile.
--
--
-- The first of these that the rank's trace holds:
--   openacc  OpenACC runtime calls (acc_*) or ranges, or NVHPC's OpenACC kernel names
--            (`main_24_gpu`, `..._gpu__red`: function, line, `gpu`)
--   openmp   OpenMP target offload: LLVM's kernel names (`__omp_offloading_...`), NVHPC's
--            (`nvkernel_<function>_F<file>L<line>_<n>`: the sc23 OpenMP tutorial's `nvkernel_solve_F1L204_2`),
--            or libomptarget calls (__tgt_*)
--   jax      XLA's ranges or ops (`XlaModule`, `Thunk`, PjitFunction)
--   pytorch  a PyTorch profiler (Kineto) trace, or ATen on an nsys capture (`aten::` ranges or ops,
--            `at::native` kernels)
--   hip      HIP runtime calls (hip*) with none of the above: a HIP C++ program
--   cuda     CUDA runtime / driver calls or GPU ops with none of the above: a CUDA C/C++ program
--   unknown  nothing to tell it by
-- One row per rank:
-- @column rank      INTEGER  rank          the rank
-- @column stack     VARCHAR  text          pytorch | jax | cuda | openacc | openmp | hip | unknown
-- @column evidence  VARCHAR  text          the name that told it, the shortest of its kind (a kernel, call or range; the trace
--     format for Kineto)
-- program_stack shows first: rank, stack, evidence
-- scope: job
-- requires: gpu_ops, host_ops, ranges, traces
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';

CREATE OR REPLACE TABLE program_stack AS
WITH names AS (  -- each rank's distinct names, with where they come from
    SELECT DISTINCT rank, 'kernel' AS src, name FROM gpu_ops WHERE kind = 'kernel' AND name IS NOT NULL
    UNION SELECT DISTINCT rank, 'call', name FROM host_ops WHERE kind IN ('cuda_runtime', 'cuda_driver') AND name IS NOT NULL
    UNION SELECT DISTINCT rank, 'op', name FROM host_ops WHERE kind = 'cpu_op' AND name IS NOT NULL
    UNION SELECT DISTINCT rank, 'range', coalesce(domain || ':', '') || name FROM ranges WHERE name IS NOT NULL
), marks AS (
    SELECT rank, name,
           CASE WHEN (src IN ('call', 'op', 'range') AND regexp_matches(name, '(?i)(^|:)acc_|openacc'))
                     OR (src = 'kernel' AND regexp_matches(name, '_[0-9]+_gpu(__red)?$')) THEN 1
                WHEN (src = 'kernel' AND regexp_matches(name, '^__omp_offloading_|^nvkernel_.*_F[0-9]+L[0-9]+_[0-9]+$'))
                     OR (src IN ('call', 'op', 'range') AND regexp_matches(name, '(?i)(^|:)__tgt_|libomptarget')) THEN 2
                WHEN src IN ('op', 'range') AND regexp_matches(name, '(^|:)(XlaModule|Thunk)|PjitFunction') THEN 3
                WHEN (src IN ('op', 'range') AND regexp_matches(name, '(^|:)aten::'))
                     OR (src = 'kernel' AND contains(name, 'at::native')) THEN 4
                WHEN src = 'call' AND regexp_matches(name, '^hip') THEN 5
                WHEN src IN ('call', 'kernel') THEN 6
           END AS code
    FROM names
), best AS (
    SELECT rank, min(code) AS code, arg_min(name, (code, length(name), name)) AS evidence FROM marks WHERE code IS NOT NULL GROUP BY rank
)
SELECT t.rank,
       CASE WHEN b.code <= 3 THEN ['openacc', 'openmp', 'jax'][b.code]
            WHEN t.source_format = 'kineto-json' OR b.code = 4 THEN 'pytorch'
            WHEN b.code IS NOT NULL THEN ['hip', 'cuda'][b.code - 4] ELSE 'unknown' END AS stack,
       CASE WHEN b.code <= 3 OR b.code = 4 THEN b.evidence
            WHEN t.source_format = 'kineto-json' THEN 'a PyTorch profiler trace' ELSE b.evidence END AS evidence
FROM (SELECT rank, any_value(source_format) AS source_format FROM traces GROUP BY rank) t
LEFT JOIN best b USING (rank)
ORDER BY t.rank;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM program_stack;

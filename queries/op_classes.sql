-- @table op_classes: what kind of work each CPU op name does, decided once per name (a job has a few
--     hundred op names and millions of ops); op_flops and op_work read it.
--
--
-- @column name      VARCHAR  text          the CPU op's name (aten::mm)
-- @column op        VARCHAR  text          the name without its aten:: namespace
-- @column op_class  VARCHAR  text          matmul | attention | conv | norm | softmax | reduction | elementwise | copy | optimizer |
--     other
-- scope: rank
-- requires: host_ops
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE tf_internal.op_classes AS
SELECT name, op,
       CASE WHEN op IN ('mm', 'addmm', 'bmm', 'baddbmm', 'linear', 'matmul', 'addmv', 'mv', 'dot') THEN 'matmul'
            WHEN op LIKE '%attention%' THEN 'attention'
            -- anchored: a custom op such as fb::convex_sum is no convolution
            WHEN regexp_matches(op, '^_?(conv|cudnn_conv|miopen_conv|mkldnn_conv|slow_conv|thnn_conv|nnpack_spatial_conv)') THEN 'conv'
            WHEN op LIKE '%norm%' AND op NOT IN ('norm', 'linalg_vector_norm') THEN 'norm'
            WHEN op LIKE '%softmax%' THEN 'softmax'
            WHEN op IN ('sum', 'mean', 'amax', 'amin', 'max', 'min', 'norm', 'linalg_vector_norm', 'prod', 'argmax',
                        'argmin', 'var', 'std', 'any', 'all', 'cumsum') THEN 'reduction'
            WHEN op LIKE '\_foreach\_%' ESCAPE '\' OR op LIKE '\_fused\_%' ESCAPE '\' THEN 'optimizer'
            WHEN op IN ('copy_', '_to_copy', 'to', 'clone', 'contiguous', 'cat', 'stack', 'index_select', 'gather',
                        'scatter', 'embedding', 'index', 'fill_', 'zero_', 'zeros_like', 'ones_like') THEN 'copy'
            WHEN regexp_matches(op, '^(add|sub|mul|div|neg|abs|exp|log|pow|sqrt|rsqrt|sigmoid|tanh|relu|gelu|silu|'
                                    'threshold|where|clamp|lerp|addcmul|addcdiv|maximum|minimum|eq|ne|lt|gt|le|ge|'
                                    'masked_fill|dropout|native_dropout|bernoulli|sin|cos|reciprocal|sign|'
                                    'gelu_backward|silu_backward|threshold_backward|sigmoid_backward|tanh_backward|'
                                    'native_dropout_backward)_?$') THEN 'elementwise'
            ELSE 'other' END AS op_class
FROM (SELECT DISTINCT name, regexp_replace(name, '^aten::', '') AS op FROM host_ops WHERE kind = 'cpu_op');

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM op_classes LIMIT 20;

-- @table comm_kernels: which GPU kernels are communication. The one place that says so (docs/step-attribution.md,
--     "Communication kernels"); gpu_ops.sql gives a kernel category 'communication' when its name matches
--     a pattern here, the first by `priority`.
-- @column priority  INTEGER  key           the order patterns are tried in (lowest first)
-- @column library   VARCHAR  text          who wrote the kernel: NCCL, RCCL, DeepEP, NVSHMEM, MSCCL++, ...
-- @column pattern   VARCHAR  text          regular expression (RE2, case-insensitive) matched anywhere in the kernel name
-- @column op        VARCHAR  text          the collective the kernel does; NULL: read from the name (nccl*_AllReduce..., or a
--     word such as all_reduce / allgather / reduce_scatter / alltoall / broadcast / send / recv)
-- Not here, on purpose: kernels that only prepare communication without moving data between GPUs
-- (DeepEP's get_dispatch_layout computes the layout; MoE permute/unpermute kernels move data within a GPU).
-- scope: rank
-- requires: (nothing)
CREATE SCHEMA IF NOT EXISTS tf_internal;
CREATE OR REPLACE TABLE tf_internal.comm_kernels AS
SELECT * FROM (VALUES
    (1, 'NCCL', '^\s*(void\s+)?nccl', NULL),
    (2, 'RCCL', '^\s*(void\s+)?rccl', NULL),
    -- DeepEP (and DeepSeek's build of it, dpsk::ep): dispatch / combine / notify between experts' GPUs
    (3, 'DeepEP', '(deep_ep|dpsk::ep)::(internode|intranode|internode_ll|intranode_ll)::', 'AllToAll'),
    (4, 'NVSHMEM', 'nvshmem', NULL),
    (5, 'MSCCL++', 'mscclpp', NULL),
    (6, 'MSCCL', '^\s*(void\s+)?msccl', NULL),
    -- vLLM's, SGLang's and AMD aiter's custom all-reduce (one- and two-stage over IPC buffers)
    (7, 'custom all-reduce', 'cross_device_reduce', 'AllReduce'),
    (8, 'vLLM quick all-reduce', 'quickreduce::', 'AllReduce'),
    -- TensorRT-LLM's custom all-reduce (oneShot/twoShot, fused with norms) and its MoE all-to-all
    (9, 'TensorRT-LLM', 'tensorrt_llm::kernels::.*(all_?reduce|lamport)', 'AllReduce'),
    (10, 'TensorRT-LLM', 'tensorrt_llm::kernels::.*(all_?to_?all|moe_?a2a|moecomm)', 'AllToAll'),
    (11, 'FlashInfer', 'flashinfer::.*(all_?reduce|comm::)', 'AllReduce'),
    -- PyTorch's symmetric-memory collectives (torch.distributed._symmetric_memory)
    (12, 'PyTorch symmetric memory', 'c10d::symmetric_memory::|symm_mem', NULL)
) AS t(priority, library, pattern, op);


"""Peak throughput of the GPUs a job ran on: the roofs of the roofline and the denominator of MFU.

A device is matched by the name its trace records (Kineto `deviceProperties`, nsys
TARGET_INFO_GPU), first match wins, so the specific names come before the general ones. Figures
are the vendor's **dense** tensor-core peaks (sparsity doubles them on paper; no training kernel
gets it) and peak memory bandwidth. An unknown device gets no peaks and a warning, never a guess;
`--peak-tflops` / `--peak-gbps` set them for any device.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from . import sqlmodules


@dataclass(frozen=True)
class Peaks:
    pattern: str          # regex on the recorded device name (case-insensitive)
    device: str
    bf16: float | None    # dense TFLOP/s by dtype
    fp16: float | None
    tf32: float | None
    fp32: float | None    # non-tensor FP32 (PyTorch's default for float32 matmuls is no TF32)
    fp64: float | None
    gbps: float           # peak memory bandwidth, GB/s
    source: str


TABLE = (
    # NVIDIA H100 datasheet (nvidia.com/en-us/data-center/h100, 2023): SXM 989.4 dense BF16/FP16
    # (1,979 "with sparsity"), TF32 494.7, FP32 66.9, FP64 33.5 (67 tensor), 3.35 TB/s HBM3.
    Peaks(r"H100.*(PCIe)", "H100 PCIe", 756.0, 756.0, 378.0, 51.2, 25.6, 2000.0, "NVIDIA H100 datasheet, PCIe"),
    Peaks(r"H100.*NVL", "H100 NVL", 835.0, 835.0, 417.5, 60.0, 30.0, 3900.0, "NVIDIA H100 datasheet, NVL"),
    Peaks(r"H100", "H100 SXM", 989.4, 989.4, 494.7, 66.9, 33.5, 3350.0, "NVIDIA H100 datasheet, SXM5 (HBM3)"),
    # NVIDIA H200 datasheet (2024): same compute as H100 SXM, 4.8 TB/s HBM3e.
    Peaks(r"H200", "H200 SXM", 989.4, 989.4, 494.7, 66.9, 33.5, 4800.0, "NVIDIA H200 datasheet, SXM"),
    # NVIDIA HGX B200 (2024): 4.5 PFLOPS FP16/BF16 with sparsity -> 2.25 dense; FP32 75; 8 TB/s HBM3e.
    Peaks(r"B200", "B200", 2250.0, 2250.0, 1100.0, 75.0, 37.0, 8000.0, "NVIDIA HGX B200 datasheet, per GPU"),
    # NVIDIA A100 datasheet (2021): 312 BF16/FP16 dense, TF32 156, FP32 19.5, FP64 9.7;
    # 80GB SXM 2,039 GB/s, 80GB PCIe 1,935 GB/s, 40GB 1,555 GB/s.
    Peaks(r"A100.*80GB.*PCIe|A100.*PCIe.*80GB", "A100 80GB PCIe", 312.0, 312.0, 156.0, 19.5, 9.7, 1935.0,
          "NVIDIA A100 datasheet, 80GB PCIe"),
    Peaks(r"A100.*80GB", "A100 80GB SXM", 312.0, 312.0, 156.0, 19.5, 9.7, 2039.0, "NVIDIA A100 datasheet, 80GB SXM"),
    Peaks(r"A100", "A100 40GB", 312.0, 312.0, 156.0, 19.5, 9.7, 1555.0, "NVIDIA A100 datasheet, 40GB"),
    # NVIDIA V100 datasheet (2017, SXM2): 125 FP16 tensor, FP32 15.7, FP64 7.8, 900 GB/s; no BF16.
    Peaks(r"V100", "V100 SXM2", None, 125.0, None, 15.7, 7.8, 900.0, "NVIDIA V100 datasheet, SXM2"),
    # NVIDIA L40S datasheet (2023): 362.05 BF16/FP16 dense (733 sparse), TF32 183, FP32 91.6, 864 GB/s.
    Peaks(r"L40S", "L40S", 362.05, 362.05, 183.0, 91.6, None, 864.0, "NVIDIA L40S datasheet"),
    # NVIDIA L4 datasheet (2023): 121 BF16/FP16 dense (242 sparse), TF32 60, FP32 30.3, 300 GB/s.
    Peaks(r"\bL4\b", "L4", 121.0, 121.0, 60.0, 30.3, None, 300.0, "NVIDIA L4 datasheet"),
    # AMD Instinct MI300X datasheet (2023): 1,307.4 BF16/FP16 dense, TF32 653.7, FP32 163.4, 5.3 TB/s.
    Peaks(r"MI300X", "MI300X", 1307.4, 1307.4, 653.7, 163.4, 81.7, 5300.0, "AMD Instinct MI300X datasheet"),
    # AMD Instinct MI250X datasheet (2021): 383 BF16/FP16, FP32 47.9 (vector; 95.7 matrix), 3.2 TB/s.
    Peaks(r"MI250X", "MI250X", 383.0, 383.0, None, 47.9, 47.9, 3276.8, "AMD Instinct MI250X datasheet"),
)


def lookup(device_name: str | None) -> Peaks | None:
    if not device_name:
        return None
    for p in TABLE:
        if re.search(p.pattern, device_name, re.I):
            return p
    return None


DECLARED = sqlmodules.declared("""
-- @table device_peaks: per rank: the GPU's peak throughput that the roofline and MFU use (traceflow/hardware.py)
-- @column rank INTEGER rank the rank
-- @column device_name VARCHAR text the name the trace records
-- @column device VARCHAR text the entry of traceflow's table it matched (NULL: unknown)
-- @column bf16_tflops DOUBLE figure:tflops dense BF16 tensor peak (TFLOP/s)
-- @column fp16_tflops DOUBLE figure:tflops dense FP16 tensor peak (TFLOP/s)
-- @column tf32_tflops DOUBLE figure:tflops dense TF32 tensor peak (TFLOP/s)
-- @column fp32_tflops DOUBLE figure:tflops FP32 peak without tensor cores (TFLOP/s)
-- @column fp64_tflops DOUBLE figure:tflops FP64 peak (TFLOP/s)
-- @column gbps DOUBLE figure:gbps peak memory bandwidth (GB/s)
-- @column source VARCHAR text where the figures come from: a datasheet, or --peak-tflops / --peak-gbps
-- @column any_tflops DOUBLE figure:tflops the peak for ops whose dtype the trace does not record (nsys
--     emit_nvtx ranges): known only when one figure holds for every dtype (--peak-tflops), else NULL
-- @table gpu_devices: per rank and GPU it ran work on: the physical device where the trace identifies it (traceflow/hardware.py)
-- @column rank INTEGER rank the rank
-- @column device INTEGER key the device index the rank's GPU ops ran on (gpu_ops.device)
-- @column gpu_uuid VARCHAR key the GPU's UUID (nsys TARGET_INFO_GPU.uuid); NULL where the trace does not
--     record it (Kineto) or the source file is gone
-- @column bus_id VARCHAR key the GPU's PCI bus id (nsys TARGET_INFO_GPU.busLocation), NULL where not recorded
-- @column hostname VARCHAR text the host the rank ran on, as the trace records it (NULL: not recorded)
-- @column pid BIGINT key the rank's process id
-- @column source_format VARCHAR text 'nsys-sqlite' | 'kineto-json' | 'xla-json' | 'autograd-json' | 'perfetto'
""", __file__)


def load_peaks(con, peak_tflops: float | None = None, peak_gbps: float | None = None) -> list[str]:
    """Fill device_peaks from traces.device_name; returns warnings for devices with no known peaks."""
    con.execute(sqlmodules.create_table("device_peaks", DECLARED["device_peaks"]))
    warnings, rows = [], []
    for rank, name in con.execute("SELECT rank, device_name FROM traces ORDER BY rank").fetchall():
        p = lookup(name)
        tf: list[float | None] = [p.bf16, p.fp16, p.tf32, p.fp32, p.fp64] if p else [None] * 5
        if peak_tflops is not None:
            tf = [peak_tflops] * 5  # one figure for every dtype: the user knows their device
        gbps = peak_gbps if peak_gbps is not None else (p.gbps if p else None)
        overridden = [w for w, v in (("--peak-tflops", peak_tflops), ("--peak-gbps", peak_gbps)) if v is not None]
        source = " + ".join(([p.source] if p and len(overridden) < 2 else []) + overridden) or None
        if p is None and len(overridden) < 2:
            warnings.append(f"rank {rank}: no peak figures for device {name or '(not recorded)'}: roofline and MFU "
                            "are left empty; --peak-tflops and --peak-gbps set them")
        rows.append((rank, name, p.device if p else None, *tf, gbps, source, peak_tflops))
    if rows:
        con.executemany("INSERT INTO device_peaks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    from . import comments
    comments.comment_declared(con, DECLARED, ["device_peaks"])
    load_devices(con)
    return _one_warning_per_device(warnings)


def _one_warning_per_device(warnings: list[str]) -> list[str]:
    if len(warnings) <= 2:
        return warnings
    return [warnings[0] + f" (and {len(warnings) - 1} more ranks)"]


# Which physical GPU each rank ran on, where the trace says so: Nsight Systems records each
# device's UUID and PCI bus id (TARGET_INFO_GPU); Kineto records neither (its deviceProperties
# hold a name, memory and SM counts only), so there the host and the device index are all there is.
# Ranks on one GPU time-slice it: each rank's MFU counts the whole device's peak for itself, and
# its "idle" and "exposed communication" include time the device spent on the other ranks' kernels
# (queries/findings.sql says so in the verdict).
def _nsys_gpus(path: str) -> dict[int, tuple[str | None, str | None]]:
    """{device id: (uuid, bus id)} from an Nsight Systems export; {} when the file or table is absent."""
    import os
    import sqlite3
    if not path or not os.path.isfile(path):
        return {}
    try:
        from urllib.parse import quote
        # read-only and immutable, as the reader opens it: no -wal / -shm beside a WAL-mode export
        con = sqlite3.connect("file:" + quote(os.fsencode(os.path.abspath(path))) + "?mode=ro&immutable=1", uri=True)
        try:
            rows = con.execute("SELECT id, uuid, busLocation FROM TARGET_INFO_GPU").fetchall()
        finally:
            con.close()
    except sqlite3.Error:  # an export without the table (older nsys, a cut file): not recorded
        return {}
    return {int(i): (u or None, b or None) for i, u, b in rows if i is not None}


def load_devices(con) -> None:
    """Fill gpu_devices: one row per rank and device index its GPU ops used."""
    con.execute(sqlmodules.create_table("gpu_devices", DECLARED["gpu_devices"]))
    used = con.execute("""SELECT t.rank, g.device, t.source_path, t.source_format, t.hostname, t.pid
                          FROM traces t JOIN (SELECT DISTINCT rank, device FROM gpu_ops WHERE device IS NOT NULL) g
                          USING (rank) ORDER BY t.rank, g.device""").fetchall()
    cache: dict[str, dict] = {}
    rows = []
    for rank, device, path, fmt, host, pid in used:
        ids = cache.setdefault(path, _nsys_gpus(path)) if fmt == "nsys-sqlite" else {}
        uuid, bus = ids.get(device, (None, None))
        rows.append((rank, device, uuid, bus, host, pid, fmt))
    if rows:
        con.executemany("INSERT INTO gpu_devices VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    from . import comments
    comments.comment_declared(con, DECLARED, ["gpu_devices"])

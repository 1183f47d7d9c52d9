"""The devices a forecast can be made for: published figures of a few GPUs, and this machine's CPU.

``--forecast-for NAME`` picks a row of :data:`DEVICES`; without it the forecast is for this machine, whose
CPU peak is worked out from /proc/cpuinfo (cores × clock × FLOP per cycle) and whose rates are measured
(:mod:`.calibrate`), each measurement checked against that peak.

Figures are dense (no 2:4 sparsity) and per GPU, from the vendors' datasheets (comments give each source).
``fp32_tflops`` is the non-tensor-core float32 rate: a float32 vLLM engine runs torch's default float32
matmuls, which do not use TF32 (``torch.backends.cuda.matmul.allow_tf32`` is False by default).
``svd_tflops`` is the effective rate of the decomposition's SVDs (thin SVD of W0, singular values of W1)
in float32: no vendor publishes it, and no GPU has been measured by this project yet, so every GPU row's
value is a **guess** (``svd_basis`` says so): 1 % of the float32 peak, the order that cuSOLVER's QR-based
gesvd reaches on tall matrices of a few thousand columns (its bidiagonalisation is half matrix-vector
products, bandwidth-bound). A calibration taken on that GPU (a dry run on one of its nodes) replaces it:
:func:`measured_svd` reads it from the calibration cache.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Optional

# vLLM efficiencies (fractions of the datasheet peak):
# MBU: a decode step streams every weight and the running sequences' KV cache once. On a GPU, the rate today's
#   vLLM reaches at one running request (host scheduling overlapped with the GPU since vLLM 0.6): Llama-3.1-8B in
#   fp16 on an H100 SXM, vLLM 0.21, median TPOT 6.48 ms at concurrency 1 (InferenceBench's concurrency-sweep
#   recipe, the fitted row of :mod:`.published`): 16.06e9 B / 3.35e12 B/s / 6.48e-3 s = 0.74. An older fit (0.55,
#   vLLM 0.5.4) folded that release's unoverlapped host time into the bandwidth: :data:`.published.HOST_BUSY`
#   models it apart. On a CPU, of the measured copy rate: 0.55 (not measured against vLLM there).
MBU = 0.74
CPU_MBU = 0.55
# MFU: compute-bound decode at large batch. A guess (dense GEMMs in vLLM reach 50-70 % of peak; attention,
#   sampling and the scheduler take the rest); docs/forecast.md compares the model with published throughput.
MFU = 0.5
SVD_FRACTION_GUESS = 0.01  # of the float32 peak, for a GPU's SVDs (see the module docstring)


@dataclass(frozen=True)
class Device:
    """One device's published figures (per GPU; a CPU's are this machine's, worked out or measured)."""

    name: str
    kind: str  # 'gpu' | 'cpu'
    bf16_tflops: float  # dense bf16/fp16 tensor-core rate
    fp32_tflops: float  # dense float32 rate (non-tensor-core on a GPU)
    bandwidth_gbs: float  # memory bandwidth, GB/s (1e9 B/s)
    memory_gib: float  # device memory
    svd_tflops: float  # effective rate of the decomposition's SVD work in float32
    svd_basis: str  # 'guess: ...' | 'measured ...'
    source: str  # where the figures come from
    host_tflops: float = 1.0  # the node's CPU (variants are composed there during an evaluation): a guess
    mbu: float = MBU  # fraction of bandwidth_gbs a vLLM decode step streams at

    def flops(self, dtype: str) -> float:
        """FLOP/s of dense products in ``dtype`` ('float32', 'bfloat16', 'float16', 'auto')."""
        return (self.fp32_tflops if dtype == "float32" else self.bf16_tflops) * 1e12

    def describe(self) -> str:
        return (
            f"{self.name}: {self.bf16_tflops:g} TFLOP/s bf16, {self.fp32_tflops:g} TFLOP/s float32, "
            f"{self.bandwidth_gbs:g} GB/s, {self.memory_gib:g} GiB; SVD {self.svd_tflops * 1e3:.3g} GFLOP/s "
            f"({self.svd_basis}) [{self.source}]"
        )


def _gpu(name, bf16, fp32, bw, mem, source) -> Device:
    return Device(
        name,
        "gpu",
        bf16,
        fp32,
        bw,
        mem,
        fp32 * SVD_FRACTION_GUESS,
        f"guess: {SVD_FRACTION_GUESS:.0%} of the float32 peak, not measured",
        source,
    )


DEVICES: dict[str, Device] = {
    d.name: d
    for d in (
        # NVIDIA A100 Tensor Core GPU datasheet (2021), SXM column: BF16 312 TFLOPS dense, FP32 19.5 TFLOPS,
        # HBM2e 2,039 GB/s, 80 GB
        _gpu("a100-80g", 312.0, 19.5, 2039.0, 80.0, "NVIDIA A100 datasheet, SXM 80GB"),
        # same datasheet, 40 GB SXM: 1,555 GB/s
        _gpu("a100-40g", 312.0, 19.5, 1555.0, 40.0, "NVIDIA A100 datasheet, SXM 40GB"),
        # NVIDIA H100 Tensor Core GPU datasheet, SXM column: BF16 1,979 TFLOPS with sparsity (989.5 dense),
        # FP32 67 TFLOPS, HBM3 3.35 TB/s, 80 GB
        _gpu("h100-80g", 989.5, 67.0, 3350.0, 80.0, "NVIDIA H100 datasheet, SXM 80GB"),
        # same datasheet, PCIe column: BF16 1,513 sparse (756.5 dense), FP32 51 TFLOPS, 2 TB/s, 80 GB
        _gpu("h100-pcie", 756.5, 51.0, 2000.0, 80.0, "NVIDIA H100 datasheet, PCIe 80GB"),
        # NVIDIA H200 Tensor Core GPU datasheet, SXM column: compute as H100 SXM, HBM3e 4.8 TB/s, 141 GB
        _gpu("h200", 989.5, 67.0, 4800.0, 141.0, "NVIDIA H200 datasheet, SXM 141GB"),
        # NVIDIA L40S datasheet: BF16 733 TFLOPS with sparsity (366 dense), FP32 91.6 TFLOPS, 864 GB/s, 48 GB
        _gpu("l40s", 366.0, 91.6, 864.0, 48.0, "NVIDIA L40S datasheet"),
    )
}

# FLOP per cycle per core in float32 with fused multiply-add: AVX-512 (two 512-bit FMA units: 2 × 16 × 2),
# AVX2 (two 256-bit FMA units), SSE only. An upper bound: some AVX-512 cores have one unit or run 256 bits wide.
_FLOP_PER_CYCLE = (("avx512f", 64), ("avx2", 32), ("sse2", 8))
CPU_GEMM_EFFICIENCY = 0.5  # a float32 GEMM on a quiet CPU reaches about half its nominal peak (MKL/oneDNN)
# the decomposition's work (SVDs and products, :func:`.work.decompose_flops`) in LAPACK on a quiet CPU: measured
# 184.5 GFLOP/s at 4352×1280 on this project's 2-core machine (docs/forecast.md), nominal peak 333 (0.55);
# smaller matrices reach less, so a quarter
CPU_DECOMPOSE_EFFICIENCY = 0.25
CPU_BANDWIDTH_GBS = 10.0  # per core, when not measured: a guess (DDR4/5 servers give 5-20 GB/s per core)


def cpu_cores() -> int:
    """The cores this process may run on (the affinity mask, as torch's default thread count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_peak_flops(cpuinfo: Optional[str] = None, cores: Optional[int] = None) -> tuple[float, str]:
    """(nominal float32 peak of this CPU in FLOP/s, how it was worked out) = cores × clock × FLOP per cycle."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            cpuinfo = ""
    cores = cores or cpu_cores()
    mhz = [float(line.split(":")[1]) for line in cpuinfo.splitlines() if line.startswith("cpu MHz") and ":" in line]
    ghz = max(mhz) / 1e3 if mhz else 2.5  # no clock listed: a typical server base clock (a guess)
    flags = next((line.split(":")[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    per_cycle = next((n for flag, n in _FLOP_PER_CYCLE if flag in flags), 16)
    return cores * ghz * 1e9 * per_cycle, f"{cores} core(s) × {ghz:.2f} GHz × {per_cycle} FLOP/cycle"


def local_cpu(cores: Optional[int] = None, cpuinfo: Optional[str] = None) -> Device:
    """This machine's CPU as a device row: its nominal peak (not a measurement)."""
    peak, how = cpu_peak_flops(cpuinfo, cores)
    cores = cores or cpu_cores()
    return Device(
        "cpu",
        "cpu",
        peak / 1e12,
        peak / 1e12,
        CPU_BANDWIDTH_GBS * cores,
        0.0,
        peak * CPU_DECOMPOSE_EFFICIENCY / 1e12,
        f"{CPU_DECOMPOSE_EFFICIENCY:.0%} of the nominal peak",
        f"this machine, nominal peak {how}",
        host_tflops=peak * CPU_GEMM_EFFICIENCY / 1e12,
        mbu=CPU_MBU,
    )


def names() -> list[str]:
    return ["cpu", *DEVICES]


def resolve(name: str) -> Device:
    """A device by name ('cpu': this machine's CPU); a ValueError naming the choices for anything else."""
    key = name.strip().lower()
    if key == "cpu":
        return local_cpu()
    if key not in DEVICES:
        raise ValueError(f"unknown device {name!r} for --forecast-for; choose one of {', '.join(names())}")
    return DEVICES[key]


def with_measured_svd(device: Device, gflops: Optional[float], where: str) -> Device:
    """``device`` with its SVD rate replaced by a measurement (from a calibration on that device)."""
    if not gflops:
        return device
    return replace(device, svd_tflops=gflops / 1e3, svd_basis=f"measured {where}")


def measured_svd(device: Device, cache: dict) -> Optional[tuple[float, str]]:
    """A decomposition rate calibrated on this kind of GPU, from the calibration cache's entries (their device
    names say 'cuda (NVIDIA H100 80GB HBM3)'): (GFLOP/s, the entry's key), or None."""
    tag = {
        "a100-80g": "A100",
        "a100-40g": "A100",
        "h100-80g": "H100",
        "h100-pcie": "H100",
        "h200": "H200",
        "l40s": "L40S",
    }.get(device.name)
    if tag is None:
        return None
    best = None
    for key, entry in cache.items():
        if isinstance(entry, dict) and f"cuda (NVIDIA {tag}" in str(entry.get("device", "")):
            rate = float(entry.get("decompose_flops_s") or 0.0) / 1e9
            if rate and (best is None or rate > best[0]):
                best = (rate, key)
    return best

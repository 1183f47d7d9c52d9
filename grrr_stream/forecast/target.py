"""The forecast's rates for a device: this machine's (measured, :mod:`.calibrate`) or a table row's
(``--forecast-for``, :mod:`.devices`), and the seconds of a decomposition and of an evaluation on it."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional, Sequence

from ..dtypes import ITEMSIZE
from . import work
from .calibrate import Rates, read_cache
from .devices import MFU, Device, local_cpu, measured_svd, resolve, with_measured_svd
from .generation import Generation, generation

HOST_NULL_CELLS_S = 2e8  # a GPU node's CPU, channel-stats' null cells per second: a guess (2-core here: ~1e8)


def rates_for(name: str, cache: Optional[dict] = None) -> Rates:
    """Rates of table device ``name`` from its published figures (SVD: a calibration on that GPU from the cache
    when there is one, else the table's guess). 'cpu' is not a table row: calibrate this machine instead."""
    device = resolve(name)
    found = measured_svd(device, read_cache() if cache is None else cache)
    if found:
        device = with_measured_svd(device, found[0], f"(calibration cache: {found[1]})")
    host = device.host_tflops * 1e12
    notes = (
        f"SVD {device.svd_tflops * 1e3:.3g} GFLOP/s ({device.svd_basis})",
        f"products at {MFU:.0%} of the float32 peak; variants composed and channel passes on the node's CPU, "
        f"assumed {device.host_tflops:g} TFLOP/s (a guess)",
    )
    return Rates(
        f"{device.name} (published figures: {device.source})",
        (0, 0),
        device.svd_tflops * 1e12,
        device.fp32_tflops * 1e12 * MFU,
        0.0,
        forward_flops_s=host,
        null_cells_s=HOST_NULL_CELLS_S,
        notes=notes,
        svd_flops_s=device.svd_tflops * 1e12,
        target=device.name,
    )


def device_of(rates: Rates) -> Device:
    """The device a generation runs on: the table row of a target, or this CPU with its measured rates (the
    product rate as its compute, so that MFU × it is the measured rate; the measured copy rate as bandwidth)."""
    if rates.target is not None:
        return resolve(rates.target)
    cpu = local_cpu(cores=rates.cores)
    tflops = rates.gemm_flops_s / MFU / 1e12
    return replace(cpu, bf16_tflops=tflops, fp32_tflops=tflops, bandwidth_gbs=rates.bandwidth_gbs or cpu.bandwidth_gbs)


def on_gpu(rates: Rates) -> bool:
    return rates.target is not None and resolve(rates.target).kind == "gpu"


def decompose_seconds(shapes: Sequence[Sequence[int]], rates: Rates, *, frame_cached: bool = False) -> float:
    """The flops of :func:`.work.decompose_flops` at the decomposition rate; on a target device, its SVDs at
    the SVD rate and its products at the product rate."""
    if rates.svd_flops_s is None:
        return sum(work.decompose_flops(s, frame_cached=frame_cached) for s in shapes) / rates.decompose_flops_s
    svd = prod = 0.0
    for s in shapes:
        a, b = work.decompose_split(s, frame_cached=frame_cached)
        svd, prod = svd + a, prod + b
    return svd / rates.svd_flops_s + prod / rates.gemm_flops_s


def decompose_gpu_bytes(shapes: Sequence[Sequence[int]], itemsize: int) -> int:
    """GPU memory of a decomposition: six m×n buffers of the largest matrix (as :func:`.work.decompose_ram`'s
    one lane)."""
    return 6 * max((int(m) * int(n) for m, n in shapes), default=0) * itemsize


def evaluate_parts(
    *,
    params: int,
    kv_elems: Optional[int],
    attn_elems: Optional[int],
    shapes: Sequence[Sequence[int]],
    variants: int,
    sequences: int,
    max_tokens: int,
    engine,
    rates: Rates,
    dtype: Optional[str] = None,
) -> tuple[Generation, float]:
    """(one variant's generation, seconds of composing all variants on the CPU) of an evaluation. ``engine``:
    the config's EngineSettings (dtype, max_num_seqs if it has one, gpu_memory_utilization, cpu_kv_cache_gib);
    ``dtype``: the engine's dtype when the caller resolved it (engine.dtype 'auto'), else engine.dtype."""
    dtype = dtype or (engine.dtype if engine.dtype != "auto" else "bfloat16")
    device = device_of(rates)
    tp = int(getattr(engine, "tensor_parallel_size", 1) or 1)
    if tp > 1 and device.kind == "gpu":  # tensor parallel: the GPUs' rates and memory add up (ideally)
        device = replace(
            device,
            bf16_tflops=device.bf16_tflops * tp,
            fp32_tflops=device.fp32_tflops * tp,
            bandwidth_gbs=device.bandwidth_gbs * tp,
            memory_gib=device.memory_gib * tp,
        )
    gen = generation(
        params=params,
        kv_elems=kv_elems,
        sequences=sequences,
        max_tokens=max_tokens,
        device=device,
        dtype=dtype,
        itemsize=ITEMSIZE.get(dtype, 2),
        max_num_seqs=getattr(engine, "max_num_seqs", None),
        gpu_memory_utilization=getattr(engine, "gpu_memory_utilization", 0.9),
        cpu_kv_cache_gib=getattr(engine, "cpu_kv_cache_gib", 1.0),
        attn_flops_token=4.0 * attn_elems if attn_elems else 0.0,
    )
    host = rates.forward_flops_s if rates.target is not None else rates.gemm_flops_s
    build = variants * sum(work.variant_flops(s) for s in shapes) / host
    return gen, build

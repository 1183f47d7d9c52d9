"""Rates of this machine for the work model: one decomposition and one matrix product, timed, cached.

The decomposition rate is :func:`.work.decompose_flops` of a shape over the seconds that work (thin SVD,
singular values, projection and null residual, in torch as the kernel does it) takes on a random pair of
that shape, measured at the sweep's largest matrix shape when its decomposition fits in the budget (a few
seconds), else at the largest halved copy of it that does (same aspect ratio; see :func:`calibrate`): the
result says which. The product rate is that of a float32 GEMM_SIDE-square product. On the GPU when torch
sees one.

Two rates for the residual-channel units, always on the CPU (the calibration forward pass of ``grrr-stream
channels`` runs there, GPU or not): ``forward_flops_s``, a float32 product of 256 token rows (one default
calibration sequence) by the sweep's largest matrix (halved while one product exceeds 2 GFLOP), as a decoder
layer's linear maps do (not at the ladder's shape: a small product runs far below the rate); and
``null_cells_s``, channel × draw × group cells per second of the count-matched null of
:mod:`grrr_stream.channels.enrichment` (one block of draws at 1024 channels and 10 groups).

Surviving a busy machine (a small product timed once under load can run a thousand times below the rate,
and every forecast made from it with it): the product rate is timed on a compute-bound 1024×1024×1024 product,
the best of GEMM_REPEATS; the load average is read against the cores first (:func:`load_state`); and each
rate is checked against what the device's figures lead one to expect (:func:`expected_rates`: the CPU's
nominal peak from :mod:`.devices`, or a GPU's datasheet row) — a rate off by more than REFUSE_FACTOR either
way is refused and the expected figure used, and on a loaded machine a rate below the expected one is raised
to it (other work slowed the measurement, not the device). ``Rates.notes`` says what was refused and why.

Cached in ``GRRR_STREAM_CACHE`` (default ``~/.cache/grrr_stream``)/calibration.json by device, torch
version, threads and shape: a second forecast measures nothing.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from . import devices as d
from . import work
from .devices import cpu_cores

METHOD = 8  # bumped when what is timed changes: older cached rates are not reused
BUDGET_S = 8.0  # a calibration takes about this long at most (a few seconds more on a slow first call)


@dataclass(frozen=True)
class Rates:
    device: str  # e.g. 'cpu (2 threads)', 'cuda (NVIDIA H200)'
    shape: tuple[int, int]  # where the rates were measured
    decompose_flops_s: float
    gemm_flops_s: float
    measured_s: float  # wall seconds the measurement took
    forward_flops_s: Optional[float] = None  # CPU: 256 token rows × a matrix (channels' forward passes)
    null_cells_s: Optional[float] = None  # CPU: channel-stats' null, cells (channel × draw × group) per second
    cached: bool = False
    load: Optional[float] = None  # 1-minute load average when measured
    cores: Optional[int] = None
    notes: tuple = ()  # refusals and corrections, in words
    bandwidth_gbs: Optional[float] = None  # memory copy rate (read + write), GB/s
    svd_flops_s: Optional[float] = None  # set for a target device: its SVD rate, apart from its products
    target: Optional[str] = None  # a --forecast-for device name (None: this machine, measured)

    def describe(self) -> str:
        if self.target is not None:
            return self.device + "".join(f"; {n}" for n in self.notes)
        m, n = self.shape
        how = "cached" if self.cached else f"measured now in {self.measured_s:.1f} s"
        cpu = (
            f"; CPU forward products (256 tokens) {self.forward_flops_s / 1e9:.1f} GFLOP/s"
            if self.forward_flops_s
            else ""
        )
        load = f"; load {self.load:.1f} on {self.cores} core(s)" if self.load is not None else ""
        return (
            f"{self.device}: decomposition {self.decompose_flops_s / 1e9:.1f} GFLOP/s, products "
            f"{self.gemm_flops_s / 1e9:.1f} GFLOP/s{cpu}, at {m}×{n} ({how}{load})"
            + "".join(f"; {x}" for x in self.notes)
        )


def cache_file() -> Path:
    root = os.environ.get("GRRR_STREAM_CACHE") or Path.home() / ".cache" / "grrr_stream"
    return Path(root) / "calibration.json"


def device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return f"cuda ({torch.cuda.get_device_name(0)})"
    return f"cpu ({torch.get_num_threads()} threads)"


def _key(device: str, shape: tuple[int, int]) -> str:
    import torch

    return f"v{METHOD}|{device}|torch {torch.__version__}|{shape[0]}x{shape[1]}"


def _time_decompose(shape: tuple[int, int]) -> float:
    """Seconds of exactly the work :func:`.work.decompose_flops` counts, on a random tall pair: W0's thin SVD,
    W1's singular values, P = Uᵀ ΔW V and ΔW − U P Vᵀ (the kernel's extras, such as the Lanczos ‖ΔW‖₂, are not
    timed: on random matrices their iteration counts say nothing about real updates)."""
    import torch

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    m, n = max(shape), min(shape)
    g = torch.Generator(device="cpu").manual_seed(0)
    W0 = torch.randn(m, n, generator=g).to(dev)
    W1 = W0 + 1e-3 * torch.randn(m, n, generator=g).to(dev)
    _sync(dev)
    t = time.perf_counter()
    U, _, Vh = torch.linalg.svd(W0, full_matrices=False)
    torch.linalg.svdvals(W1)
    D = W1 - W0
    P = U.mT @ D @ Vh.mT
    D -= (U @ P) @ Vh
    _sync(dev)
    return time.perf_counter() - t


GEMM_SIDE = 1024  # the timed product: 1024×1024 by 1024×1024, 2.1 GFLOP (compute-bound on any CPU)
GEMM_REPEATS = 5  # the best of these: a shared core stalls some of them
REFUSE_FACTOR = 10.0  # a measured rate further than this from the device's figure is refused


def _time_gemm(shape: tuple[int, int]) -> float:
    import torch

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    m, n = shape
    A, B = torch.randn(m, n, device=dev), torch.randn(n, n, device=dev)
    A @ B  # warm-up
    _sync(dev)
    t = time.perf_counter()
    A @ B
    _sync(dev)
    return time.perf_counter() - t


FORWARD_TOKENS = 256  # rows of the forward product: one calibration sequence of the default length
FORWARD_MAX_FLOPS = 2e9  # one timed forward product at most (about a second on a slow CPU)


def forward_shape(largest: Sequence[int]) -> tuple[int, int]:
    """``largest`` halved (both sides) until one 256-row product is at most FORWARD_MAX_FLOPS."""
    m, n = int(largest[0]), int(largest[1])
    while 2.0 * FORWARD_TOKENS * m * n > FORWARD_MAX_FLOPS and min(m, n) >= 128:
        m, n = m // 2, n // 2
    return m, n


def _time_forward(shape: tuple[int, int]) -> float:
    """Seconds of a float32 (256 × n) by (n × m) product on the CPU (``shape`` = (m, n), as torch's Linear)."""
    import torch

    m, n = shape
    x, W = torch.randn(FORWARD_TOKENS, n), torch.randn(m, n)
    torch.nn.functional.linear(x, W)  # warm-up
    t = time.perf_counter()
    torch.nn.functional.linear(x, W)
    return time.perf_counter() - t


NULL_PROBE = (256, 1024, 10)  # draws, channels, groups of the timed null block


def _time_null() -> float:
    """Seconds of one block of :func:`grrr_stream.channels.enrichment.null_shares` (3 components)."""
    import numpy as np

    from ..channels.enrichment import null_shares

    draws, H, G = NULL_PROBE
    energies = np.random.default_rng(0).random((G, H, 3))
    t = time.perf_counter()
    null_shares(energies, H // 20, draws, np.random.default_rng(1))
    return time.perf_counter() - t


def _time_copy() -> tuple[float, int]:
    """(seconds, bytes moved) of copying a 64 MiB float32 array (read + write): the memory bandwidth."""
    import numpy as np

    a = np.ones(16 * 2**20, dtype=np.float32)
    b = np.empty_like(a)
    np.copyto(b, a)  # pages touched
    t = time.perf_counter()
    np.copyto(b, a)
    return time.perf_counter() - t, 2 * a.nbytes


def load_state(loadavg: Optional[Callable[[], tuple]] = None, cores: Optional[int] = None) -> tuple[float, int, bool]:
    """(1-minute load average, cores, loaded): loaded when other work keeps more than half the cores busy
    (the load average counts runnable threads; a calibration needs all the cores it times)."""
    try:
        load = float((loadavg or os.getloadavg)()[0])
    except (OSError, AttributeError):
        load = 0.0
    cores = cores or cpu_cores()
    return load, cores, load > 0.5 * cores


def expected_rates(device: str) -> Optional[dict[str, float]]:
    """What a device's figures lead one to expect of each rate (FLOP/s), or None for a device not in the
    table (nothing is then refused): on a CPU, its nominal peak × the efficiencies of :mod:`.devices`; on a
    GPU of the table, its float32 rate × MFU for products and its SVD rate for decompositions."""
    if device.startswith("cpu"):
        cpu = d.local_cpu()
        peak = cpu.fp32_tflops * 1e12
        return {
            "gemm": peak * d.CPU_GEMM_EFFICIENCY,
            "forward": peak * d.CPU_GEMM_EFFICIENCY,
            "decompose": peak * d.CPU_DECOMPOSE_EFFICIENCY,
            "bandwidth": cpu.bandwidth_gbs * 1e9,
        }
    for row in d.DEVICES.values():
        tag = row.source.split(",")[0].replace("NVIDIA ", "").replace(" datasheet", "")
        if device.startswith("cuda") and tag in device:
            return {"gemm": row.fp32_tflops * 1e12 * d.MFU, "decompose": row.svd_tflops * 1e12}
    return None


def check_rate(
    what: str, measured: float, expected: Optional[float], loaded: bool, unit: str = "GFLOP/s"
) -> tuple[float, Optional[str]]:
    """(the rate to use, a note when it is not the measured one). Refused: off by more than REFUSE_FACTOR
    from ``expected`` either way; raised to ``expected`` when the machine is loaded and it is below."""
    if not expected:
        return measured, None
    ratio = measured / expected
    if ratio < 1.0 / REFUSE_FACTOR or ratio > REFUSE_FACTOR:
        return expected, (
            f"{what} rate {measured / 1e9:.3g} {unit} refused: {ratio:.3g}× the "
            f"{expected / 1e9:.3g} {unit} the device's figures give (off by more than "
            f"{REFUSE_FACTOR:g}×{', the machine is loaded' if loaded else ''}); that figure used"
        )
    if loaded and measured < expected:
        return expected, (
            f"{what} rate {measured / 1e9:.3g} {unit} measured under load: the device's "
            f"{expected / 1e9:.3g} {unit} used"
        )
    return measured, None


def _sync(dev) -> None:
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize()


def ladder(largest: Sequence[int], smallest_side: int = 256) -> list[tuple[int, int]]:
    """``largest`` halved (both sides) until its shorter side is near ``smallest_side``: small to large."""
    m, n = int(largest[0]), int(largest[1])
    out = [(m, n)]
    while min(out[-1]) // 2 >= smallest_side:
        out.append((out[-1][0] // 2, out[-1][1] // 2))
    return out[::-1]


def _climb_ladder(
    largest: Sequence[int], time_decompose: Callable, t0: float, budget_s: float
) -> tuple[tuple[int, int], float]:
    """(shape, rate) of the best decomposition rate up :func:`ladder`, while the next step fits the budget."""
    steps = ladder(largest)
    time_decompose(steps[0])  # first call: kernels loaded, threads started
    shape, dec = steps[0], 0.0
    for step in steps:
        if dec and time.perf_counter() - t0 + work.decompose_flops(step) / dec > budget_s:
            break
        seconds = time_decompose(step)
        if seconds < 1.0:  # once more, the faster of two: a core shared with other work stalls a run at times
            seconds = min(seconds, time_decompose(step))
        rate = work.decompose_flops(step) / max(seconds, 1e-9)
        if rate >= dec:  # the best rate seen, and its shape (a step stalled by other work does not count)
            shape, dec = step, rate
    return shape, dec


def calibrate(
    largest: Sequence[int],
    *,
    timers: Optional[dict[str, Callable]] = None,
    cache: Optional[Path] = None,
    budget_s: float = BUDGET_S,
) -> Rates:
    """This machine's rates near ``largest`` (m, n), from the cache or measured now.

    Small matrices run far below a machine's rate (call overheads; LAPACK's blocking pays off with size),
    so the shape climbs :func:`ladder` (each step 8× the work) while the next step fits what is left of
    ``budget_s`` at the best rate measured so far; the rates are the best measured, normally at the largest
    shape (the sweep's largest when it fits: otherwise an overestimate of the time, by the efficiency still
    to gain)."""
    timers = {
        "decompose": _time_decompose,
        "gemm": _time_gemm,
        "device": device_name,
        "forward": _time_forward,
        "null": _time_null,
        "copy": _time_copy,
        "load": os.getloadavg,
        "expected": expected_rates,
        **(timers or {}),
    }
    device = timers["device"]()
    path = cache or cache_file()
    stored = read_cache(path)
    wanted = _key(device, (int(largest[0]), int(largest[1])))
    if wanted in stored:
        entry = {k: v for k, v in stored[wanted].items() if k in Rates.__dataclass_fields__}
        return Rates(
            **{**entry, "shape": tuple(entry["shape"]), "notes": tuple(entry.get("notes") or ()), "cached": True}
        )
    rates = _measure(largest, device, timers, budget_s)
    stored[wanted] = {k: v for k, v in asdict(rates).items() if k != "cached"}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(stored, indent=1))
    except OSError:
        pass  # a read-only home: measured again next time
    return rates


def _measure(largest: Sequence[int], device: str, timers: dict[str, Callable], budget_s: float) -> Rates:
    """The rates measured now with :func:`calibrate`'s ``timers``, each checked against the device's figures."""
    load, cores, loaded = load_state(timers["load"])
    t0 = time.perf_counter()
    shape, dec = _climb_ladder(largest, timers["decompose"], t0, budget_s)
    measured = {"decompose": dec, **_time_throughputs(largest, timers)}
    rates, notes = _checked_rates(measured, timers["expected"](device) or {}, loaded)
    if loaded:  # the rates above are the machine's own; the other work will slow the sweep as it slowed these
        notes.append(
            f"load {load:.1f} on {cores} core(s): times are for this machine without the other work "
            f"(while it lasts, expect up to ~{max(load / cores, 1.0):.0f}× longer)"
        )
    return Rates(
        device,
        shape,
        rates["decompose"],
        rates["gemm"],
        time.perf_counter() - t0,
        rates["forward"],
        rates["null"],
        load=load,
        cores=cores,
        notes=tuple(notes),
        bandwidth_gbs=rates["bandwidth"],
    )


def _time_throughputs(largest: Sequence[int], timers: dict[str, Callable]) -> dict[str, float]:
    """Product and forward-product FLOP/s, null cells/s and memory copy GB/s, each the best of its repeats."""
    # GEMM_SIDE square: a real model's matrices are never smaller, and a small product runs far below the rate
    gm, gn = GEMM_SIDE, GEMM_SIDE
    gemm = 2.0 * gm * gn * gn / max(min(timers["gemm"]((gm, gn)) for _ in range(GEMM_REPEATS)), 1e-9)
    fm, fn = forward_shape(largest)
    forward = 2.0 * FORWARD_TOKENS * fm * fn / max(min(timers["forward"]((fm, fn)) for _ in range(3)), 1e-9)
    draws, H, G = NULL_PROBE
    null = draws * H * G / max(min(timers["null"]() for _ in range(3)), 1e-9)
    copies = [timers["copy"]() for _ in range(3)]
    bandwidth = max(nbytes / max(sec, 1e-9) for sec, nbytes in copies) / 1e9
    return {"gemm": gemm, "forward": forward, "null": null, "bandwidth": bandwidth}


def _checked_rates(
    measured: dict[str, float], expected: dict[str, float], loaded: bool
) -> tuple[dict[str, float], list[str]]:
    """``measured`` as :func:`check_rate` says to use each rate (the null's is not checked), and its notes."""
    rates, notes = dict(measured), []
    for key, what in (("decompose", "decomposition"), ("gemm", "product"), ("forward", "forward-product")):
        rates[key], note = check_rate(what, measured[key], expected.get(key), loaded)
        notes += [note] if note else []
    bandwidth, note = check_rate("memory copy", measured["bandwidth"] * 1e9, expected.get("bandwidth"), loaded, "GB/s")
    rates["bandwidth"] = bandwidth / 1e9
    notes += [note] if note else []
    return rates, notes


def read_cache(path: Optional[Path] = None) -> dict:
    """The calibration cache's entries ({} when there is none)."""
    path = path or cache_file()
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}

"""Rates of this machine for the work model: one decomposition and one matrix product, timed, cached.

The decomposition rate is :func:`.work.decompose_flops` of a shape over the seconds the real kernel
(:func:`grrr_stream.kernel.decompose_matrix`) takes on a random pair of that shape; the product rate
is that of a float32 m×n by n×n product. The shape is the sweep's largest matrix when one decomposition
of it fits in a few seconds (judged from a quick probe), else the largest scaled copy of it that does
(same aspect ratio): the result says which. On the GPU when torch sees one.

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

from . import work

BUDGET_S = 3.0  # one calibration decomposition takes about this long at most


@dataclass(frozen=True)
class Rates:
    device: str             # e.g. 'cpu (2 threads)', 'cuda (NVIDIA H200)'
    shape: tuple[int, int]  # where the rates were measured
    decompose_flops_s: float
    gemm_flops_s: float
    measured_s: float       # wall seconds the measurement took
    cached: bool = False

    def describe(self) -> str:
        m, n = self.shape
        how = "cached" if self.cached else f"measured now in {self.measured_s:.1f} s"
        return (f"{self.device}: decomposition {self.decompose_flops_s / 1e9:.1f} GFLOP/s, products "
                f"{self.gemm_flops_s / 1e9:.1f} GFLOP/s, at {m}×{n} ({how})")


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

    return f"{device}|torch {torch.__version__}|{shape[0]}x{shape[1]}"


def _time_decompose(shape: tuple[int, int]) -> float:
    import torch

    from ..kernel import decompose_matrix

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    g = torch.Generator(device="cpu").manual_seed(0)
    W0 = torch.randn(*shape, generator=g).to(dev)
    W1 = W0 + 1e-3 * torch.randn(*shape, generator=g).to(dev)
    _sync(dev)
    t = time.perf_counter()
    decompose_matrix(W0, W1)
    _sync(dev)
    return time.perf_counter() - t


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


def _sync(dev) -> None:
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize()


def measurement_shape(largest: Sequence[int], probe_rate: float, budget_s: float = BUDGET_S) -> tuple[int, int]:
    """``largest`` if its decomposition fits the budget at ``probe_rate``, else a scaled copy that does."""
    m, n = int(largest[0]), int(largest[1])
    scale = 1.0
    while scale > 1 / 64 and work.decompose_flops((max(8, int(m * scale)), max(8, int(n * scale)))) / probe_rate > budget_s:
        scale /= 1.25
    return max(8, int(m * scale)), max(8, int(n * scale))


def calibrate(largest: Sequence[int], *, timers: Optional[dict[str, Callable]] = None,
              cache: Optional[Path] = None) -> Rates:
    """This machine's rates near ``largest`` (m, n), from the cache or measured now (a few seconds)."""
    timers = timers or {"decompose": _time_decompose, "gemm": _time_gemm, "device": device_name}
    device = timers["device"]()
    path = cache or cache_file()
    stored = _read(path)
    wanted = _key(device, (int(largest[0]), int(largest[1])))
    if wanted in stored:
        return Rates(**{**stored[wanted], "shape": tuple(stored[wanted]["shape"]), "cached": True})
    t0 = time.perf_counter()
    probe = (256, 256)
    timers["decompose"](probe)  # first call: kernels loaded, threads started
    probe_rate = work.decompose_flops(probe) / max(timers["decompose"](probe), 1e-6)
    shape = measurement_shape(largest, probe_rate)
    dec = work.decompose_flops(shape) / max(timers["decompose"](shape), 1e-9)
    gemm = 2.0 * shape[0] * shape[1] * shape[1] / max(timers["gemm"](shape), 1e-9)
    rates = Rates(device, shape, dec, gemm, time.perf_counter() - t0)
    stored[wanted] = {k: v for k, v in asdict(rates).items() if k != "cached"}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(stored, indent=1))
    except OSError:
        pass  # a read-only home: measured again next time
    return rates


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}

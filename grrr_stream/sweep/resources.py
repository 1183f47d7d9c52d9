"""What a unit needs of a Dask worker (GPUs, GPU memory, host RAM) and what the workers offer; the ``resources=``
a unit is submitted with, and the refusal, before any unit runs, of units that fit no worker.

A kind declares its units' needs in its module (``Kind.needs``), from the unit's forecast
(:class:`~.estimate.UnitForecast`: its ``ram`` and ``gpu`` bytes); the default is a CPU unit that needs the
forecast's RAM. Workers say what they hold when they are started::

    dask worker tcp://HOST:8786 --nthreads 1 --memory-limit 200GiB --resources "GPU=1,GPU_MEMORY_GIB=80"

Dask resources are counters a running task holds: a unit asking ``{"GPU": 1, "GPU_MEMORY_GIB": 70}`` only
starts on a worker with that much left. Host RAM is the worker's memory limit (Dask's nanny restarts a worker
that passes 95 % of it), not a resource: a unit is restricted to the workers whose limit holds it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import ConfigError
from ..runtime.cluster import GPU, GPU_MEMORY

GIB = 2**30


@dataclass(frozen=True)
class Needs:
    """What one unit needs of the worker it runs on (None: not known, so not asked for)."""

    gpus: int = 0
    gpu_memory: Optional[int] = None  # bytes over its GPUs
    ram: Optional[int] = None  # host bytes
    # the unit's own task only coordinates tasks that hold these (a decomposition's batches): it is checked
    # against the workers, and submitted asking for nothing (a task keeps its resources while it secedes)
    spread: bool = False

    def describe(self) -> str:
        parts = [f"{self.gpus} GPU" if self.gpus else "no GPU"]
        if self.gpus and self.gpu_memory is not None:
            parts.append(f"{self.gpu_memory / GIB:.1f} GiB of GPU memory")
        parts.append("RAM unknown" if self.ram is None else f"{self.ram / GIB:.1f} GiB of RAM")
        return ", ".join(parts)


def cpu_needs(u: Any, forecast: Any, device: Optional[str] = None) -> Needs:
    """A unit that runs on the CPU: the RAM its forecast says (the default of every kind)."""
    return Needs(0, None, forecast.ram if forecast is not None else None)


def gpu_needs(forecast: Any, gpus: int = 1) -> Needs:
    """A unit that holds ``gpus`` GPUs: the GPU memory and host RAM of its forecast."""
    if forecast is None:
        return Needs(gpus)
    return Needs(gpus, forecast.gpu, forecast.ram)


def uses_gpu(device: str) -> bool:
    """Whether a unit configured with ``device`` must have a GPU: 'cuda' or 'cuda:N' (never 'auto', which runs
    on the CPU of a worker without one, nor 'cpu')."""
    return device.startswith("cuda")


@dataclass(frozen=True)
class Offer:
    """One worker, as the scheduler describes it."""

    address: str
    resources: dict[str, float]
    memory: Optional[int]  # its memory limit in bytes (None: no limit)

    def describe(self) -> str:
        held = ", ".join(f"{k}={v:g}" for k, v in sorted(self.resources.items())) or "no resources"
        return f"{held}, " + ("no memory limit" if self.memory is None else f"{self.memory / GIB:.1f} GiB of RAM")


def offers(client: Any) -> list[Offer]:
    """The workers of ``client``'s cluster, from ``scheduler_info()`` (a memory limit of 0: none)."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    return [
        Offer(addr, dict(w.get("resources") or {}), int(w.get("memory_limit") or 0) or None)
        for addr, w in sorted(workers.items())
    ]


def declared(workers: list[Offer]) -> set[str]:
    """The resource names some worker declares."""
    return {name for w in workers for name in w.resources}


def counters(needs: Needs, workers: list[Offer]) -> dict[str, float]:
    """The Dask resources a unit asks for: none on a cluster whose workers declare none (every unit may go
    anywhere, as without this module); else its GPUs, and its GPU memory when the workers declare theirs."""
    names = declared(workers)
    if not names or not needs.gpus:
        return {}
    out: dict[str, float] = {GPU: float(needs.gpus)}
    if needs.gpu_memory is not None and GPU_MEMORY in names:
        out[GPU_MEMORY] = math.ceil(needs.gpu_memory / GIB * 100) / 100
    return out


def fits(needs: Needs, worker: Offer, asked: dict[str, float]) -> bool:
    ram_ok = needs.ram is None or worker.memory is None or needs.ram <= worker.memory
    return ram_ok and all(worker.resources.get(k, 0.0) >= v for k, v in asked.items())


def submit_options(needs: Needs, workers: list[Offer]) -> dict:
    """``client.submit`` keywords that put a unit on a worker holding what it needs: ``resources`` (see
    :func:`counters`), and ``workers`` when only some workers' memory limits hold its RAM."""
    if needs.spread:
        return {}
    asked = counters(needs, workers)
    out: dict = {"resources": asked} if asked else {}
    roomy = [w.address for w in workers if needs.ram is None or w.memory is None or needs.ram <= w.memory]
    if len(roomy) < len(workers):
        out.update(workers=roomy, allow_other_workers=False)
    return out


def refuse_misfits(needs: dict[str, Needs], workers: list[Offer]) -> None:
    """Refuse (:class:`~grrr_stream.errors.ConfigError`), all at once, the units no worker can hold: each with
    what it needs against the most any worker offers. A cluster without workers yet (one that scales up) is not
    checked."""
    if not workers:
        return
    bad = [(uid, n) for uid, n in needs.items() if not any(fits(n, w, counters(n, workers)) for w in workers)]
    if not bad:
        return
    largest = {k: max(w.resources.get(k, 0.0) for w in workers) for k in sorted(declared(workers))}
    limits = [w.memory for w in workers]
    ram = None if None in limits or not limits else max(limits)
    offer = Offer("largest", largest, ram).describe()
    lines = "\n".join(f"  {uid}: needs {n.describe()}" for uid, n in bad)
    raise ConfigError(
        f"{len(bad)} unit(s) fit no worker of the cluster ({len(workers)} worker(s); the most any offers: {offer}):\n"
        f"{lines}\nStart workers that hold them (dask worker ... --memory-limit 200GiB --resources "
        f'"{GPU}=1,{GPU_MEMORY}=80"; docs/cluster.md), or leave these units out of the sweep.'
    )

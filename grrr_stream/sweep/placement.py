"""Where a sweep's units may run on a dask.distributed cluster: each worker-side unit's needs (its kind's
``needs`` from the unit's forecast, :mod:`.resources`) against what the workers declare, checked once before
any unit runs."""

from __future__ import annotations

from typing import Any, Optional, TextIO

from ..forecast import devices  # devices.DEVICES looked up when called: tests narrow it
from ..forecast.target import on_gpu
from ..runtime.cluster import GPU, GPU_MEMORY
from .forecast import Forecast, forecast_plan
from .kinds import KINDS
from .plan import Plan
from .resources import Needs, Offer, declared, offers, refuse_misfits
from .units import Unit


def place(
    client: Any, plan: Plan, todo: list[Unit], fc: Optional[Forecast], device: Optional[str], stream: TextIO
) -> tuple[dict[str, Needs], list[Offer]]:
    """(unit id → its needs, the workers) for the units of ``todo`` that run on workers; refuses
    (:class:`~grrr_stream.errors.ConfigError`) the units no worker holds, all of them in one message.

    ``fc``: the sweep's forecast (None: none made; needs are then GPU counts only). When workers declare GPU
    memory and ``fc`` is not for a GPU, the GPU units' memory comes from a forecast for the GPU of the
    forecast's table nearest to theirs (said on ``stream``)."""
    workers = offers(client)
    heavy = [u for u in todo if KINDS[u.kind].on_worker]
    if heavy and GPU_MEMORY in declared(workers) and not _on_gpu(fc):
        fc = _gpu_forecast(plan, workers, stream) or fc
    by_unit = {f.unit: f for f in fc.units} if fc is not None else {}
    needs = {u.id: KINDS[u.kind].needs(u, by_unit.get(u.id), device) for u in heavy}
    refuse_misfits(needs, workers)
    return needs, workers


def _on_gpu(fc: Optional[Forecast]) -> bool:
    return fc is not None and fc.rates is not None and on_gpu(fc.rates)


def _gpu_forecast(plan: Plan, workers: list[Offer], stream: TextIO) -> Optional[Forecast]:
    """The plan's forecast on the table's GPU whose memory is nearest the largest worker GPU's (None: failed)."""

    per_gpu = max(w.resources.get(GPU_MEMORY, 0.0) / max(w.resources.get(GPU, 1.0), 1.0) for w in workers)
    name = min(devices.DEVICES, key=lambda n: abs(devices.DEVICES[n].memory_gib - per_gpu))
    try:
        fc = forecast_plan(plan, target=name)
    except Exception as e:  # noqa: BLE001 - the units then ask for GPUs without a memory figure
        stream.write(f"[sweep] GPU memory not forecast ({type(e).__name__}: {e}): GPU units ask for GPUs only\n")
        return None
    stream.write(
        f"[sweep] GPU memory of the units forecast for {name} ({devices.DEVICES[name].memory_gib:g} GiB, nearest "
        f"the workers' {per_gpu:g} GiB per GPU; --forecast-for DEVICE to choose)\n"
    )
    return fc

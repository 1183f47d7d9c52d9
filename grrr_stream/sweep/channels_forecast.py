"""The forecast of a standalone channels pass (``grrr-stream channels``), from the sweep's own model of a channels
unit (:func:`.kinds.channels.seconds`): forward flops = 2 × parameters × tokens at this CPU's forward rate."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from ..channels.ablation import SEEDS
from ..forecast import calibrate as calibration  # calibration.calibrate looked up when called: tests replace it
from ..forecast import work
from ..forecast.shapes import from_checkpoint
from .kinds.channels import seconds as channels_seconds

FORECAST_WARN_S = 180.0  # a forecast above this says how to make the run shorter


@dataclass(frozen=True)
class ChannelsForecast:
    passes: int  # calibration passes per model (1, or more with the ablation)
    tokens: int  # sequences × seq_len
    models: int
    seconds: Optional[float] = None  # None: the parameters or matrix shapes are not in the checkpoint headers
    flops: Optional[float] = None
    forward_flops_s: Optional[float] = None
    device: Optional[str] = None
    fit_sequences: Optional[int] = None  # beyond FORECAST_WARN_S: the sequences that fit in it

    @property
    def long(self) -> bool:
        return self.seconds is not None and self.seconds > FORECAST_WARN_S


def forecast_channels(
    models: Sequence[Path], *, sequences: int, seq_len: int, batch_size: int = 1, ablate: bool = False, rates=None
) -> ChannelsForecast:
    """Passes × tokens ≈ seconds on this machine for the channels pass over ``models`` (``rates``: this CPU's
    measured rates, calibrated when None)."""

    seeds = SEEDS if ablate else None
    head = ChannelsForecast(work.calibration_passes(seeds), sequences * seq_len, len(models))
    facts = [from_checkpoint(Path(m)) for m in models]
    params = [f.params for f in facts if f is not None and f.params]
    shapes = [s for f in facts if f is not None for s in (f.shapes or [])]
    if len(params) != len(models) or not shapes:
        return head
    rates = rates or calibration.calibrate(max(shapes, key=work.decompose_flops))
    secs = sum(
        channels_seconds(
            n, rates, sequences=sequences, seq_len=seq_len, batch_size=batch_size, ablation_seeds=seeds, first=False
        )
        for n in params
    )
    flops = sum(work.calibration_flops(n, sequences, seq_len, seeds) for n in params)
    fit = max(1, int(sequences * FORECAST_WARN_S / secs)) if secs > FORECAST_WARN_S else None
    return ChannelsForecast(
        head.passes, head.tokens, head.models, secs, flops, rates.forward_flops_s, rates.device, fit
    )

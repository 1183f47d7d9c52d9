"""What a kind's ``estimate(unit, facts)`` and ``disk(unit, facts)`` are handed and return: the facts about the
plan's checkpoints (shapes, parameters, downloads: :mod:`grrr_stream.forecast`), each looked up once, and one
unit's :class:`UnitForecast`. The forecast of a whole plan is :mod:`.forecast`'s."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..checkpoints.reader import Checkpoint
from ..errors import GrrrError
from ..forecast import work
from ..forecast.calibrate import Rates
from ..forecast.shapes import Arch, ModelFacts, from_arch, from_checkpoint, hub_model, hub_reachable
from .units import Unit

TINYCHAIN = Arch(128, 384, 2, 4, 2, vocab=256, tied=True)  # fixtures.tinychain FULL/QUICK; byte-level tokenizer


@dataclass
class UnitForecast:
    unit: str
    kind: str
    download: Optional[int]  # bytes; None: unknown
    write: Optional[int]  # bytes; None: unknown
    ram: Optional[int]  # peak bytes; None: unknown
    seconds: Optional[float]  # None: unknown
    basis: str  # how it was estimated
    flops: Optional[float] = None  # the modelled work (None: a constant or unknown)
    gpu: Optional[int] = None  # peak GPU memory in bytes (None: the unit does not use one)
    # an evaluation's seconds under each design and engine dtype ('fixed float32', ..., 'adaptive bfloat16'),
    # for the levers' shares; with ``dtype``, which one the forecast took and where it came from
    alternatives: Optional[dict[str, Optional[float]]] = None
    dtype: str = ""  # 'float32 set', 'bfloat16 stored', 'float32 predicted', ...
    design: str = ""  # the evaluation design the seconds are of


def constant(u: Unit, seconds: Optional[float], write: Optional[int], basis: str = "constant") -> UnitForecast:
    """A unit whose time is a measured constant (not modelled by flops)."""
    return UnitForecast(u.id, u.kind, 0, write, work.BASELINE_RAM, seconds, basis)


class Checkpoints:
    """Local checkpoints opened once each (None: not here, or unreadable)."""

    def __init__(self) -> None:
        self._opened: dict[str, object] = {}

    def get(self, src: str):
        if src not in self._opened:
            try:
                self._opened[src] = Checkpoint.open(Path(src)) if Path(src).is_dir() else None
            except (GrrrError, OSError):
                self._opened[src] = None
        return self._opened[src]


@dataclass
class DiskFacts:
    """What a kind's ``disk(unit, facts)`` reads: the local checkpoints, and each transition's decomposition."""

    checkpoints: Checkpoints
    dec: dict[str, Unit]  # transition id → its decompose unit


class Facts:
    """The plan's facts for the estimates (given by the forecast, which asks the kinds for them): each checkpoint
    source looked up once (a model's bytes counted at the
    first unit that fetches it), the device's rates, each transition's decomposition, each unit's disk need."""

    def __init__(
        self, dec: dict[str, Unit], generated: tuple[str, ...], online: Optional[bool], disk: dict[str, Optional[list]]
    ):
        self.generated = generated  # the folders of the tiny chains the plan makes
        self._online = online  # None: probed when a Hub model is first looked up (local plans never probe)
        self.models: dict[str, ModelFacts] = {}
        self.counted: set[tuple[str, Optional[str]]] = set()
        self.channels_seen = False
        self.dec = dec  # transition id → its decompose unit
        self.disk = disk
        self.rates: Optional[Rates] = None
        self.transitions: dict = {}  # transition id → its Transition (kind, method), from the plan
        self.sft_methods: tuple[str, ...] = ()  # the claims' SFT methods (the others are RL)

    @property
    def online(self) -> bool:
        if self._online is None:
            self._online = hub_reachable()
        return self._online

    def write(self, u: Unit) -> Optional[int]:
        """Bytes the unit writes, from its disk plan (None: not known before its checkpoints are)."""
        needs = self.disk.get(u.id, [])
        return None if needs is None else sum(n.bytes for n in needs)

    def get(self, source: str, revision: Optional[str]) -> ModelFacts:
        if source not in self.models:
            self.models[source] = self._look_up(source, revision)
        return self.models[source]

    def base_of(self, transition: str) -> ModelFacts:
        """The facts of a transition's W0."""
        d = self.dec[transition].params
        return self.get(d.base, d.base_revision)

    def _look_up(self, source: str, revision: Optional[str]) -> ModelFacts:
        if self.generated and source.startswith(self.generated):
            return from_checkpoint(Path(source)) or from_arch(TINYCHAIN, "generated (tinychain's settings)", 0)
        if Path(source).expanduser().exists() or source.startswith((".", "/", "~")):
            return from_checkpoint(Path(source).expanduser()) or ModelFacts()
        return hub_model(source, revision, online=self.online)

    def first_channels(self) -> bool:
        """True for the first channels unit asked about (it pays the imports of transformers and accelerate)."""
        first, self.channels_seen = not self.channels_seen, True
        return first

    def fetch(self, source: str, revision: Optional[str]) -> Optional[int]:
        """Bytes still to download for this source, the first time a unit needs it; 0 afterwards."""
        if (source, revision) in self.counted:  # one repo at two revisions is two downloads
            return 0
        self.counted.add((source, revision))
        return self.get(source, revision).download


def cpu_cores(rates: Rates) -> int:
    """The cores a decomposition here runs its lanes on: torch's thread count on a CPU, 1 (one lane) on a GPU."""
    import torch

    return torch.get_num_threads() if rates.device.startswith("cpu") else 1

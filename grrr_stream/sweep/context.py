"""What a kind of unit is handed: :class:`PlanContext` when it plans its units, :class:`RunContext` when one
of them runs. Both are built by the sweep (plan.py, run.py); the kinds read them (the generate kind also
tells the plan's context the unit that makes the generated models). Neither spells a kind's name: a kind
asks for another kind's units by that kind's ``NAME`` (:meth:`PlanContext.units_of`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Optional

from pydantic import BaseModel

from ..config import TrackingConfig
from .sources import Sources
from .units import PlannedModel, Transition, Unit
from .workdir import Workdir

Problems = list[str]


@dataclass
class PlanContext:
    """The config with its models, lineage and transitions resolved, and the units planned so far (the kinds
    are planned in the registry's order, so a kind sees the units of the kinds before it)."""

    cfg: BaseModel  # the sweep's config (sweep.config.SweepConfig: the kinds' sections)
    workdir: Workdir
    models: dict[str, PlannedModel]  # model id → where it is read from, its chain and lineage
    lineage: dict[str, list[str]]  # model id → its ancestors, nearest first
    transitions: dict[str, Transition]
    generated: dict[str, str]  # model id → what follows `tinychain:` in its source (NAME or seedN/NAME)
    specs: dict[str, Any]  # variant name → VariantSpec (the names that parse)
    units: list[Unit] = field(default_factory=list)
    gen: Optional[Unit] = None  # the unit making the chain whose benchmark `bench_dir: tinychain` reads (generate kind)
    made: dict[str, tuple[Unit, str]] = field(default_factory=dict)  # model id → (its generate unit, model name)

    @cached_property
    def sources(self) -> Sources:
        """Where each model is read from; first asked after the generate kind has planned (it keys generated
        models by their units' keys)."""
        return Sources(self.models, self.made)

    def units_of(self, kind: str) -> list[Unit]:
        """The units planned so far of one kind (``kind``: that kind module's ``NAME``)."""
        return [u for u in self.units if u.kind == kind]

    def keyed(self, folder: str, stem: str = "") -> Callable[[str], Path]:
        """A unit's result folder in ``WORKDIR/folder``, named by its key: a changed setting writes beside
        the old results."""
        base = self.workdir.folder(folder)
        return lambda key: base / (f"{stem}-{key[:8]}" if stem else key[:8])

    def select(self, selector: Any, what: str) -> tuple[list[str], Problems]:
        """The transitions a config's selector (cumulative, incremental, steps, all, none, a list) names."""
        transitions, models = self.transitions, self.models
        if selector in (None, "none", False):
            return [], []
        if selector == "all":
            return list(transitions), []
        if selector in ("cumulative", "incremental"):
            return [t for t, tr in transitions.items() if tr.kind == selector], []
        if selector == "steps":
            # one training step each: W0 is the model the child was trained from (its parent), whatever the kind
            missing = [
                f"{m.parent}-to-{mid}"
                for mid, m in models.items()
                if f"{m.base}-to-{mid}" in transitions and f"{m.parent}-to-{mid}" not in transitions
            ]
            problems = (
                [f"{what}: steps needs decomposition.incremental: true; not decomposed: {missing}"] if missing else []
            )
            return [t for t, tr in transitions.items() if models[tr.child].parent == tr.parent], problems
        if isinstance(selector, list):
            unknown = [s for s in selector if s not in transitions]
            problems = [f"{what}: unknown transition(s) {unknown}; planned: {sorted(transitions)}"] if unknown else []
            return [s for s in selector if s in transitions], problems
        return [], [
            f"{what}: expected cumulative, incremental, steps, all, none or a list of transition ids, got {selector!r}"
        ]


@dataclass(frozen=True)
class RunContext:
    """What a unit is run with that cannot change its result. It travels to Dask workers, less ``client``."""

    workdir: str
    tracking: TrackingConfig  # pickled as the pydantic object to Dask workers
    progress: bool
    device: Optional[str]
    threads: Optional[int]  # torch threads of a worker process (its share of the cores)
    outs: dict[str, str] = field(default_factory=dict)  # unit id → its result folder, for a unit that reads another's
    client: Any = None  # the Dask client, for units run in the scheduler's process
    verbose: bool = False  # third-party output live on the terminal too, not only in its log

    def for_worker(self) -> "RunContext":
        return replace(self, client=None)

    @property
    def scheduler(self) -> Any:
        return self.client or "threads"

"""Plan: a sweep config's chains of models → transitions → units, dependencies first.

This module resolves the models, their lineage and the transitions; each kind of unit plans its own units
(``kinds/<kind>.py``: ``plan(ctx)``, in the registry's order) and returns them with the problems it found;
:func:`plan_sweep` gathers the problems and reports them all at once, so a config is fixed in one pass
instead of one error per run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..config import clip, stable_hash
from ..errors import ConfigError
from ..variants.spec import parse_variant
from .config import SweepConfig
from .context import PlanContext, Problems
from .kinds import KINDS
from .kinds.compare import nearest_common_ancestor
from .units import PlannedModel, Transition, Unit
from .workdir import Workdir

__all__ = ["Plan", "nearest_common_ancestor", "plan_sweep"]


@dataclass
class Plan:
    config: SweepConfig
    workdir: Path
    units: list[Unit]  # dependencies before dependents
    transitions: dict[str, Transition]
    models: dict[str, PlannedModel]  # model id → where it is read from, its chain and lineage
    # model id → why decompose would refuse its local checkpoint (missing folder, FIFO, truncated header):
    # its units are planned all the same (the rest of a sweep runs); a dry run names them
    source_problems: dict[str, str] = field(default_factory=dict)

    def unit(self, uid: str) -> Unit:
        return self._index[uid]

    def __post_init__(self) -> None:
        self._index = {u.id: u for u in self.units}

    @property
    def layout(self) -> Workdir:
        """The workdir's layout: where the records, lock, forecast, report and logs are."""
        return Workdir(self.workdir)

    @property
    def key(self) -> str:
        return stable_hash(
            {
                "name": self.config.name,
                "units": sorted(u.key for u in self.units),
                "claims": self.config.claims.model_dump(),
            },
            24,
        )


def plan_sweep(cfg: SweepConfig) -> Plan:
    """Every unit of the sweep, dependencies first; all config problems reported at once."""
    workdir = Path(cfg.workdir).absolute()
    models, problems = _models(cfg)
    generated = {mid: m.source.split(":", 1)[1] for mid, m in models.items() if m.source.startswith("tinychain:")}
    lineage, broken, found = _lineages(models)
    problems += found
    specs, found = _variant_specs(cfg)
    problems += found
    ctx = PlanContext(cfg, Workdir(workdir), models, lineage, _transitions(models, broken, cfg), generated, specs)
    for kind in KINDS.values():  # in the registry's order: a kind sees the units of those before it
        planned, found = kind.plan(ctx)
        ctx.units += planned
        problems += found
    _raise_problems(cfg, problems)
    order = list(KINDS)
    units = sorted(ctx.units, key=lambda u: order.index(u.kind))  # stable: dependencies always come first
    used = dict.fromkeys(m for tr in ctx.transitions.values() for m in (tr.parent, tr.child))
    broken_sources = {m: p for m in used if (p := ctx.sources.problem(m)) is not None}
    return Plan(cfg, workdir, units, ctx.transitions, models, broken_sources)


def _variant_specs(cfg: SweepConfig) -> tuple[dict[str, Any], Problems]:
    """Every variant name of the config parsed once (the variant and evaluate kinds read them)."""
    specs, problems = {}, []
    for name in cfg.variants.names + [n for e in (cfg.evaluation, *cfg.extra_evaluations) for n in (e.variants or [])]:
        try:
            specs[name] = parse_variant(name)
        except ConfigError as e:
            problems.append(f"variant '{name}': {e}")
    return specs, problems


def _raise_problems(cfg: SweepConfig, problems: Problems) -> None:
    if not problems:
        return
    problems = list(dict.fromkeys(problems))
    shown = [clip(p, 2000) for p in problems[:40]] + (
        [f"... and {len(problems) - 40} more"] if len(problems) > 40 else []
    )
    raise ConfigError(
        f"sweep '{clip(cfg.name, 80)}' cannot be planned ({len(problems)} problem(s)):\n  " + "\n  ".join(shown)
    )


# -- models, lineage, transitions ---------------------------------------------------------------


def _models(cfg: SweepConfig) -> tuple[dict[str, PlannedModel], Problems]:
    models: dict[str, PlannedModel] = {}
    problems: Problems = []
    for chain in cfg.chains:
        for i, m in enumerate([chain.base, *chain.models]):
            if m.id in models:
                problems.append(f"model id '{m.id}' is used twice (chains {models[m.id].chain} and {chain.name})")
                continue
            parent = None if i == 0 else (m.parent or chain.base.id)
            models[m.id] = PlannedModel(
                source=m.source,
                revision=m.revision,
                chain=chain.name,
                parent=parent,
                base=chain.base.id,
                method=m.method,
                domain=m.domain,
                confirmed=m.confirmed,
            )
    return models, problems


def _ancestors(mid: str, models: dict[str, PlannedModel]) -> tuple[list[str], Optional[str]]:
    """A model's ancestors, nearest first, and what is wrong with its lineage (None: nothing)."""
    seen, cur = [], models[mid].parent
    while cur is not None:
        if cur not in models or models[cur].chain != models[mid].chain:
            return seen, f"model '{mid}': parent '{cur}' is not a model of chain {models[mid].chain}"
        if cur in seen or cur == mid:
            return seen, f"model '{mid}': its lineage has a cycle ({' → '.join([mid, *seen, cur])})"
        seen.append(cur)
        cur = models[cur].parent
    return seen, None


def _lineages(models: dict[str, PlannedModel]) -> tuple[dict[str, list[str]], set[str], Problems]:
    lineage, broken, problems = {}, set(), []
    for mid in models:
        lineage[mid], problem = _ancestors(mid, models)
        if problem is not None:
            broken.add(mid)
            problems.append(problem)
    return lineage, broken, problems


def _transitions(models: dict[str, PlannedModel], broken: set[str], cfg: SweepConfig) -> dict[str, Transition]:
    d = cfg.decomposition
    transitions: dict[str, Transition] = {}
    for mid, m in models.items():
        if m.parent is None or mid in broken:
            continue
        base = m.base
        pairs = []
        if m.parent == base:
            pairs.append((base, "cumulative"))
        else:
            if d.incremental:
                pairs.append((m.parent, "incremental"))
            if d.cumulative:
                pairs.append((base, "cumulative"))
        for parent, kind in pairs:
            tid = f"{parent}-to-{mid}"
            transitions[tid] = Transition(tid, m.chain, parent, mid, kind, m.method, m.domain)
    return transitions

"""Planning the variant and evaluation units of a sweep (and the channel sets they need)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ..errors import ConfigError
from .config import SweepConfig, SweepEvaluation
from .sources import Sources, benchmarks
from .units import EvaluateParams, Transition, Unit, VariantParams

Problems = list[str]


@dataclass(frozen=True)
class PlanContext:
    """What the variant and evaluation planners share."""

    cfg: SweepConfig
    transitions: dict[str, Transition]
    dec_key: dict[str, str]               # transition → its decomposition's key
    specs: dict[str, Any]                 # variant name → VariantSpec (the names that parse)
    sources: Sources
    gen: Optional[Unit]
    workdir: Path

    def rest_problems(self, tid: str, names: list[str], where: str) -> Problems:
        """A plan problem when rest_from: base meets a base that cannot supply the rest."""
        from ..variants.rest import rest_refusal

        composed = [n for n in names if n in self.specs and self.specs[n].composed]
        if not composed or self.cfg.variants.rest_from != "base":
            return []
        bad = self.sources.rest_problems(self.transitions[tid])
        return [rest_refusal(bad, f"{where}: {tid}: ").replace("Set rest_from", "Set variants.rest_from")] if bad \
            else []

    def channels(self, tid: str, names: list[str], where: str) -> tuple[dict[str, Any], tuple[str, ...], Problems]:
        """The channels.json fields of units with channel variants among ``names`` on transition ``tid``: its
        path and the key of its channel set (empty when no name is a channel variant), the sweep unit that
        writes it (none for a user's channels.json), or the problem."""
        from ..variants.channels import load_channels

        wanting = [n for n in names if n in self.specs and self.specs[n].channels]
        if not wanting:
            return {}, (), []
        given, tr = self.cfg.variants.channels, self.transitions[tid]
        if isinstance(given, dict):
            chain_base = self.sources.models[tr.parent].base
            given = given.get(tr.parent, given.get(chain_base))
            if given is None:
                return {}, (), [f"{where}: {tid}: variants.channels has no channels.json for {tr.parent} (or its "
                                f"chain's base {chain_base}), needed by {', '.join(wanting)}"]
        if given is None and self.cfg.channels.enabled:
            return self._channels_from_unit(tid, wanting, where)
        if given is None:
            return {}, (), [f"{where}: {tid}: variant(s) {', '.join(wanting)} need the outlier channels: set "
                        "variants.channels to a channels.json written by `grrr-stream channels`, or enable the "
                        "sweep's channels: section"]
        path = Path(given).expanduser().absolute()
        try:
            found = load_channels(path)
        except ConfigError as e:
            return {}, (), [f"{where}: {tid}: {e}"]
        # keyed by the set it holds, not by where the file lies
        return {"channels": str(path), "channels_key": found.digest}, (), []

    def _channels_from_unit(self, tid: str, wanting: list[str], where: str
                           ) -> tuple[dict[str, Any], tuple[str, ...], Problems]:
        """The outlier set of the sweep's own channels unit of ``tid``'s W0: not on disk at planning time, so it
        is keyed by that unit's key (which holds everything the set depends on); the unit is a dependency."""
        from .plan import _select
        from .plan_channels import channels_file, channels_unit

        selected, _ = _select(self.cfg.channels.transitions, self.transitions, self.sources.models,
                              "channels.transitions")
        if tid not in selected:
            return {}, (), [f"{where}: {tid}: variant(s) {', '.join(wanting)} need the outlier channels of "
                        f"{self.transitions[tid].parent}: add {tid} to channels.transitions, or set variants.channels"]
        unit = channels_unit(self, self.transitions[tid].parent)
        return {"channels": str(channels_file(unit.out)), "channels_key": unit.key}, (unit.id,), []



def variant_specs(cfg: SweepConfig) -> tuple[dict[str, Any], Problems]:
    from ..variants.spec import parse_variant

    specs, problems = {}, []
    for name in cfg.variants.names + [n for e in (cfg.evaluation, *cfg.extra_evaluations) for n in (e.variants or [])]:
        try:
            specs[name] = parse_variant(name)
        except ConfigError as e:
            problems.append(f"variant '{name}': {e}")
    return specs, problems


def variant_units(ctx: PlanContext) -> tuple[list[Unit], Problems]:
    from .plan import _keyed, _select

    v, d = ctx.cfg.variants, ctx.cfg.decomposition
    if not (v.enabled and v.write_folders):
        return [], []
    selected, problems = _select(v.transitions, ctx.transitions, ctx.sources.models, "variants.transitions")
    units: list[Unit] = []
    for tid in selected:
        refused = ctx.rest_problems(tid, v.names, "variants") if tid in ctx.dec_key else []
        problems += refused
        if tid not in ctx.dec_key or refused:
            continue
        channels, waits, found = ctx.channels(tid, v.names, "variants")
        problems += found
        for name in (n for n in v.names if n in ctx.specs):
            spec = ctx.specs[name]
            if spec.channels and not channels:
                continue
            params = VariantParams(transition=tid, variant=name, store_key=ctx.dec_key[tid],
                                   components=spec.components(), dtype=v.dtype, rest_from=v.rest_from,
                                   shard_gb=v.shard_gb, device=d.device, **(channels if spec.channels else {}))
            deps = (f"decompose/{tid}",) + (waits if spec.channels else ())
            units.append(Unit.of(f"variant/{tid}/{spec.name}", f"build {spec.name} of {tid}", params,
                                 _keyed(ctx.workdir / "variants" / tid, spec.name), deps))
    return units, problems


def evaluate_units(ctx: PlanContext) -> tuple[list[Unit], Problems]:
    """One unit per (transition, suite of benchmarks); one engine each."""
    suites = [e.suite for e in ctx.cfg.extra_evaluations]
    problems = [f"extra_evaluations need distinct 'suite' names, got {suites}"] \
        if None in suites or len(set(suites)) != len(suites) else []
    units: list[Unit] = []
    for e in (ctx.cfg.evaluation, *ctx.cfg.extra_evaluations):
        if e.enabled:
            planned, found = _suite_units(ctx, e)
            units, problems = units + planned, problems + found
    return units, problems


def _suite_units(ctx: PlanContext, e: SweepEvaluation) -> tuple[list[Unit], Problems]:
    from .plan import _keyed, _select

    v = ctx.cfg.variants
    names = e.variants if e.variants is not None else v.names
    bench_dir, bench_id = benchmarks(e, ctx.gen)
    components = {n: ctx.specs[n].components() for n in names if n in ctx.specs}
    where = "evaluation" if e.suite is None else f"extra_evaluations[{e.suite}]"
    selected, problems = _select(e.transitions, ctx.transitions, ctx.sources.models, f"{where}.transitions")
    suffix = "" if e.suite is None else f"/{e.suite}"
    limit = f" (first {e.limit} each)" if e.limit else ""
    units: list[Unit] = []
    for tid in selected:
        refused = ctx.rest_problems(tid, names, where) if tid in ctx.dec_key else []
        problems += refused
        channels, waits, found = ctx.channels(tid, names, where) if tid in ctx.dec_key else ({}, (), [])
        problems += found
        if tid not in ctx.dec_key or refused or found:
            continue
        params = EvaluateParams(
            transition=tid, suite=e.suite, store_key=ctx.dec_key[tid], variants=tuple(names), components=components,
            benchmarks=tuple(e.benchmarks), bench_dir=bench_dir, bench_id=bench_id, limit=e.limit, lenient=e.lenient,
            template=e.template, instruction=e.instruction, materialize=e.materialize, rest_from=v.rest_from,
            engine=e.engine, sampling=e.sampling, metric=e.metric, **channels)
        deps = (f"decompose/{tid}",) + (("generate/tinychain",) if e.bench_dir == "tinychain" else ()) + waits
        label = f"evaluate {len(names)} variant(s) of {tid} on {', '.join(e.benchmarks)}{limit}"
        units.append(Unit.of(f"evaluate/{tid}{suffix}", label, params,
                             _keyed(ctx.workdir / "evaluations", f"{tid}{suffix.replace('/', '-')}"), deps))
    return units, problems

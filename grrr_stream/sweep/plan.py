"""Plan: a sweep config's chains of models → transitions → units, dependencies first.

Each planner below handles one kind of unit and returns the units it planned with the
problems it found; :func:`plan_sweep` gathers the problems in config order and reports them
all at once, so a config is fixed in one pass instead of one error per run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from ..config import DecompositionSettings, clip, stable_hash
from ..dtypes import SIXTEEN_BIT
from ..errors import ConfigError
from .config import SweepConfig, TinyChainSpec
from .plan_channels import channel_units
from .plan_variants import PlanContext, evaluate_units, variant_specs, variant_units
from .sources import Sources
from .units import (KIND_ORDER, CompareParams, DecomposeParams, GenerateParams, PlannedModel, StatsParams,
                    Transition, Unit)

Problems = list[str]
Pair = tuple[str, str, str, Optional[str]]  # (comparison kind, transition a, transition b, ancestor transition)


@dataclass
class Plan:
    config: SweepConfig
    workdir: Path
    units: list[Unit]                     # dependencies before dependents
    transitions: dict[str, Transition]
    models: dict[str, PlannedModel]       # model id → where it is read from, its chain and lineage
    # model id → why decompose would refuse its local checkpoint (missing folder, FIFO, truncated header):
    # its units are planned all the same (the rest of a sweep runs); a dry run names them
    source_problems: dict[str, str] = field(default_factory=dict)

    def unit(self, uid: str) -> Unit:
        return self._index[uid]

    def __post_init__(self) -> None:
        self._index = {u.id: u for u in self.units}

    @property
    def key(self) -> str:
        return stable_hash({"name": self.config.name, "units": sorted(u.key for u in self.units),
                            "claims": self.config.claims.model_dump()}, 24)


def plan_sweep(cfg: SweepConfig) -> Plan:
    """Every unit of the sweep, dependencies first; all config problems reported at once."""
    workdir = Path(cfg.workdir).absolute()
    models, problems = _models(cfg)
    generated = {mid: m.source.split(":", 1)[1] for mid, m in models.items()
                 if m.source.startswith("tinychain:")}
    gen, found = _generate_unit(cfg, generated, workdir)
    lineage, broken, found_lineage = _lineages(models)
    problems += found + found_lineage
    transitions = _transitions(models, broken, cfg)
    sources = Sources(models, generated, gen)
    units = ([gen] if gen else []) + _decompose_units(cfg, transitions, sources, workdir)
    dec_key = {u.params.transition: u.key for u in units if isinstance(u.params, DecomposeParams)}
    planned, found = _statistics_units(cfg, transitions, models, lineage, dec_key, workdir)
    units, problems = units + planned, problems + found
    specs, found = variant_specs(cfg)
    problems += found
    context = PlanContext(cfg, transitions, dec_key, specs, sources, gen, workdir)
    for planner in (variant_units, evaluate_units, channel_units):
        planned, found = planner(context)
        units, problems = units + planned, problems + found
    _raise_problems(cfg, problems)
    units.sort(key=lambda u: KIND_ORDER.index(u.kind))  # stable: dependencies always come first
    used = dict.fromkeys(m for tr in transitions.values() for m in (tr.parent, tr.child))
    broken_sources = {m: p for m in used if (p := sources.problem(m)) is not None}
    return Plan(cfg, workdir, units, transitions, models, broken_sources)


def _raise_problems(cfg: SweepConfig, problems: Problems) -> None:
    if not problems:
        return
    problems = list(dict.fromkeys(problems))
    shown = [clip(p, 2000) for p in problems[:40]] + ([f"... and {len(problems) - 40} more"]
                                                       if len(problems) > 40 else [])
    raise ConfigError(f"sweep '{clip(cfg.name, 80)}' cannot be planned ({len(problems)} problem(s)):\n  "
                      + "\n  ".join(shown))


def _keyed(folder: Path, stem: str = "") -> Callable[[str], Path]:
    """A unit's result folder, named by its key: a changed setting writes beside the old results."""
    return lambda key: folder / (f"{stem}-{key[:8]}" if stem else key[:8])


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
            models[m.id] = PlannedModel(source=m.source, revision=m.revision, chain=chain.name, parent=parent,
                                        base=chain.base.id, method=m.method, domain=m.domain, confirmed=m.confirmed)
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


def nearest_common_ancestor(ancestors_a: list[str], ancestors_b: list[str]) -> Optional[str]:
    """The first of A's ancestors (nearest first) that is also B's."""
    shared = set(ancestors_b)
    return next((m for m in ancestors_a if m in shared), None)


def _select(selector: Any, transitions: dict[str, Transition], models: dict[str, PlannedModel], what: str
            ) -> tuple[list[str], Problems]:
    if selector in (None, "none", False):
        return [], []
    if selector == "all":
        return list(transitions), []
    if selector in ("cumulative", "incremental"):
        return [t for t, tr in transitions.items() if tr.kind == selector], []
    if selector == "steps":
        # one training step each: W0 is the model the child was trained from (its parent), whatever the kind
        missing = [f"{m.parent}-to-{mid}" for mid, m in models.items()
                   if f"{m.base}-to-{mid}" in transitions and f"{m.parent}-to-{mid}" not in transitions]
        problems = [f"{what}: steps needs decomposition.incremental: true; not decomposed: {missing}"] \
            if missing else []
        return [t for t, tr in transitions.items() if models[tr.child].parent == tr.parent], problems
    if isinstance(selector, list):
        unknown = [s for s in selector if s not in transitions]
        problems = [f"{what}: unknown transition(s) {unknown}; planned: {sorted(transitions)}"] if unknown else []
        return [s for s in selector if s in transitions], problems
    return [], [f"{what}: expected cumulative, incremental, steps, all, none or a list of transition ids, "
                f"got {selector!r}"]


# -- the tiny chain and the decompositions ------------------------------------------------------


def _generate_unit(cfg: SweepConfig, generated: dict[str, str], workdir: Path) -> tuple[Optional[Unit], Problems]:
    from ..fixtures import tinychain

    uses_tiny_bench = any(e.enabled and e.bench_dir == "tinychain" for e in (cfg.evaluation, *cfg.extra_evaluations))
    if not (generated or uses_tiny_bench):
        return None, []
    bad = sorted(f"{mid} ({name})" for mid, name in generated.items() if name not in tinychain.MODELS)
    problems = [f"tinychain sources name models {tinychain.MODELS}; got {bad}"] if bad else []
    tc = cfg.tinychain or TinyChainSpec()
    params = GenerateParams(seed=tc.seed, quick=tc.quick, chain_version=tinychain.CHAIN_VERSION, retrain=tc.retrain)
    folder = workdir / "tinychain" / f"seed{tc.seed}{'-quick' if tc.quick else ''}{'-retrained' if tc.retrain else ''}"
    verb = "copy the shipped" if not tc.retrain and tinychain.shipped_available(tc.seed, tc.quick) else "train the"
    label = f"{verb} tiny chain (seed {tc.seed}{', quick' if tc.quick else ''})"
    return Unit.of("generate/tinychain", label, params, lambda key: folder), problems


def _decompose_units(cfg: SweepConfig, transitions: dict[str, Transition], sources: Sources,
                     workdir: Path) -> list[Unit]:
    """One unit per transition; the first decomposition from each W0 computes its frames into the
    shared cache, and the others from that W0 start after it (and read them)."""
    d = cfg.decomposition
    settings = DecompositionSettings.model_validate(d.model_dump(exclude={"incremental", "cumulative"}))
    units: list[Unit] = []
    frame_producer: dict[str, str] = {}  # W0 model id → the decomposition that computes its frames
    for tid, tr in transitions.items():
        (base_src, base_id), (post_src, post_id) = sources.resolve(tr.parent), sources.resolve(tr.child)
        params = DecomposeParams(
            transition=tid, base=base_src, post=post_src, base_id=base_id, post_id=post_id,
            base_revision=sources.models[tr.parent].revision, post_revision=sources.models[tr.child].revision,
            frame_cache=str(workdir / "frames"), method=tr.method, chain=tr.chain, settings=settings)
        generated = sources.gen is not None and (tr.parent in sources.generated or tr.child in sources.generated)
        uid = f"decompose/{tid}"
        first = frame_producer.setdefault(tr.parent, uid)
        units.append(Unit.of(uid, f"decompose {tr.parent} → {tr.child} ({tr.kind})", params,
                             _keyed(workdir / "stores", tid), ("generate/tinychain",) if generated else (),
                             (first,) if first != uid else ()))
    return units


# -- statistics and comparisons -----------------------------------------------------------------


def _statistics_units(cfg: SweepConfig, transitions: dict[str, Transition], models: dict[str, PlannedModel],
                      lineage: dict[str, list[str]], dec_key: dict[str, str], workdir: Path
                      ) -> tuple[list[Unit], Problems]:
    s = cfg.statistics
    if not (s.enabled and dec_key):
        return [], []
    params = StatsParams(transitions=tuple(dec_key), store_keys=tuple(dec_key.values()), resamples=s.resamples,
                         seed=s.seed)
    units = [Unit.of("stats/summary", f"bootstrap summaries of {len(dec_key)} transition(s)", params,
                     _keyed(workdir / "stats"), tuple(f"decompose/{t}" for t in dec_key))]
    from_base = {tr.child: tid for tid, tr in transitions.items() if tr.kind == "cumulative"}
    pairs = ((_sequential_pairs(models, from_base) if s.sequential else [])
             + (_independent_pairs(models, lineage, from_base) if s.independent else []))
    units += [_compare_unit(p, cfg, transitions, dec_key, workdir) for p in pairs
              if p[1] in dec_key and p[2] in dec_key]
    return units, _difference_problems(cfg, pairs)


def _sequential_pairs(models: dict[str, PlannedModel], from_base: dict[str, str]) -> list[Pair]:
    """base → parent then parent → child, in the base frame, for every grandchild of a base."""
    pairs: list[Pair] = []
    for mid, m in models.items():
        p = m.parent
        if p is not None and p != m.base and p in from_base and mid in from_base:
            pairs.append(("sequential", from_base[p], from_base[mid], None))
    return pairs


def _independent_pairs(models: dict[str, PlannedModel], lineage: dict[str, list[str]], from_base: dict[str, str]
                       ) -> list[Pair]:
    """Every pair of models neither of which descends from the other, at any depth, compared as their
    updates from their nearest common ancestor (the base, or a shared parent)."""
    pairs: list[Pair] = []
    kids = sorted(from_base)
    for i, a in enumerate(kids):
        for b in kids[i + 1:]:
            if models[a].chain != models[b].chain or a in lineage[b] or b in lineage[a]:
                continue
            anc = nearest_common_ancestor(lineage[a], lineage[b])
            if anc == models[a].base:
                pairs.append(("independent", from_base[a], from_base[b], None))
            elif anc in from_base:
                pairs.append(("independent", from_base[a], from_base[b], from_base[anc]))
    return pairs


def _difference_problems(cfg: SweepConfig, pairs: list[Pair]) -> Problems:
    """Comparisons that take differences of stored P (sequential ones, independent ones from a shared
    parent) refuse stores that cannot give them."""
    d = cfg.decomposition
    if not any(kind == "sequential" or c is not None for kind, _, _, c in pairs):
        return []
    problems: Problems = []
    if d.store_dtype in SIXTEEN_BIT:
        problems.append(f"decomposition.store_dtype: {d.store_dtype} cannot feed sequential comparisons or "
                        "independent ones from a shared parent (they take differences of stored P, which keep "
                        "few bits in 16-bit floats): use store_dtype float32, or set statistics.sequential / "
                        "statistics.independent to false")
    if d.null_storage != "array":
        problems.append("decomposition.null_storage: norms cannot feed sequential comparisons or independent "
                        "ones from a shared parent (the increment's norm needs the null residual arrays): use "
                        "null_storage array, or set statistics.sequential / statistics.independent to false")
    return problems


def _compare_unit(pair: Pair, cfg: SweepConfig, transitions: dict[str, Transition], dec_key: dict[str, str],
                  workdir: Path) -> Unit:
    kind, a, b, c = pair
    s = cfg.statistics
    params = CompareParams(comparison=kind, a=a, b=b, ancestor=c, a_key=dec_key[a], b_key=dec_key[b],
                           ancestor_key=dec_key[c] if c is not None else None, resamples=s.resamples,
                           null_draws=s.null_draws, seed=s.seed, alpha=s.alpha)
    if kind == "sequential":
        label = f"compare {a} then {b} (sequential)"
    else:
        label = f"compare {a} vs {b} (independent, from {transitions[c].child if c else transitions[a].parent})"
    deps = (f"decompose/{a}", f"decompose/{b}") + ((f"decompose/{c}",) if c else ())
    return Unit.of(f"compare/{kind}/{a}--{b}", label, params, _keyed(workdir / "comparisons", f"{kind}-{a}--{b}"),
                   deps)

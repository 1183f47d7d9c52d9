"""``compare/<kind>/<a>--<b>``: one comparison of two transitions, stepwise (base → parent then parent →
child, in the base frame) or independent (two updates from their nearest common ancestor), with
:func:`grrr_stream.run_comparisons`; its report rows: ``comparisons.csv`` and two figures."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import ClassVar, Literal, Optional

from ... import plots
from ...columns import VALUE, Column
from ...dtypes import SIXTEEN_BIT
from ...stats.comparisons import STEPWISE
from ...stats.run import (  # also drawn into WORKDIR/report  # also drawn into WORKDIR/report
    COMPARISONS_TABLE,
    COSINES_FIGURE,
    NORMS_FIGURE,
    run_comparisons,
)
from ..context import PlanContext, Problems, RunContext
from ..rows import Report, TableRows, read_rows, rectangular
from ..units import PlannedModel, Unit, UnitParams
from .base import Kind, Planned, constant_estimate
from .decompose import keys as decompose_keys
from .decompose import store_of
from .decompose import unit_id as decompose_id

NAME = "compare"  # the kind's name: its units' ``kind``, the registry's key; spelled only here

FOLDER = "comparisons"
SECONDS = 1.0  # measured on the demo (2 CPU cores, quiet: 0.6 s a unit): not modelled by flops
# independent comparisons one sweep plans at most (some 22 h of comparisons at SECONDS each): every pair of siblings
# is one, so 800 siblings of a base would be 319 600 units, planned in minutes, run in a month
MAX_COMPARISONS = 10_000
Pair = tuple[str, str, str, Optional[str]]  # (comparison kind, transition a, transition b, ancestor transition)


class CompareParams(UnitParams):
    """One comparison of two transitions (stepwise, or independent from a common ancestor)."""

    kind: ClassVar[str] = NAME
    comparison: Literal["sequential", "independent"]  # the stepwise one as keys spell it (STEPWISE)
    a: str
    b: str
    ancestor: Optional[str]  # transition to the nearest common ancestor; None: the base
    a_key: str
    b_key: str
    ancestor_key: Optional[str]
    resamples: int
    null_draws: int
    seed: int
    alpha: float

    def key_content(self) -> dict:
        anc = {} if self.comparison == STEPWISE else {"ancestor": self.ancestor_key or "base"}
        return {
            "kind": self.comparison,
            "a": self.a_key,
            "b": self.b_key,
            **anc,
            "resamples": self.resamples,
            "null_draws": self.null_draws,
            "seed": self.seed,
            "alpha": self.alpha,
        }


def nearest_common_ancestor(ancestors_a: list[str], ancestors_b: list[str]) -> Optional[str]:
    """The first of A's ancestors (nearest first) that is also B's."""
    shared = set(ancestors_b)
    return next((m for m in ancestors_a if m in shared), None)


def plan(ctx: PlanContext) -> tuple[list[Unit], Problems]:
    s, dec_key = ctx.cfg.statistics, decompose_keys(ctx)
    if not (s.enabled and dec_key):
        return [], []
    from_base = {tr.child: tid for tid, tr in ctx.transitions.items() if tr.kind == "cumulative"}
    if s.independent:  # counted before the pairs are made: they grow with the square of a chain's models
        too_many = _too_many_independent(ctx.models, ctx.lineage, from_base)
        if too_many:
            return [], [too_many]
    pairs = (_stepwise_pairs(ctx.models, from_base) if s.stepwise else []) + (
        _independent_pairs(ctx.models, ctx.lineage, from_base) if s.independent else []
    )
    units = [_unit(p, ctx, dec_key) for p in pairs if p[1] in dec_key and p[2] in dec_key]
    return units, _difference_problems(ctx, pairs)


def _stepwise_pairs(models: dict[str, PlannedModel], from_base: dict[str, str]) -> list[Pair]:
    """base → parent then parent → child, in the base frame, for every grandchild of a base."""
    pairs: list[Pair] = []
    for mid, m in models.items():
        p = m.parent
        if p is not None and p != m.base and p in from_base and mid in from_base:
            pairs.append((STEPWISE, from_base[p], from_base[mid], None))
    return pairs


def _too_many_independent(
    models: dict[str, PlannedModel], lineage: dict[str, list[str]], from_base: dict[str, str]
) -> Optional[str]:
    """Why the independent comparisons are too many to plan (None: they are not), counted in time linear in the
    models and their depth: per chain, every pair of its models with a transition from the base, less the pairs
    where one descends from the other (an upper bound of what :func:`_independent_pairs` makes)."""
    per_chain = Counter(models[m].chain for m in from_base)
    related = sum(1 for m in from_base for a in lineage[m] if a in from_base)
    count = sum(k * (k - 1) // 2 for k in per_chain.values()) - related
    if count <= MAX_COMPARISONS:
        return None
    largest, k = per_chain.most_common(1)[0]
    return (
        f"statistics.independent: {count} independent comparisons (every pair of a chain's models neither of which "
        f"descends from the other; chain '{largest}' has {k} models) exceed the {MAX_COMPARISONS} a sweep plans: "
        "set statistics.independent: false, or split the models over several sweeps"
    )


def _independent_pairs(
    models: dict[str, PlannedModel], lineage: dict[str, list[str]], from_base: dict[str, str]
) -> list[Pair]:
    """Every pair of models neither of which descends from the other, at any depth, compared as their
    updates from their nearest common ancestor (the base, or a shared parent)."""
    pairs: list[Pair] = []
    kids = sorted(from_base)
    for i, a in enumerate(kids):
        for b in kids[i + 1 :]:
            if models[a].chain != models[b].chain or a in lineage[b] or b in lineage[a]:
                continue
            anc = nearest_common_ancestor(lineage[a], lineage[b])
            if anc == models[a].base:
                pairs.append(("independent", from_base[a], from_base[b], None))
            elif anc in from_base:
                pairs.append(("independent", from_base[a], from_base[b], from_base[anc]))
    return pairs


def _difference_problems(ctx: PlanContext, pairs: list[Pair]) -> Problems:
    """Comparisons that take differences of stored P (stepwise ones, independent ones from a shared
    parent) refuse stores that cannot give them."""
    d = ctx.cfg.decomposition
    if not any(kind == STEPWISE or c is not None for kind, _, _, c in pairs):
        return []
    problems: Problems = []
    if d.store_dtype in SIXTEEN_BIT:
        problems.append(
            f"decomposition.store_dtype: {d.store_dtype} cannot feed stepwise comparisons or "
            "independent ones from a shared parent (they take differences of stored P, which keep "
            "few bits in 16-bit floats): use store_dtype float32, or set statistics.stepwise / "
            "statistics.independent to false"
        )
    if d.null_storage != "array":
        problems.append(
            "decomposition.null_storage: norms cannot feed stepwise comparisons or independent "
            "ones from a shared parent (the increment's norm needs the null residual arrays): use "
            "null_storage array, or set statistics.stepwise / statistics.independent to false"
        )
    return problems


def _unit(pair: Pair, ctx: PlanContext, dec_key: dict[str, str]) -> Unit:
    kind, a, b, c = pair
    s, transitions = ctx.cfg.statistics, ctx.transitions
    params = CompareParams(
        comparison=kind,
        a=a,
        b=b,
        ancestor=c,
        a_key=dec_key[a],
        b_key=dec_key[b],
        ancestor_key=dec_key[c] if c is not None else None,
        resamples=s.resamples,
        null_draws=s.null_draws,
        seed=s.seed,
        alpha=s.alpha,
    )
    if kind == STEPWISE:
        label = f"compare {a} then {b} (stepwise)"
    else:
        label = f"compare {a} vs {b} (independent, from {transitions[c].child if c else transitions[a].parent})"
    deps = (decompose_id(a), decompose_id(b)) + ((decompose_id(c),) if c else ())
    return Unit.of(f"compare/{kind}/{a}--{b}", label, params, ctx.keyed(FOLDER, f"{kind}-{a}--{b}"), deps)


def run(u: Unit, ctx: RunContext) -> dict:
    p: CompareParams = u.params
    ancestor = store_of(ctx, p.ancestor) if p.ancestor else None
    res = run_comparisons(
        [(p.comparison, store_of(ctx, p.a), store_of(ctx, p.b), ancestor)],
        Path(u.out),
        resamples=p.resamples,
        null_draws=p.null_draws,
        seed=p.seed,
        alpha=p.alpha,
        scheduler=ctx.scheduler,
        tracking=ctx.tracking,
        progress=ctx.progress,
    )
    s = res.summaries[0]
    return {k: s[k] for k in ("median_cos_off", "ci_lo", "ci_hi", "p_value", "verdict")}


def report(plan: Planned, done: list[Unit], rep: Report) -> list[TableRows]:
    return [
        TableRows(
            COMPARISONS_TABLE,
            rectangular(
                [
                    {"comparison": u.id.split("/", 1)[1], **r}
                    for u in done
                    for r in read_rows(Path(u.out) / COMPARISONS_TABLE)
                ]
            ),
        )
    ]


def write(rep: Report) -> list[Path]:
    rows = rep.rows(COMPARISONS_TABLE)
    if not rows:
        return []
    return [plots.cosine_medians(rows, rep.folder / COSINES_FIGURE), plots.norm_bars(rows, rep.folder / NORMS_FIGURE)]


# the columns of comparisons.csv, as people read them
COLUMNS = tuple(
    Column(name, label, unit, aggregate=VALUE, shown=frozenset())
    for name, label, unit in (
        ("median_cos_off", "median cos_off", ""),
        ("n_matrices", "matrices", "count"),
        ("null_q975", "null 97.5 % quantile", ""),
        ("p_value", "p", ""),
        ("norm_sft", "‖ΔW_SFT‖", ""),
        ("norm_incr", "‖ΔW_incr‖", ""),
        ("norm_cum", "‖ΔW_cum‖", ""),
    )
)


KIND = Kind(
    name=NAME,
    params=CompareParams,
    plan=plan,
    run=run,
    marker=COMPARISONS_TABLE,
    tables=(COMPARISONS_TABLE,),
    columns=COLUMNS,
    estimate=constant_estimate(SECONDS),
    report=report,
    write=write,
)

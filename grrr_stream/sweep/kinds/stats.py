"""``stats/summary``: bootstrap summaries over every decomposed transition (:func:`grrr_stream.run_stats`);
its report rows: ``stats_overall.csv``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import model_validator

from ...errors import renamed
from ...stats.run import OVERALL_TABLE, run_stats
from ...stats.settings import ComparisonSettings
from ..context import PlanContext, Problems, RunContext
from ..rows import Report, TableRows, read_rows
from ..sections import Section
from ..units import Unit, UnitParams
from .base import Kind, Planned, constant_estimate
from .decompose import keys as decompose_keys
from .decompose import store_of
from .decompose import unit_id as decompose_id

NAME = "stats"  # the kind's name: its units' ``kind``, the registry's key; spelled only here

FOLDER = "stats"
TABLE = "stats_overall.csv"
SECONDS = 5.0  # measured on the demo (2 CPU cores): not modelled by flops


class SweepStatistics(ComparisonSettings):
    """The ``statistics`` section: the bootstrap summaries (this kind) and the comparisons (:mod:`.compare`),
    with the resamples, seed, null draws and level of :class:`~grrr_stream.stats.settings.ComparisonSettings`."""

    enabled: bool = True
    stepwise: bool = True  # base→parent vs parent→child in the base frame, for every grandchild
    independent: bool = True  # every pair of same-base models neither of which descends from the other

    @model_validator(mode="before")
    @classmethod
    def _old_spelling(cls, data: Any) -> Any:
        """``sequential``, the old name of ``stepwise`` (deprecated): accepted with a warning."""
        if isinstance(data, dict) and "sequential" in data:
            if "stepwise" in data:
                raise ValueError(
                    "both 'sequential' and 'stepwise' are given: 'sequential' is the old name of 'stepwise' "
                    "(renamed in issue 49); keep 'stepwise' alone"
                )
            renamed("statistics.sequential", "statistics.stepwise")
            data = {("stepwise" if k == "sequential" else k): v for k, v in data.items()}
        return data


class StatsParams(UnitParams):
    """Bootstrap summaries over every decomposed transition."""

    kind: ClassVar[str] = NAME
    transitions: tuple[str, ...]
    store_keys: tuple[str, ...]  # the keys of those transitions' decompositions
    resamples: int
    seed: int

    def key_content(self) -> dict:
        return {"stores": sorted(self.store_keys), "resamples": self.resamples, "seed": self.seed}


def plan(ctx: PlanContext) -> tuple[list[Unit], Problems]:
    s, dec_key = ctx.cfg.statistics, decompose_keys(ctx)
    if not (s.enabled and dec_key):
        return [], []
    params = StatsParams(
        transitions=tuple(dec_key), store_keys=tuple(dec_key.values()), resamples=s.resamples, seed=s.seed
    )
    return [
        Unit.of(
            "stats/summary",
            f"bootstrap summaries of {len(dec_key)} transition(s)",
            params,
            ctx.keyed(FOLDER),
            tuple(decompose_id(t) for t in dec_key),
        )
    ], []


def run(u: Unit, ctx: RunContext) -> dict:
    p: StatsParams = u.params
    stores = [store_of(ctx, t) for t in p.transitions]
    res = run_stats(
        stores,
        Path(u.out),
        resamples=p.resamples,
        seed=p.seed,
        scheduler=ctx.scheduler,
        tracking=ctx.tracking,
        progress=ctx.progress,
    )
    return {"files": [str(f) for f in res.files]}


def report(plan: Planned, done: list[Unit], rep: Report) -> list[TableRows]:
    return [TableRows(TABLE, read_rows(Path(done[0].out) / OVERALL_TABLE) if done else [])]


KIND = Kind(
    name=NAME,
    params=StatsParams,
    plan=plan,
    run=run,
    marker=OVERALL_TABLE,
    config=(Section("statistics", SweepStatistics),),
    tables=(TABLE,),
    estimate=constant_estimate(SECONDS),
    report=report,
)

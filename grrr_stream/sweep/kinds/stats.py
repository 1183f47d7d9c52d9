"""``stats/summary``: bootstrap summaries over every decomposed transition (:func:`grrr_stream.run_stats`);
its report rows: ``stats_overall.csv``."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from ...stats.run import OVERALL_TABLE
from ..context import PlanContext, Problems, RunContext
from ..rows import read_rows
from ..units import Unit, UnitParams
from .base import Kind, constant_estimate
from .decompose import keys as decompose_keys
from .decompose import unit_id as decompose_id

NAME = "stats"  # the kind's name: its units' ``kind``, the registry's key; spelled only here

FOLDER = "stats"
TABLE = "stats_overall.csv"
SECONDS = 5.0  # measured on the demo (2 CPU cores): not modelled by flops


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
    from ...stats.run import run_stats

    p: StatsParams = u.params
    stores = [Path(ctx.stores[t]) for t in p.transitions]
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


def report(plan, done: list[Unit], rep) -> None:
    if done:
        rep.stats_overall = read_rows(Path(done[0].out) / OVERALL_TABLE)


def write(rep, put) -> None:
    put(TABLE, rep.stats_overall)


KIND = Kind(
    NAME,
    StatsParams,
    plan,
    run,
    OVERALL_TABLE,
    (TABLE,),
    estimate=constant_estimate(SECONDS),
    report=report,
    write=write,
)

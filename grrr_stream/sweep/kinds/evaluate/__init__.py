"""``evaluate/<transition>[/<suite>]``: one transition's variants on one suite of benchmarks, one engine
(:func:`grrr_stream.run_evaluation`). Its report rows: the accuracy, retention, removal, solved/lost and
sampled tables of every finished evaluation; the claims over each suite's evaluated transitions are the
``claims`` kind's units (:mod:`..claims`).

The kind is this package: its sections of the sweep YAML (:mod:`.section`: ``evaluation``, ``extra_evaluations``),
its units' parameters (:mod:`.params`), its forecast (:mod:`.estimate`) and its report rows (:mod:`.rows`); the
plan, run and completion checks are here, ending in ``KIND``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from ....columns import VALUE, Column
from ....evaluation import pipeline  # pipeline.run_evaluation looked up when called: tests replace it
from ....evaluation.answers import verified_summary
from ....evaluation.designs import DESIGNS
from ....evaluation.pipeline import RECORD_FILE, EvaluationRequest
from ....evaluation.scoring import result_path
from ....evaluation.settings import EvaluationOptions
from ....evaluation.shared_answers import FOLDER as SHARED
from ....progress import Progress
from ...context import PlanContext, Problems, RunContext
from ...estimate import UnitForecast
from ...resources import Needs, gpu_needs
from ...sources import benchmarks
from ...units import Unit
from ...workdir import Workdir
from ..base import Kind
from ..decompose import keys as decompose_keys
from ..decompose import store_of
from ..decompose import unit_id as decompose_id
from ..variant import channel_fields, rest_problems
from .estimate import AUTO_BASIS, engine_dtype, estimate
from .params import NAME, EvaluateParams
from .rows import REPORT_TABLES, report
from .section import SECTIONS, SweepEvaluation

__all__ = ["AUTO_BASIS", "KIND", "NAME", "EvaluateParams", "SweepEvaluation", "engine_dtype"]

FOLDER = "evaluations"


def plan(ctx: PlanContext) -> tuple[list[Unit], Problems]:
    """One unit per (transition, suite of benchmarks); one engine each."""
    suites = [e.suite for e in ctx.cfg.extra_evaluations]
    problems = (
        [f"extra_evaluations need distinct 'suite' names, got {suites}"]
        if None in suites or len(set(suites)) != len(suites)
        else []
    )
    units: list[Unit] = []
    for e in (ctx.cfg.evaluation, *ctx.cfg.extra_evaluations):
        if e.enabled:
            planned, found = _suite_units(ctx, e)
            units, problems = units + planned, problems + found
    return units, problems


def _suite_units(ctx: PlanContext, e: SweepEvaluation) -> tuple[list[Unit], Problems]:
    v, dec_key, gen = ctx.cfg.variants, decompose_keys(ctx), ctx.gen
    names = e.variants if e.variants is not None else v.names
    bench_dir, bench_id = benchmarks(e.bench_dir, e.benchmarks, gen)
    components = {n: ctx.specs[n].components() for n in names if n in ctx.specs}
    where = "evaluation" if e.suite is None else f"extra_evaluations[{e.suite}]"
    selected, problems = ctx.select(e.transitions, f"{where}.transitions")
    if e.design not in DESIGNS:
        return [], problems + [f"{where}.design: {e.design!r} is not one of {', '.join(DESIGNS)}"]
    problems += [f"{where}: {m}" for m in DESIGNS[e.design].check(e, names)]
    suffix = "" if e.suite is None else f"/{e.suite}"
    limit = f" (first {e.limit} each)" if e.limit else ""
    units: list[Unit] = []
    for tid in selected:
        refused = rest_problems(ctx, tid, names, where) if tid in dec_key else []
        problems += refused
        channels, waits, found = channel_fields(ctx, tid, names, where) if tid in dec_key else ({}, (), [])
        problems += found
        step, found = _last_step(ctx, tid, dec_key, where) if e.engine.dtype == "auto" else (None, [])
        problems += found
        if tid not in dec_key or refused or found:
            continue
        params = EvaluateParams(
            transition=tid,
            suite=e.suite,
            store_key=dec_key[tid],
            variants=tuple(names),
            components=components,
            benchmarks=tuple(e.benchmarks),
            bench_dir=bench_dir,
            bench_id=bench_id,
            rest_from=v.rest_from,
            options=EvaluationOptions.of(e),
            informative_points=ctx.cfg.claims.informative_points,
            last_step=step,
            last_step_key=dec_key[step] if step else None,
            **channels,
        )
        deps = (
            (decompose_id(tid),)
            + ((decompose_id(step),) if step else ())
            + ((gen.id,) if e.bench_dir == "tinychain" and gen is not None else ())
            + waits
        )
        label = f"evaluate {len(names)} variant(s) of {tid} on {', '.join(e.benchmarks)}{limit}"
        units.append(
            Unit.of(
                f"evaluate/{tid}{suffix}", label, params, ctx.keyed(FOLDER, f"{tid}{suffix.replace('/', '-')}"), deps
            )
        )
    return units, problems


def _last_step(ctx: PlanContext, tid: str, dec_key: dict, where: str) -> tuple[Optional[str], Problems]:
    """The decomposed last step into a cumulative transition's W1 when W1 was trained from an intermediate model
    (None: trained from the base, or not a cumulative transition), or the problem that it is not decomposed."""
    t = ctx.transitions[tid]
    parent = ctx.models[t.child].parent
    if t.kind != "cumulative" or parent is None or parent == t.parent:
        return None, []
    step = next((i for i, s in ctx.transitions.items() if s.parent == parent and s.child == t.child), None)
    if step is None or step not in dec_key:
        return None, [
            f"{where}: engine.dtype auto judges {t.child}'s last training step ({parent} → {t.child}) "
            f"too, which is not decomposed: set decomposition.incremental: true, or an engine.dtype"
        ]
    return step, []


def run(u: Unit, ctx: RunContext) -> dict:
    # vLLM logs every weight swap at INFO and dozens of harmless kernel-registration warnings per
    # engine: kept at WARNING (set VLLM_LOGGING_LEVEL=INFO for more); they go to the unit's log
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    p: EvaluateParams = u.params
    reporter = Progress(0, enabled=ctx.progress)
    log = lambda msg: reporter.message(f"  [{u.id}] {msg}")  # noqa: E731 (a one-line callback)
    request = EvaluationRequest(
        store_of(ctx, p.transition),
        Path(u.out),
        list(p.variants),
        list(p.benchmarks),
        Path(p.bench_dir) if not p.bench_dir.startswith("hub") else p.bench_dir,
        p.options,
        nest_sampled=False,
        rest_from=p.rest_from,
        channels=Path(p.channels) if p.channels else None,
        informative_points=p.informative_points,
        progress=ctx.progress,
        last_step=store_of(ctx, p.last_step) if p.last_step else None,
        shared=Workdir(ctx.workdir).folder(SHARED),
    )
    res = pipeline.run_evaluation(request, tracking=ctx.tracking, log=log)
    return {"average": {r["variant"]: r["average"] for r in res.accuracy_rows}, "gain": res.info.get("gain")}


def complete(u: Unit) -> bool:
    """Its record is there, with tables for the metric, pass@k and maj@k asked for now (no generation depends on
    them, so they are not in the key: other ones are summarised again from the recorded answers)."""
    marker = Path(u.out) / RECORD_FILE
    try:
        meta = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(meta, dict) or not isinstance(meta.get("sampling") or {}, dict):
        return False  # not the record an evaluation writes: redone
    o = u.params.options
    have = meta.get("sampling") or {}
    want = {"pass_k": o.sampling.pass_k, "maj_k": o.sampling.maj_k}
    return (
        meta.get("metric", "avg") == o.metric
        and all(list(have.get(k) or ()) == list(want[k] or ()) for k in ("pass_k", "maj_k"))
        and _summaries_verify(u)
    )


def _summaries_verify(u: Unit) -> bool:
    """Every summary that the claims read back (a benchmark's per variant, or the design's own record) is there and
    matches its digest; one that is missing or does not (deleted, changed, or written before summaries carried one)
    makes the unit stale: summarised again from its verified answers, generating only what they lack."""
    p: EvaluateParams = u.params
    summary = DESIGNS[p.options.design].summary
    if summary is not None:
        paths = [Path(u.out) / summary]
    else:
        paths = [result_path(Path(u.out), v.partition("=")[0].strip(), b) for v in p.variants for b in p.benchmarks]
    return all(verified_summary(path) is not None for path in paths)


def stale(u: Unit) -> bool:
    """Recorded done, with tables for other metrics: summarised again from its answers, no generation."""
    return (Path(u.out) / RECORD_FILE).is_file()


def progress(u: Unit) -> str:
    out = Path(u.out)
    if not out.is_dir():
        return ""
    scored = sorted(p.parent.name + "/" + p.stem for p in out.glob("*/*.json"))
    return f"{len(scored)} of {len(u.params.variants) * len(u.params.benchmarks)} variant×benchmark scored"


def needs(u: Unit, forecast: Optional[UnitForecast], device: Optional[str]) -> Needs:
    """The engine's GPUs (tensor_parallel_size), with the forecast's GPU memory (its weights in the engine's
    dtype and KV cache) and host RAM."""
    return gpu_needs(forecast, u.params.options.engine.tensor_parallel_size)


def _column(name: str, label: str, unit: str = "") -> Column:
    return Column(name, label, unit, aggregate=VALUE, shown=frozenset())


# the columns of its report tables, as people read them (accuracy, retention, removal, informative, sampled)
COLUMNS = (
    _column("average", "score (%)", "%"),
    _column("retention_pct", "retention vs Full (%)", "%"),
    _column("retention_proj_pct", "retention vs proj (%)", "%"),
    _column("minus_full", "− Full (points)", "points"),
    _column("minus_proj", "− proj (points)", "points"),
    _column("full", "Full", "%"),
    _column("proj", "proj", "%"),
    _column("remove_diag", "Remove diag", "%"),
    _column("remove_random", "Remove random", "%"),
    _column("delta_diag", "Δ_diag", "points"),
    _column("delta_rand", "Δ_rand", "points"),
    _column("delta_diag_proj", "Δ_diag vs proj", "points"),
    _column("delta_rand_proj", "Δ_rand vs proj", "points"),
    _column("remove_random_seeds", "random seeds", "count"),
    _column("gain", "Full − Base (points)", "points"),
    _column("full_minus_proj", "Full − proj (points)", "points"),
    _column("informative_within_ci", "informative by less than its CI"),
    _column("tokens_mean", "tokens (mean)", "tokens"),
    _column("tokens_median", "tokens (median)", "tokens"),
    _column("tokens_mean_correct", "tokens, correct answers (mean)", "tokens"),
    _column("tokens_mean_wrong", "tokens, wrong answers (mean)", "tokens"),
    _column("truncated_pct", "truncated (%)", "%"),
    _column("wait_per_answer", "“Wait” per answer"),
    _column("wait_per_1k_tokens", "“Wait” per 1k tokens"),
)


KIND = Kind(
    name=NAME,
    params=EvaluateParams,
    plan=plan,
    run=run,
    marker=RECORD_FILE,
    config=SECTIONS,
    tables=REPORT_TABLES,
    on_worker=True,
    estimate=estimate,
    complete=complete,
    stale=stale,
    report=report,
    progress=progress,
    needs=needs,
    columns=COLUMNS,
)

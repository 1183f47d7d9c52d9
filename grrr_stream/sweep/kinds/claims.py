"""``claims/<suite>``: the paper's headline statistics over one evaluation suite's evaluated transitions
(:func:`grrr_stream.stats.claims_sets.summarise`: each transition's paired differences, the informative set,
and the claims with their joint bootstrap intervals), from the per-problem results its evaluate units kept.
``claims/main`` for the main ``evaluation``, ``claims/<suite>`` for each of ``extra_evaluations``.

It needs every evaluate unit of its suite and writes in its folder ``differences.csv``, ``informative.csv``,
``claims.csv`` and last ``claims.json`` (the whole summary with its numbers exact: what the report reads back).
Its report rows are read from there, never recomputed: assembling the report draws no bootstrap. Key: the
``claims`` settings, the suite's selector and, per transition, its evaluate unit's key and metric, its kind,
method and whether it is one training step (which set and group it counts in).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar, Literal, Optional

from pydantic import BaseModel, ConfigDict

from ...config import ClaimSettings
from ...errors import GrrrError
from ...evaluation.answers import verified_summary
from ...evaluation.designs import recorded
from ...evaluation.pipeline import RECORD_FILE
from ...evaluation.scoring import result_path
from ...files import atomic_write_text, to_csv, to_json
from ...stats import claims, claims_adaptive, claims_sets
from ...stats.claims_adaptive import AdaptiveEvaluation
from ...stats.predictive import FIXED
from ..context import PlanContext, Problems, RunContext
from ..rows import Report, TableRows
from ..sections import Section
from ..units import Unit, UnitParams
from .base import Kind, Planned, constant_estimate
from .evaluate.params import NAME as EVALUATE

NAME = "claims"  # the kind's name: its units' ``kind``, the registry's key; spelled only here

FOLDER = "claims"
SUMMARY_FILE = "claims.json"  # written last: the marker
# the summary's table → its file, in the unit's folder (without the suite column) and in WORKDIR/report
FILES = {"differences": "differences.csv", "informative": "informative.csv", "claims": "claims.csv"}
MAIN = "main"  # the main evaluation's name in unit ids and in the tables' suite column
SECONDS = 3.0  # the demo's 3 transitions × 10 000 joint resamples (2 CPU cores): not modelled


class Evaluated(BaseModel):
    """One evaluated transition of the suite, as its claims read it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    transition: str
    kind: str
    method: Optional[str]
    step: bool  # one training step: pooled with the others (else its own group)
    evaluation_key: str
    evaluation_out: str  # where its results are (not in the key)
    variants: tuple[str, ...]  # these two are in the evaluation's key
    benchmarks: tuple[str, ...]
    metric: str  # not in the evaluation's key: which per-problem values are read

    def key_content(self) -> dict:
        return {
            "transition": self.transition,
            "kind": self.kind,
            "method": self.method,
            "step": self.step,
            "evaluation": self.evaluation_key,
            "metric": self.metric,
        }


class SweepClaims(ClaimSettings):
    """The sweep's ``claims`` section: changing it reruns the ``claims`` units only (and, through
    ``sft_methods``, the ``channel-groups`` unit when a step changes group), never an evaluation. ``paper_side``
    and ``family`` only say how the report's verdict box reads the claims: changing them rewrites the page and
    reruns nothing."""

    # the paper's numbers in the verdict box: 'fixed' (each stated value as the claim to test, the default) or
    # 'sample' (each as seen in the 10 bases of its study: a two-sample reading, far more conservative)
    paper_side: Literal["fixed", "sample"] = FIXED
    # the box's set claims as one family: 'holm' (the family-wise error rate) or 'bh' (the false discovery rate)
    family: Literal["holm", "bh"] = "holm"


VERDICT_ONLY = {"paper_side", "family"}  # SweepClaims' fields that no claims statistic reads


class ClaimsParams(UnitParams):
    """The claims over one suite: keyed by its evaluations' keys, the selector and the claims settings."""

    kind: ClassVar[str] = NAME
    suite: Optional[str]  # None: the main evaluation (the folder's name holds it, not the key)
    selector: str
    evaluations: tuple[Evaluated, ...]
    settings: ClaimSettings  # the sweep's ``claims`` section

    def key_content(self) -> dict:
        return {
            "selector": self.selector,
            "evaluations": [e.key_content() for e in self.evaluations],
            "claims": self.settings.model_dump(mode="json"),
        }


# why an evaluated transition is in no claim of its suite (the verdict box names it beside each claim)
LEFT_OUT = "no per-problem results (evaluated by an older version)"


def unit_id(suite: Optional[str]) -> str:
    return f"{NAME}/{suite or MAIN}"


def plan(ctx: PlanContext) -> tuple[list[Unit], Problems]:
    """One unit per evaluation suite with evaluate units, after them."""
    by_suite: dict[Optional[str], list[Unit]] = {}
    for u in ctx.units_of(EVALUATE):
        by_suite.setdefault(u.params.suite, []).append(u)
    if None in by_suite and MAIN in by_suite:
        return [], [
            f"extra_evaluations: the suite name {MAIN!r} is the main evaluation's in the claims; choose another"
        ]
    settings = ClaimSettings.model_validate(ctx.cfg.claims.model_dump(exclude=VERDICT_ONLY))
    units = []
    for suite, evaluations in by_suite.items():
        members = []
        for u in evaluations:
            tr, p = ctx.transitions[u.params.transition], u.params
            members.append(
                Evaluated(
                    transition=tr.id,
                    kind=tr.kind,
                    method=tr.method,
                    step=ctx.models[tr.child].parent == tr.parent,
                    evaluation_key=u.key,
                    evaluation_out=u.out,
                    variants=tuple(v.partition("=")[0].strip() for v in p.variants),
                    benchmarks=tuple(p.benchmarks),
                    metric=p.options.metric,
                )
            )
        params = ClaimsParams(
            suite=suite, selector=selector_name(ctx.cfg, suite), evaluations=tuple(members), settings=settings
        )
        units.append(
            Unit.of(
                unit_id(suite),
                f"claims over {len(members)} evaluated transition(s)" + (f" of suite {suite}" if suite else ""),
                params,
                ctx.keyed(FOLDER, suite or MAIN),
                tuple(u.id for u in evaluations),
            )
        )
    return units, []


def selector_name(cfg, suite: Optional[str]) -> str:
    """The evaluated set of a suite as its ``transitions`` setting names it: a selector word, or
    ``ids:a,b`` for a list of transition ids."""
    section = next((e for e in cfg.extra_evaluations if e.suite == suite), None) if suite else None
    chosen = (section or cfg.evaluation).transitions
    return "ids:" + ",".join(chosen) if isinstance(chosen, list) else str(chosen)


def run(u: Unit, ctx: RunContext) -> dict:
    """The suite's summary from its evaluations' per-problem results: the three tables, then claims.json."""
    p: ClaimsParams = u.params
    scores, adaptive, rest, left_out = [], [], {}, []
    for e in p.evaluations:
        s = _adaptive(e) or _scores(e, p.settings)
        if s is None:  # results written before per-problem values were kept have no claims: said, not dropped
            left_out.append({"transition": e.transition, "why": LEFT_OUT})
            continue
        (adaptive if isinstance(s, claims_adaptive.AdaptiveEvaluation) else scores).append(s)
        rest[e.transition] = _rest_source(Path(e.evaluation_out))
    if adaptive and scores:
        raise ValueError(f"{u.id}: the suite's evaluations mix the fixed and the adaptive design")
    if p.evaluations and not (adaptive or scores):
        raise GrrrError(
            f"{u.id}: none of the suite's {len(p.evaluations)} evaluation(s) kept per-problem results (written by an "
            "older version); delete their folders under the workdir's evaluations/ and rerun the sweep to answer them "
            "again"
        )
    summary = (
        claims_adaptive.summarise(adaptive, p.settings, selector=p.selector)
        if adaptive
        else claims_sets.summarise(scores, p.settings, selector=p.selector)
    )
    for r in summary["informative"]:
        r.update(rest.get(r["transition"], {}))
    summary["left_out"] = left_out
    out = Path(u.out)
    out.mkdir(parents=True, exist_ok=True)
    for key, name in FILES.items():
        atomic_write_text(out / name, to_csv(summary[key]))
    atomic_write_text(out / SUMMARY_FILE, to_json(summary))
    return dict(summary["counts"])


def _adaptive(e: Evaluated):
    """The rows of one evaluation whose design rests each variant on its own problems, from the design's record
    (None under a design that pairs every variant on every problem)."""
    try:
        info = json.loads((Path(e.evaluation_out) / RECORD_FILE).read_text()).get("info", {})
    except (OSError, ValueError, AttributeError):
        return None
    design = recorded(info.get("design", "fixed")) if isinstance(info, dict) else None
    if design is None or not design.own_problems or design.summary is None:
        return None
    record = _verified(Path(e.evaluation_out) / design.summary)
    if record is None:
        return None
    return AdaptiveEvaluation(e.transition, e.kind, e.method, e.step, {r["variant"]: r for r in record["rows"]}, info)


def _verified(path: Path):
    """A summary the claims rest on, refused, naming it, when it is missing or does not match its digest (the
    evaluation unit that wrote it reads as stale then, and the next run summarises it again): claims are never
    computed from less than the evaluations they name."""
    found = verified_summary(path)
    if found is None:
        why = (
            "does not match its digest (changed, or written before summaries carried one)"
            if path.is_file()
            else "is missing"
        )
        raise GrrrError(f"{path} {why}; rerun the sweep: its evaluation summarises it again from the answers")
    return found


def _scores(e: Evaluated, c: ClaimSettings):
    """Paired bootstrap scores of one evaluation's variants from its per-problem results (None for results
    written before per-problem correctness was recorded)."""
    correct: dict[str, dict[str, object]] = {}
    for name in e.variants:
        for b in e.benchmarks:
            summary = _verified(result_path(Path(e.evaluation_out), name, b))
            if summary is None:
                return None
            values = (summary.get("scores") or {}).get(e.metric) or (
                summary.get("correct_bits") if e.metric == "avg" else None
            )
            if not values:
                return None
            correct.setdefault(name, {})[b] = values
    return claims.transition_scores(
        correct, transition=e.transition, kind=e.kind, resamples=c.resamples, seed=c.seed, method=e.method, step=e.step
    )


def _rest_source(out: Path) -> dict:
    """How composed variants were built: proj equals full under rest_from post, and a fallback is news."""
    try:
        info = json.loads((out / RECORD_FILE).read_text()).get("info", {})
    except (OSError, ValueError):
        info = {}
    return {
        "rest_from": info.get("rest_from") or "",
        "note": info.get("note", ""),
        "rest_fallback": info.get("rest_fallback", ""),
    }


def report(plan: Planned, done: list[Unit], rep: Report) -> list[TableRows]:
    """Each finished suite's summary as its unit wrote it (suites with no scored transition have none), kept in
    ``rep.data[NAME]`` (suite → summary: :func:`summaries`), and its rows with the suite's name."""
    kept, tables = rep.data.setdefault(NAME, {}), {key: [] for key in FILES}
    for u in done:
        try:
            s = json.loads((Path(u.out) / SUMMARY_FILE).read_text())
        except (OSError, ValueError):
            continue
        if not s["counts"]["transitions"]:
            continue
        suite = u.params.suite or ""
        kept[suite] = s
        for key, rows in tables.items():
            rows += [{"suite": suite or MAIN, **r} for r in s[key]]
    return [TableRows(name, tables[key]) for key, name in FILES.items()]


def summaries(rep: Report) -> dict:
    """Evaluation suite ('' for the main one) → its claims summary (:func:`grrr_stream.stats.claims_sets.summarise`),
    as the report read it."""
    return rep.data.get(NAME, {})


KIND = Kind(
    name=NAME,
    params=ClaimsParams,
    plan=plan,
    run=run,
    marker=SUMMARY_FILE,
    config=(Section("claims", SweepClaims),),
    tables=tuple(FILES.values()),
    estimate=constant_estimate(SECONDS),
    report=report,
)

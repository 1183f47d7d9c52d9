"""What the evaluate kind contributes to the sweep's report: every finished evaluation's tables (accuracy,
retention, removal, solved/lost, and avg@n, pass@k, maj@k where answers were sampled), and per suite of
benchmarks the claims over its evaluated transitions (:func:`grrr_stream.stats.claims_sets.summarise`)."""

from __future__ import annotations

import json
from pathlib import Path

from ...evaluation.pipeline import RECORD_FILE, TABLES
from ..rows import Row, read_rows, rectangular
from ..units import Transition, Unit

# report table (a Report field) → its file in WORKDIR/report
READ = ("accuracy", "retention", "removal", "solved_lost")
REPORT_FILES = {"accuracy": "accuracy.csv", "retention": "retention.csv", "removal": "removal.csv",
                "solved_lost": "solved_lost.csv", "differences": "differences.csv",
                "informative": "informative.csv", "claim_rows": "claims.csv", "sampled": "sampled.csv"}
REPORT_TABLES = tuple(REPORT_FILES.values())


def report(plan, done: list[Unit], rep) -> None:
    """The evaluation tables of every finished evaluation, and the claims over each suite's transitions."""
    tables: dict[str, list[Row]] = {name: [] for name in READ}
    scores_by_suite: dict[str, list] = {}
    rest: dict[tuple[str, str], dict] = {}
    for u in done:
        tr = plan.transitions[u.params.transition]
        suite = u.params.suite or ""
        label = {"transition": tr.id + (f" [{suite}]" if suite else ""), "kind": tr.kind, "from": tr.parent,
                 "to": tr.child}
        for name in READ:
            tables[name] += [{**label, **r} for r in read_rows(Path(u.out) / TABLES[name])]
        rep.sampled += [{**label, **r} for r in sampled_rows(read_rows(Path(u.out) / TABLES["metrics"]))]
        scores = _transition_scores(u, tr, plan.config.claims, step=plan.models[tr.child].parent == tr.parent)
        if scores is not None:
            scores_by_suite.setdefault(suite, []).append(scores)
            rest[(suite, tr.id)] = _rest_source(u)
    for name, rows in tables.items():
        setattr(rep, name, rectangular(rows))
    rep.sampled = rectangular(rep.sampled)
    _summarise_claims(plan, scores_by_suite, rest, rep)


def write(rep, put) -> None:
    for field, name in REPORT_FILES.items():
        put(name, getattr(rep, field))


def sampled_rows(long: list[Row]) -> list[Row]:
    """An evaluation's metrics.csv (one row per variant, benchmark and metric) as one row per variant and
    benchmark with a column per metric (percent): avg@n (the mean accuracy of the n sampled answers),
    pass@k and maj@k; only where answers were sampled (n > 1): with one answer, avg is the accuracy table's."""
    out: dict[tuple, Row] = {}
    for r in long:
        n = r.get("samples")
        if not isinstance(n, int) or n < 2:
            continue
        row = out.setdefault((r["variant"], r["benchmark"]), {"variant": r["variant"], "benchmark": r["benchmark"],
                                                              "samples": n, "problems": r.get("problems")})
        row[f"avg@{n}" if r["metric"] == "avg" else r["metric"]] = r["value"]
    return list(out.values())


def _rest_source(u: Unit) -> dict:
    """How composed variants were built: proj equals full under rest_from post, and a fallback is news."""
    try:
        info = json.loads((Path(u.out) / RECORD_FILE).read_text()).get("info", {})
    except (OSError, ValueError):
        info = {}
    return {"rest_from": info.get("rest_from") or "", "note": info.get("note", ""),
            "rest_fallback": info.get("rest_fallback", "")}


def _transition_scores(u: Unit, tr: Transition, c, step: bool = True):
    """Paired bootstrap scores of an evaluation unit's variants from its per-problem results
    (None for results written before per-problem correctness was recorded)."""
    from ...evaluation.scoring import result_path
    from ...stats import claims

    p, metric = u.params, u.params.options.metric
    correct: dict[str, dict[str, object]] = {}
    for v in p.variants:
        name = v.partition("=")[0].strip()
        for b in p.benchmarks:
            try:
                summary = json.loads(result_path(Path(u.out), name, b).read_text())
            except (OSError, ValueError):
                return None
            values = (summary.get("scores") or {}).get(metric) or (summary.get("correct_bits") if metric == "avg"
                                                                    else None)
            if not values:
                return None
            correct.setdefault(name, {})[b] = values
    return claims.transition_scores(correct, transition=tr.id, kind=tr.kind, resamples=c.resamples, seed=c.seed,
                                    method=tr.method, step=step)


def _summarise_claims(plan, scores_by_suite: dict[str, list], rest: dict, rep) -> None:
    from ...stats import claims_sets

    settings = plan.config.claims
    for suite, scores in scores_by_suite.items():
        s = claims_sets.summarise(scores, settings, selector=selector_name(plan, suite))
        rep.claims[suite] = s
        tag = {"suite": suite or "main"}
        rep.differences += [{**tag, **r} for r in s["differences"]]
        for r in s["informative"]:
            r.update(rest.get((suite, r["transition"]), {}))
        rep.informative += [{**tag, **r} for r in s["informative"]]
        rep.claim_rows += [{**tag, **r} for r in s["claims"]]


def selector_name(plan, suite: str) -> str:
    """The evaluated set of a suite as its ``transitions`` setting names it: a selector word, or
    ``ids:a,b`` for a list of transition ids."""
    ev = next((e for e in plan.config.extra_evaluations if e.suite == suite), None) if suite else None
    chosen = (ev or plan.config.evaluation).transitions
    return "ids:" + ",".join(chosen) if isinstance(chosen, list) else str(chosen)

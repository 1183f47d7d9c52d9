"""The sweep's report: the finished units' results, read once as typed rows, written to WORKDIR/report.

Finished units keep their tables as CSV files in their own folders (some written by an earlier
invocation); :func:`read_rows` is the one reader of them. :func:`write_report` gathers every
table into a :class:`Report`, writes it, and returns it: the CLI prints its summary from that
object and never reads the files back. A cell becomes a number only when writing that number
back (``files.to_csv``) gives the very same text, so the report's tables hold the units' cells
byte for byte while their readers get numbers, with None for an empty cell.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

from ..files import read_csv
from .plan import Plan
from .report_channels import read_channel_report, write_channel_report
from .units import EvaluateParams, Transition, Unit

Cell = Union[None, int, float, str]
Row = dict[str, Cell]

# columns that name things: text even when a name looks like a number (a variant called "100")
_TEXT_COLUMNS = frozenset({"transition", "kind", "from", "to", "variant", "label", "verdict", "metric",
                           "comparison", "suite", "benchmark", "reference", "method", "domain", "chain",
                           "selector", "set", "group", "statistic", "resampling", "sparsity_compare",
                           "model", "component", "group_sft_rl", "transitions", "outlier_channels"})

# report table → the file each evaluation unit keeps it in
_EVALUATION_TABLES = {"accuracy": "accuracy.csv", "retention": "table_retention.csv",
                      "removal": "table_removal.csv", "solved_lost": "solved_lost.csv"}


def parse_cell(column: str, text: str) -> Cell:
    if text == "":
        return None
    if column in _TEXT_COLUMNS:
        return text
    for kind, written in ((int, str), (float, repr)):
        try:
            value = kind(text)
        except ValueError:
            continue
        if written(value) == text:
            return value
    return text


def read_rows(path: Path) -> list[Row]:
    """A result table as typed rows; [] when the file is not there."""
    if not path.is_file():
        return []
    return [{k: parse_cell(k, v) for k, v in r.items()} for r in read_csv(path)]


def rectangular(rows: list[Row]) -> list[Row]:
    """Every row with every column (in order of first appearance), None where a row has none: the rows
    as a reader of their CSV file sees them."""
    columns = list(dict.fromkeys(k for r in rows for k in r))
    return [{c: r.get(c) for c in columns} for r in rows]


@dataclass
class Report:
    folder: Path
    units: list[Row] = field(default_factory=list)
    transitions: list[Row] = field(default_factory=list)
    comparisons: list[Row] = field(default_factory=list)
    stats_overall: list[Row] = field(default_factory=list)
    accuracy: list[Row] = field(default_factory=list)
    retention: list[Row] = field(default_factory=list)
    removal: list[Row] = field(default_factory=list)
    solved_lost: list[Row] = field(default_factory=list)
    differences: list[Row] = field(default_factory=list)
    informative: list[Row] = field(default_factory=list)
    claim_rows: list[Row] = field(default_factory=list)
    claims: dict = field(default_factory=dict)   # evaluation suite → stats.claims_sets.summarise(...)
    # pass@k, maj@k and avg@n per transition, variant and benchmark, where answers were sampled (n > 1)
    sampled: list[Row] = field(default_factory=list)
    # residual channels (report_channels.py): analysed models, per-transition shares, SFT vs RL, per layer
    channel_models: list[Row] = field(default_factory=list)
    channels: list[Row] = field(default_factory=list)
    channels_sft_rl: list[Row] = field(default_factory=list)
    channel_layers: list[Row] = field(default_factory=list)
    # transition id → its store's per-matrix rows (metrics.csv), for the HTML report's heatmaps
    matrices: dict[str, list[Row]] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)


def write_report(plan: Plan, states: dict[str, str], records: dict[str, Optional[dict]]) -> Report:
    """Sweep-level tables and figures in WORKDIR/report from the units that are done; the report
    carries the files written and the claims summary (:func:`grrr_stream.stats.claims_sets.summarise`, one per
    evaluation suite)."""
    report = read_report(plan, states, records)
    _write(report)
    return report


def read_report(plan: Plan, states: dict[str, str], records: dict[str, Optional[dict]]) -> Report:
    done = [u for u in plan.units if states.get(u.id) == "done"]
    report = Report(plan.workdir / "report", units=_unit_rows(plan, states, records))
    report.transitions = rectangular(_transition_rows(plan, done, report.matrices))
    report.comparisons = rectangular([{"comparison": u.id.split("/", 1)[1], **r} for u in done
                                      if u.kind == "compare" for r in read_rows(Path(u.out) / "comparisons.csv")])
    stats = [u for u in done if u.kind == "stats"]
    if stats:
        report.stats_overall = read_rows(Path(stats[0].out) / "table_overall.csv")
    _read_evaluations(plan, done, report)
    read_channel_report(plan, done, report)
    return report


def _unit_rows(plan: Plan, states: dict[str, str], records: dict[str, Optional[dict]]) -> list[Row]:
    from .forecast import estimates

    forecast = estimates(plan.workdir)  # the forecast made when the sweep started, next to the measured time
    return [{"unit": u.id, "kind": u.kind, "state": states.get(u.id, "pending"),
             "seconds": round(float((records.get(u.id) or {}).get("seconds") or 0.0), 2),
             "forecast_seconds": None if forecast.get(u.id) is None else round(float(forecast[u.id]), 2),
             "error": (records.get(u.id) or {}).get("error", "") if states.get(u.id) == "failed" else "",
             "out": u.out} for u in plan.units]


def _transition_rows(plan: Plan, done: list[Unit], matrices: dict[str, list[Row]]) -> list[Row]:
    out = []
    for u in done:
        if u.kind == "decompose":
            tr = plan.transitions[u.params.transition]
            matrices[tr.id] = read_rows(Path(u.out) / "metrics.csv")
            out.append(transition_row(tr, Path(u.out), matrices[tr.id]))
    return out


def transition_row(tr: Transition, store: Path, matrix_rows: Optional[list[Row]] = None) -> Row:
    """One row of transitions.csv: the store's summary means (summary.json) and, per rank threshold T,
    the change of numerical rank W0 → W1 (its mean over matrices and largest magnitude, from metrics.csv;
    ``matrix_rows``: those rows when the caller has read them already)."""
    summary = json.loads((store / "summary.json").read_text())["scopes"]["all"]
    # paper Tables 3 and 4: energy shares, relative size, SV cosine, δ_max, stable ranks and their change, α,
    # numerical ranks
    cols = ["f_diag", "f_off", "f_null", "r_delta", "sv_cos", "delta_max", "sr_w0", "sr_delta", "sr_w1", "dsr_pct",
            "alpha"]
    ranks = sorted(k[:-5] for k in summary if k.startswith("nrank_") and k.endswith("_mean"))
    # beyond the paper: principal bands, subspace angles, component survival (means over matrices)
    beyond = [k[:-5] for k in summary if k.endswith("_mean")
              and k.startswith(("band", "angle", "bfloat16_kept_", "float16_kept_"))]
    # update sparsity: pooled over the transition's entries, with the per-matrix spread (not a mean)
    sparsity = [k for k in summary if k.startswith("frac_") and k.endswith(("_pooled", "_min", "_median", "_max"))]
    sparsity += ["sparsity_compare"] if "sparsity_compare" in summary else []
    row: Row = {"transition": tr.id, "chain": tr.chain, "kind": tr.kind, "from": tr.parent, "to": tr.child,
                "method": tr.method or "", "domain": tr.domain or "", "n": summary["n"],
                **{f"{k}_mean": summary.get(f"{k}_mean") for k in cols + ranks}}
    if matrix_rows is None:
        matrix_rows = read_rows(store / "metrics.csv")
    row.update(_rank_changes(matrix_rows, [k[len("nrank_w0_"):] for k in ranks if k.startswith("nrank_w0_")]))
    row.update({f"{k}_mean": summary.get(f"{k}_mean") for k in beyond})
    row.update({k: summary[k] for k in sparsity})
    row["store"] = str(store)
    return row


def _rank_changes(rows: list[Row], thresholds: list[str]) -> Row:
    """Per threshold T (as the store names it, e.g. '0.001'): nrank(W1) − nrank(W0) per matrix, its mean
    and its largest magnitude. The paper reads the rank change at T = 1e-3; at 1e-7 it counts rounding."""
    out: Row = {}
    for t in thresholds:
        d = [r[f"nrank_w1_{t}"] - r[f"nrank_w0_{t}"] for r in rows
             if isinstance(r.get(f"nrank_w1_{t}"), int) and isinstance(r.get(f"nrank_w0_{t}"), int)]
        out[f"nrank_change_{t}_mean"] = sum(d) / len(d) if d else None
        out[f"nrank_change_{t}_maxabs"] = max(abs(x) for x in d) if d else None
    return out


def _read_evaluations(plan: Plan, done: list[Unit], report: Report) -> None:
    """The evaluation tables of every finished evaluation, and the claims over each suite's transitions."""
    tables: dict[str, list[Row]] = {name: [] for name in _EVALUATION_TABLES}
    scores_by_suite: dict[str, list] = {}
    rest: dict[tuple[str, str], dict] = {}
    for u in done:
        if not isinstance(u.params, EvaluateParams):
            continue
        tr = plan.transitions[u.params.transition]
        suite = u.params.suite or ""
        label = {"transition": tr.id + (f" [{suite}]" if suite else ""), "kind": tr.kind, "from": tr.parent,
                 "to": tr.child}
        for name, file in _EVALUATION_TABLES.items():
            tables[name] += [{**label, **r} for r in read_rows(Path(u.out) / file)]
        report.sampled += [{**label, **r} for r in sampled_rows(read_rows(Path(u.out) / "metrics.csv"))]
        scores = _transition_scores(u, tr, plan.config.claims)
        if scores is not None:
            scores_by_suite.setdefault(suite, []).append(scores)
            rest[(suite, tr.id)] = _rest_source(u)
    for name, rows in tables.items():
        setattr(report, name, rectangular(rows))
    report.sampled = rectangular(report.sampled)
    _summarise_claims(plan, scores_by_suite, rest, report)


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
        info = json.loads((Path(u.out) / "evaluation.json").read_text()).get("info", {})
    except (OSError, ValueError):
        info = {}
    return {"rest_from": info.get("rest_from") or "", "note": info.get("note", ""),
            "rest_fallback": info.get("rest_fallback", "")}


def _transition_scores(u: Unit, tr: Transition, c):
    """Paired bootstrap scores of an evaluation unit's variants from its per-problem results
    (None for results written before per-problem correctness was recorded)."""
    from ..stats import claims
    from ..evaluation.scoring import result_path

    p: EvaluateParams = u.params
    correct: dict[str, dict[str, object]] = {}
    for v in p.variants:
        name = v.partition("=")[0].strip()
        for b in p.benchmarks:
            try:
                summary = json.loads(result_path(Path(u.out), name, b).read_text())
            except (OSError, ValueError):
                return None
            values = (summary.get("scores") or {}).get(p.metric) or (summary.get("correct_bits") if p.metric == "avg"
                                                                      else None)
            if not values:
                return None
            correct.setdefault(name, {})[b] = values
    return claims.transition_scores(correct, transition=tr.id, kind=tr.kind, resamples=c.resamples, seed=c.seed,
                                    method=tr.method)


def _summarise_claims(plan: Plan, scores_by_suite: dict[str, list], rest: dict, report: Report) -> None:
    from ..stats import claims_sets

    settings = plan.config.claims
    for suite, scores in scores_by_suite.items():
        s = claims_sets.summarise(scores, settings, selector=selector_name(plan, suite))
        report.claims[suite] = s
        tag = {"suite": suite or "main"}
        report.differences += [{**tag, **r} for r in s["differences"]]
        for r in s["informative"]:
            r.update(rest.get((suite, r["transition"]), {}))
        report.informative += [{**tag, **r} for r in s["informative"]]
        report.claim_rows += [{**tag, **r} for r in s["claims"]]


def selector_name(plan: Plan, suite: str) -> str:
    """The evaluated set of a suite as its ``transitions`` setting names it: a selector word, or
    ``ids:a,b`` for a list of transition ids."""
    ev = next((e for e in plan.config.extra_evaluations if e.suite == suite), None) if suite else None
    chosen = (ev or plan.config.evaluation).transitions
    return "ids:" + ",".join(chosen) if isinstance(chosen, list) else str(chosen)


def _write(report: Report) -> None:
    """The report's tables (those with rows) and figures, in WORKDIR/report."""
    from .. import plots
    from ..files import atomic_write_text, to_csv

    rep = report.folder
    rep.mkdir(parents=True, exist_ok=True)

    def put(name: str, rows: list[Row]) -> None:
        if rows:
            atomic_write_text(rep / name, to_csv(rows))
            report.files.append(rep / name)

    put("units.csv", report.units)
    put("transitions.csv", report.transitions)
    trows = report.transitions
    edge = next((e for e in (64, 16, 256) if trows and trows[0].get(f"band{e}_off_principal_mean") is not None), None)
    if edge is not None:
        report.files.append(plots.band_energy_by_transition(trows, edge, rep / "band_energy.png"))
    put("comparisons.csv", report.comparisons)
    if report.comparisons:
        report.files.append(plots.cosine_medians(report.comparisons, rep / "offdiag_cosine_medians.png"))
        report.files.append(plots.norm_bars(report.comparisons, rep / "update_norms.png"))
    put("stats_overall.csv", report.stats_overall)
    for name, table in (("accuracy.csv", report.accuracy), ("retention.csv", report.retention),
                        ("removal.csv", report.removal), ("solved_lost.csv", report.solved_lost),
                        ("differences.csv", report.differences), ("informative.csv", report.informative),
                        ("claims.csv", report.claim_rows), ("sampled.csv", report.sampled)):
        put(name, table)
    write_channel_report(report, put)

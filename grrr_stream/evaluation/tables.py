"""The tables of an evaluation: accuracy per variant, diagnostics, retention (paper Tables 5, 6, 8), solved/lost."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from ..stats.claims import TIE
from .scoring import BenchmarkResult


def diagnostics(rs: Sequence[BenchmarkResult]) -> dict:
    """Over all answers of ``rs`` pooled: the count, how many were cut off at the token limit (their
    accuracy and Wait are lower bounds), response length (mean, median, mean of right and of wrong
    answers) and "Wait" per answer and per 1,000 generated tokens."""
    import statistics

    answers = sum(r.answers for r in rs)
    tokens = [t for r in rs for t in r.tokens]
    n_correct = sum(r.answers_correct for r in rs)
    t_correct = sum(r.tokens_correct for r in rs)
    waits = sum(r.wait_total for r in rs)
    truncated = sum(r.truncated for r in rs)
    return {
        "answers": answers,
        "truncated": truncated,
        "truncated_pct": 100.0 * truncated / answers if answers else 0.0,
        "tokens_mean": sum(tokens) / len(tokens) if tokens else None,
        "tokens_median": float(statistics.median(tokens)) if tokens else None,
        "tokens_mean_correct": t_correct / n_correct if n_correct else None,
        "tokens_mean_wrong": (
            (sum(tokens) - t_correct) / (len(tokens) - n_correct) if len(tokens) > n_correct else None
        ),
        "wait_per_answer": waits / answers if answers else 0.0,
        "wait_per_1k_tokens": 1000.0 * waits / sum(tokens) if sum(tokens) else 0.0,
    }


def accuracy_table(results: Sequence[BenchmarkResult], benchmarks: Sequence[str], metric: str = "avg") -> list[dict]:
    """One row per variant: the metric per benchmark (percent; ``avg`` = avg@n, greedy accuracy for one
    sample), the unweighted average over benchmarks (the paper's score), and the :func:`diagnostics` of
    all its answers pooled."""
    by_variant: dict[str, list[BenchmarkResult]] = {}
    for r in results:
        by_variant.setdefault(r.variant, []).append(r)
    rows = []
    for v, rs in by_variant.items():
        accs = {
            r.benchmark: (r.metrics.get(metric) if r.metrics else (r.accuracy if metric == "avg" else None)) for r in rs
        }
        row: dict[str, Any] = {"variant": v, **{b: accs.get(b) for b in benchmarks}}
        vals = [accs[b] for b in benchmarks if accs.get(b) is not None]
        row["average"] = sum(vals) / len(vals) if len(vals) == len(benchmarks) else None
        row["metric"] = metric
        row.update(diagnostics(rs))
        rows.append(row)
    return rows


def diagnostics_table(results: Sequence[BenchmarkResult]) -> list[dict]:
    """The :func:`diagnostics` per variant and benchmark."""
    return [{"variant": r.variant, "benchmark": r.benchmark, **diagnostics([r])} for r in results]


def accuracy_columns(acc_rows: Sequence[dict]) -> list[str]:
    """The benchmark columns of an accuracy table."""
    fixed = {
        "variant",
        "average",
        "metric",
        "answers",
        "wait_per_answer",
        "wait_per_1k_tokens",
        "truncated",
        "truncated_pct",
        "tokens_mean",
        "tokens_median",
        "tokens_mean_correct",
        "tokens_mean_wrong",
        "transition",
        "kind",
        "from",
        "to",
    }
    return [k for k in (acc_rows[0] if acc_rows else {}) if k not in fixed]


TABLE56 = ("base", "full", "proj", "diag", "off", "null", "offnull")


def retention_tables(
    acc_rows: Sequence[dict], *, rest_from: Optional[str] = None, informative_points: float = 1.0
) -> tuple[list[dict], list[dict], dict]:
    """Tables 5/6 (component retention, against full as the paper and against proj) and 8
    (diagonal vs random removal; Δ = remove − reference, negative when removal hurts); the transition is
    informative when full − base ≥ ``informative_points`` (the claims' setting; a tie counts)."""
    avg = {r["variant"]: r["average"] for r in acc_rows if r["average"] is not None}
    full, base, proj = avg.get("full"), avg.get("base"), avg.get("proj")
    info: dict[str, Any] = {"full": full, "base": base, "proj": proj, "rest_from": rest_from}
    if full is not None and base is not None:
        info["gain"] = full - base
        info["informative"] = info["gain"] >= informative_points - TIE
        info["informative_points"] = informative_points
    if full is not None and proj is not None:
        info["full_minus_proj"] = full - proj
    if rest_from == "post":
        info["note"] = "rest_from: post: proj equals full on every tensor"

    def pct(v: float, ref: Optional[float]) -> Optional[float]:
        return 100.0 * v / ref if ref else None

    t56 = [
        {"variant": v, "average": avg[v], "retention_pct": pct(avg[v], full), "retention_proj_pct": pct(avg[v], proj)}
        for v in (*TABLE56, *(v for v in avg if v not in TABLE56 and not v.startswith("randrm-")))
        if v in avg
    ]
    rand = [a for v, a in avg.items() if v.startswith("randrm-")]
    t8 = []
    if full is not None and ("offnull" in avg or rand):
        row: dict[str, Any] = {"full": full, "proj": proj}
        if "offnull" in avg:
            row["remove_diag"] = avg["offnull"]
            row["delta_diag"] = avg["offnull"] - full
            row["delta_diag_proj"] = avg["offnull"] - proj if proj is not None else None
        if rand:
            row["remove_random"] = sum(rand) / len(rand)
            row["remove_random_seeds"] = len(rand)
            row["delta_rand"] = row["remove_random"] - full
            row["delta_rand_proj"] = row["remove_random"] - proj if proj is not None else None
        t8.append(row)
    return t56, t8, info


def solved_lost(results: Sequence[BenchmarkResult], metric: str = "avg", reference: str = "full") -> list[dict]:
    """Per variant, the problems the reference solves and the variant does not ('lost'), and the
    reverse ('gained'); a problem counts as solved when its per-problem ``metric`` is at least 0.5
    (for greedy decoding: answered correctly)."""

    def solved(r: BenchmarkResult) -> list[bool]:
        vals = r.scores.get(metric) if r.scores else None
        if vals is None:
            vals = [c == "1" for c in r.correct_bits]
        return [float(v) >= 0.5 for v in vals]

    ref = {r.benchmark: solved(r) for r in results if r.variant == reference}
    rows = []
    for r in results:
        if r.variant == reference or r.benchmark not in ref:
            continue
        mine = solved(r)
        for i, (a, b) in enumerate(zip(ref[r.benchmark], mine)):
            if a != b:
                rows.append(
                    {
                        "variant": r.variant,
                        "benchmark": r.benchmark,
                        "problem": i,
                        "change": "lost" if a else "gained",
                        "reference": reference,
                        "metric": metric,
                    }
                )
    return rows

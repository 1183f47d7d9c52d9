"""The sweep's report: sweep-level tables and figures in WORKDIR/report from the units that are done."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from .plan import Plan
from .units import Transition, Unit


def _read_csv(path: Path) -> list[dict]:
    import csv

    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write_report(plan: Plan, states: dict[str, str], records: dict[str, Optional[dict]]) -> tuple[list[Path], dict]:
    """Sweep-level tables and figures in WORKDIR/report from the units that are done; returns the
    files and the claims summary (:func:`grrr_stream.claims.summarise`, one per evaluation suite)."""
    from .. import plots
    from ..files import atomic_write_text, to_csv

    rep = plan.workdir / "report"
    rep.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    done = [u for u in plan.units if states.get(u.id) == "done"]

    def put(name: str, rows: list[dict]) -> None:
        if rows:
            atomic_write_text(rep / name, to_csv(rows))
            files.append(rep / name)

    status_rows = [{"unit": u.id, "kind": u.kind, "state": states.get(u.id, "pending"),
                    "seconds": round(float((records.get(u.id) or {}).get("seconds") or 0.0), 2),
                    "error": (records.get(u.id) or {}).get("error", "") if states.get(u.id) == "failed" else "",
                    "out": u.out} for u in plan.units]
    put("units.csv", status_rows)

    trows = []
    for u in done:
        if u.kind != "decompose":
            continue
        tr = plan.transitions[u.params.transition]
        summary = json.loads((Path(u.out) / "summary.json").read_text())["scopes"]["all"]
        # paper Tables 3 and 4: energy shares, relative size, stable ranks and their change, α, numerical ranks
        cols = ["f_diag", "f_off", "f_null", "r_delta", "sr_w0", "sr_w1", "dsr_pct", "alpha"]
        cols += sorted(k[:-5] for k in summary if k.startswith("nrank_") and k.endswith("_mean"))
        # beyond the paper: principal bands, subspace angles, sparsity, component survival
        cols += [k[:-5] for k in summary if k.endswith("_mean")
                 and k.startswith(("band", "angle", "frac_", "bfloat16_kept_", "float16_kept_"))]
        trows.append({"transition": tr.id, "chain": tr.chain, "kind": tr.kind, "from": tr.parent, "to": tr.child,
                      "method": tr.method or "", "domain": tr.domain or "", "n": summary["n"],
                      **{f"{k}_mean": summary.get(f"{k}_mean") for k in cols}, "store": u.out})
    put("transitions.csv", trows)
    edge = next((e for e in (64, 16, 256) if trows and trows[0].get(f"band{e}_off_principal_mean") is not None), None)
    if edge is not None:
        files.append(plots.band_energy_by_transition(trows, edge, rep / "band_energy.png"))

    summaries = []
    for u in done:
        if u.kind == "compare":
            for r in _read_csv(Path(u.out) / "comparisons.csv"):
                summaries.append({"comparison": u.id.split("/", 1)[1], **r})
    put("comparisons.csv", summaries)
    if summaries:
        numeric = [{k: _num(v) for k, v in s.items()} for s in summaries]
        files.append(plots.cosine_medians(numeric, rep / "offdiag_cosine_medians.png"))
        files.append(plots.norm_bars(numeric, rep / "update_norms.png"))

    stats = [u for u in done if u.kind == "stats"]
    if stats:
        put("stats_overall.csv", _read_csv(Path(stats[0].out) / "table_overall.csv"))

    acc, retention, removal, lost = [], [], [], []
    scores_by_suite: dict[str, list] = {}
    rest: dict[tuple[str, str], dict] = {}
    for u in done:
        if u.kind != "evaluate":
            continue
        tr = plan.transitions[u.params.transition]
        suite = u.params.suite or ""
        label = {"transition": tr.id + (f" [{suite}]" if suite else ""), "kind": tr.kind, "from": tr.parent,
                 "to": tr.child}
        acc += [{**label, **r} for r in _read_csv(Path(u.out) / "accuracy.csv")]
        retention += [{**label, **r} for r in _read_csv(Path(u.out) / "table_retention.csv")]
        removal += [{**label, **r} for r in _read_csv(Path(u.out) / "table_removal.csv")]
        lost += [{**label, **r} for r in _read_csv(Path(u.out) / "solved_lost.csv")]
        scores = _transition_scores(u, tr, plan.config.claims)
        if scores is not None:
            scores_by_suite.setdefault(suite, []).append(scores)
            try:
                info = json.loads((Path(u.out) / "evaluation.json").read_text()).get("info", {})
            except (OSError, ValueError):
                info = {}
            # how composed variants were built: proj equals full under rest_from post, and a fallback is news
            rest[(suite, tr.id)] = {"rest_from": info.get("rest_from") or "", "note": info.get("note", ""),
                                    "rest_fallback": info.get("rest_fallback", "")}
    put("accuracy.csv", acc)
    put("retention.csv", retention)
    put("removal.csv", removal)
    put("solved_lost.csv", lost)
    claims_summary = _write_claims(plan, scores_by_suite, rest, put)
    return files, claims_summary


def _transition_scores(u: Unit, tr: Transition, c):
    """Paired bootstrap scores of an evaluation unit's variants from its per-problem results
    (None for results written before per-problem correctness was recorded)."""
    from .. import claims
    from ..evaluate import result_path

    metric = u.params.metric
    correct: dict[str, dict[str, object]] = {}
    for v in u.params.variants:
        name = v.partition("=")[0].strip()
        for b in u.params.benchmarks:
            try:
                summary = json.loads(result_path(Path(u.out), name, b).read_text())
            except (OSError, ValueError):
                return None
            values = (summary.get("scores") or {}).get(metric) or (summary.get("correct_bits") if metric == "avg"
                                                                    else None)
            if not values:
                return None
            correct.setdefault(name, {})[b] = values
    return claims.transition_scores(correct, transition=tr.id, kind=tr.kind, resamples=c.resamples, seed=c.seed)


def _write_claims(plan: Plan, scores_by_suite: dict[str, list], rest: dict, put) -> dict:
    from .. import claims

    c = plan.config.claims
    out: dict[str, dict] = {}
    diffs, info, claim_rows = [], [], []
    for suite, scores in scores_by_suite.items():
        s = claims.summarise(scores, within_points=c.within_points, informative_points=c.informative_points,
                             retention_floor_pct=c.retention_floor_pct, level=c.level)
        out[suite] = s
        tag = {"suite": suite or "main"}
        diffs += [{**tag, **r} for r in s["differences"]]
        for r in s["informative"]:
            r.update(rest.get((suite, r["transition"]), {}))
        info += [{**tag, **r} for r in s["informative"]]
        claim_rows += [{**tag, "informative_transitions": s["counts"]["informative"], **r} for r in s["claims"]]
    put("differences.csv", diffs)
    put("informative.csv", info)
    put("claims.csv", claim_rows)
    return out


def _num(v: str) -> Any:
    try:
        return float(v)
    except (TypeError, ValueError):
        return v

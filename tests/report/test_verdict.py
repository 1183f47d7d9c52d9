"""The report's verdict box and labels (grrr_stream/report/verdict.py, paper_claims.py, plots.cosine_label), on
planted cases with known answers: a cosine outside the isotropic band whose interval over matrices excludes 0, one
whose interval crosses 0 (the demo's Fig. 4B case: "anti-aligned, p=0.0001" beside CI [−0.072, 0.048]) and one
inside the band; p-values at the Monte Carlo floor; verdicts from planted claims rows; a multi-step transition
never pooled with the steps; undefined cells and wide tables. Fast (no sweep)."""

from __future__ import annotations

import numpy as np
import pytest

from grrr_stream.plots import cosine_label, p_text
from grrr_stream.report import cells
from grrr_stream.report.paper_claims import CLAIMS
from grrr_stream.report.verdict import FAILS, HOLDS, NOT_COMPARABLE, UNRESOLVED, verdicts


def _cmp(median, lo, hi, p=1 / 10_001, verdict="anti-aligned", band=(-0.011, 0.011), draws=10_000, kind="sequential"):
    return {
        "label": "x",
        "kind": kind,
        "median_cos_off": median,
        "ci_lo": lo,
        "ci_hi": hi,
        "p_value": p,
        "null_draws": draws,
        "null_lo": band[0],
        "null_hi": band[1],
        "verdict": verdict,
        "norm_sft": 1.0,
        "norm_incr": 0.1,
    }


def test_cosine_labels_say_what_they_rest_on():
    # outside the band, the interval over matrices excludes 0: the direction stands, with the p at its floor
    out = cosine_label(_cmp(-0.051, -0.072, -0.030))
    assert out.startswith("anti-aligned: outside the isotropic band (p < 1e-4)") and "CI [-0.072, -0.03]" in out
    # outside the band but the interval crosses 0 (the demo's Fig. 4B): no bare direction
    crossing = cosine_label(_cmp(-0.051, -0.072, 0.048))
    assert "direction not resolved over matrices: CI [-0.072, 0.048]" in crossing
    assert "anti-aligned" not in crossing and "p < 1e-4" in crossing
    # aligned, a p above the floor
    assert cosine_label(_cmp(0.05, 0.03, 0.07, p=0.0123, verdict="aligned")).startswith(
        "aligned: outside the isotropic band (p = 0.012)"
    )
    # inside the band
    assert (
        cosine_label(_cmp(0.004, -0.002, 0.009, p=0.41, verdict="indistinguishable"))
        == "inside the isotropic band (p = 0.41)"
    )


def test_p_values_at_the_resolution_floor_print_as_less_than_one_over_draws():
    assert p_text(1 / 10_001, 10_000) == "p < 1e-4"
    assert p_text(1 / 201, 200) == "p < 5e-3"
    assert p_text(2 / 10_001, 10_000) == "p = 0.0002"
    assert p_text(0.05, 10_000) == "p = 0.05"
    assert p_text(float("nan"), 10) == "p —"


def _rows(stat, variant, group, value, lo, hi, n, set_name="all evaluated", ref="full"):
    return {
        "statistic": stat,
        "variant": variant,
        "reference": ref,
        "set": set_name,
        "group": group,
        "value": value,
        "ci_lo": lo,
        "ci_hi": hi,
        "transitions": n,
    }


def _by_id(vs):
    return {v.claim.id: v for v in vs}


def test_verdicts_from_planted_claims_rows():
    steps = {"a", "b"}
    rows = [
        _rows("retention_median_pct", "offnull", "all", 98.5, 97.0, 100.0, 28),  # 99 inside: holds
        _rows("retention_median_pct", "diag", "SFT", 60.0, 50.0, 70.0, 11),  # 23 outside: fails
        _rows("retention_median_pct", "diag", "RL", 79.0, 70.0, 85.0, 3),  # too few
        _rows("at_floor", "offnull", "all", 22, 18, 25, 28),  # 22/28 straddled
        _rows("within_k", "offnull", "all", 25, 25, 25, 25, set_name="informative"),  # 25 of 25: holds
        _rows("at_most_ceiling", "diag", "SFT", 2, 1, 3, 11),  # 3/11 < 6/11: fails
        _rows("retention_median_pct", "null", "all", 90.0, 85.0, 95.0, 28),
        _rows("retention_median_pct", "diag", "all", 50.0, 40.0, 60.0, 28),
    ]  # null above: holds
    trs = [
        {"transition": "a", "method": "GRPO", "f_diag_mean": 0.0005},
        {"transition": "b", "method": "GRPO", "f_diag_mean": 0.02},
        {"transition": "c", "method": "GRPO", "f_diag_mean": 0.5},
    ]  # c: not a step
    comps = [_cmp(0.002, -0.001, 0.004, p=0.3, verdict="indistinguishable", band=(-0.003, 0.003))]
    v = _by_id(verdicts(rows, trs, comps, group_of=lambda r: "RL", steps=steps))
    assert [c.id for c in CLAIMS] == list(v)
    # the paper's whole percents: 99 % is [98.5, 99.5), so an interval ending at 98.6 still holds
    near = _by_id(
        verdicts(
            [_rows("retention_median_pct", "offnull", "all", 98.2, 97.9, 98.6, 28)],
            [],
            [],
            group_of=lambda r: None,
            steps=set(),
        )
    )
    far = _by_id(
        verdicts(
            [_rows("retention_median_pct", "offnull", "all", 98.0, 97.6, 98.4, 28)],
            [],
            [],
            group_of=lambda r: None,
            steps=set(),
        )
    )
    assert near["offnull-median"].verdict == HOLDS and far["offnull-median"].verdict == FAILS
    assert v["offnull-median"].verdict == HOLDS and v["offnull-median"].value == "98.5 % [97.0, 100.0]"
    assert "28 evaluated steps" in v["offnull-median"].set and "problems" in v["offnull-median"].basis
    assert v["diag-median-sft"].verdict == FAILS and "outside" in v["diag-median-sft"].reason
    assert v["diag-median-rl"].verdict == NOT_COMPARABLE and v["diag-median-rl"].reason == "3 transitions, paper 17"
    assert v["offnull-floor"].verdict == UNRESOLVED and v["offnull-floor"].value == "22 of 28 [18–25]"
    assert v["offnull-within"].verdict == HOLDS
    assert v["diag-ceiling-sft"].verdict == FAILS
    assert v["null-above-diag"].verdict == HOLDS
    # f_diag over the RL *steps* only (c is left out): 1 of 2 ≤ 0.011; 2 steps against the paper's 17
    assert v["rl-fdiag"].value.startswith("1 of 2 ≤ 0.011") and v["rl-fdiag"].verdict == NOT_COMPARABLE
    # cosines inside a band narrower than 0.008, CI within ±0.008: holds; the step ratio 0.1 is in 0.004–0.17
    assert v["seq-cos"].verdict == HOLDS and "CI over matrices" in v["seq-cos"].basis
    assert v["rl-step-size"].verdict == HOLDS
    assert v["indep-above"].verdict == NOT_COMPARABLE and "no independent" in v["indep-above"].reason
    # a band wider than the paper's bound: not comparable, and said why
    wide = _by_id(
        verdicts([], [], [_cmp(0.002, -0.001, 0.004, band=(-0.05, 0.05))], group_of=lambda r: None, steps=set())
    )
    assert wide["seq-cos"].verdict == NOT_COMPARABLE and "wider than the paper's bound 0.008" in wide["seq-cos"].reason
    # a median inside ±0.008 whose CI over matrices reaches beyond (the demo's sequential pair): not resolved
    loose = _by_id(
        verdicts([], [], [_cmp(-0.0024, -0.0467, 0.0355, band=(-0.001, 0.001))], group_of=lambda r: None, steps=set())
    )
    assert loose["seq-cos"].verdict == UNRESOLVED and "reaches beyond" in loose["seq-cos"].reason
    assert wide["offnull-median"].value == "—" and wide["offnull-median"].verdict == NOT_COMPARABLE


def test_a_multi_step_transition_is_never_pooled_with_the_steps():
    """The demo's 'RL' group pooled sft→rl (a step) with base→rl (cumulative over SFT and RL): median 54.7 %
    [52.3, 57.2] from 10.5 and 98.8. Steps and the multi-step transition now have groups of their own."""
    from grrr_stream.config import ClaimSettings
    from grrr_stream.stats.claims import transition_scores
    from grrr_stream.stats.claims_sets import MULTI_STEP, claims_rows

    rng = np.random.default_rng(0)
    n = 200

    def ts(name, full, diag, step, method="GRPO"):
        bits = {v: {"b": rng.random(n) < p} for v, p in (("base", 0.1), ("full", full), ("diag", diag))}
        return transition_scores(bits, transition=name, resamples=200, method=method, step=step)

    scores = [
        ts("sft-to-rl", 0.8, 0.08, True),
        ts("base-to-rl", 0.8, 0.79, False),
        ts("base-to-sft", 0.6, 0.3, True, "SFT"),
    ]
    rows = claims_rows(scores, ClaimSettings(resamples=200))
    med = {
        r["group"]: r
        for r in rows
        if r["statistic"] == "retention_median_pct" and r["variant"] == "diag" and r["reference"] == "full"
    }
    assert med["RL"]["transitions"] == 1 and med["RL"]["value"] == pytest.approx(
        100 * scores[0].score("diag") / scores[0].score("full")
    )
    assert med["all"]["transitions"] == 2  # the two steps
    assert med[MULTI_STEP]["transitions"] == 1 and med[MULTI_STEP]["value"] == pytest.approx(
        100 * scores[1].score("diag") / scores[1].score("full")
    )


def test_undefined_cells_read_a_dash_and_wide_tables_are_split():
    assert cells.shown(float("nan")) == cells.shown(None) == cells.shown("nan") == "—"
    assert cells.shown(0.123456) == "0.1235"
    cols = [f"c{i}" for i in range(30)]
    t = cells.Table("t", "T", "", cols, [("", [[cells.Cell(float(i)) for i in range(30)]])])
    parts = cells.split(t, 2)
    assert len(parts) == 3 and all(len(p.columns) <= cells.MAX_COLUMNS and p.columns[:2] == ["c0", "c1"] for p in parts)
    assert sorted({c for p in parts for c in p.columns}) == sorted(cols)
    # X, X_ci_lo, X_ci_hi become one interval column; a column nobody fills is left out
    rows = [{"x": 1.0, "x_ci_lo": 0.5, "x_ci_hi": 1.5, "note": ""}]
    (col,) = cells.columns_of(rows, ["x", "x_ci_lo", "x_ci_hi", "note"])
    assert (col.key, col.lo, col.hi) == ("x", "x_ci_lo", "x_ci_hi")


def test_provenance_links_open_mlflow_in_training_mode(tmp_path):
    """The run and experiment links carry the tracking owner's query (grrr_stream.tracking.mlflow_view.runs_page),
    and the sentence after the run id is separated from it (the demo's page read "…aa66f.The links")."""
    from grrr_stream.config import TrackingConfig
    from grrr_stream.report.build import _environment, mlflow_links
    from grrr_stream.tracking.mlflow_view import runs_page

    runs = [{"run_id": "abc123", "experiment_id": "7", "kind": "sweep", "name": "sweep demo", "status": "FINISHED"}]
    m = mlflow_links(TrackingConfig(uri=f"sqlite:///{tmp_path}/mlflow.db", experiment="e"), None, runs)
    page = runs_page("http://127.0.0.1:5000", "7")
    assert m["experiment_link"] == page and "?" in page
    # a run's own page, written out: the experiment's runs page with its view query is not a prefix of it
    assert m["run_link"] == "http://127.0.0.1:5000/#/experiments/7/runs/abc123?workflowType=machine_learning"
    assert m["runs"][0]["link"] == m["run_link"]
    html = _environment().get_template("mlflow_links.html.j2").render(p={"mlflow": m})
    assert "abc123</a>. The links open once the UI runs" in " ".join(html.split())
    assert f'href="{page}"' in html.replace("&amp;", "&")

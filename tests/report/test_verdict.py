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
from grrr_stream.report.verdict import (
    CONSISTENT,
    CONTRADICTS,
    FAILS,
    HOLDS,
    NOT_COMPARABLE,
    TOO_FEW,
    UNRESOLVED,
    verdicts,
)


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
    assert out.startswith("anti-aligned: outside the isotropic band (p < 1e-4)") and "CI [-0.0720, -0.0300]" in out
    # outside the band but the interval crosses 0 (the demo's Fig. 4B): no bare direction
    crossing = cosine_label(_cmp(-0.051, -0.072, 0.048))
    assert "direction not resolved over matrices: CI [-0.0720, 0.0480]" in crossing
    assert "anti-aligned" not in crossing and "p < 1e-4" in crossing
    # aligned, a p above the floor
    assert cosine_label(_cmp(0.05, 0.03, 0.07, p=0.0123, verdict="aligned")).startswith(
        "aligned: outside the isotropic band (p = 0.012)"
    )
    # inside the band
    assert (
        cosine_label(_cmp(0.004, -0.002, 0.009, p=0.41, verdict="indistinguishable"))
        == "inside the isotropic band (p = 0.41), CI over matrices too"
    )
    # inside by the null test, but the CI over matrices is wider than the band (the demo's Fig. 4B): not "inside"
    loose = cosine_label(_cmp(0.004, -0.03, 0.05, p=0.41, verdict="indistinguishable"))
    assert "inside" not in loose and loose.startswith("not resolved") and "4× the band's width (±0.011)" in loose


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


def _diff(t, variant, minus_full, lo, hi, ret=None, rlo=None, rhi=None):
    r = {"transition": t, "variant": variant, "minus_full": minus_full, "minus_full_ci_lo": lo, "minus_full_ci_hi": hi}
    if ret is not None:
        r.update(retention_full_pct=ret, retention_full_ci_lo=rlo, retention_full_ci_hi=rhi)
    return r


def _box(rows, diffs=(), informative=(), trs=(), comps=(), steps=None, group="RL", names=None):
    steps = {d["transition"] for d in diffs} | {t["transition"] for t in trs} if steps is None else steps
    return _by_id(
        verdicts(
            rows,
            list(trs),
            list(comps),
            group_of=lambda r: group,
            steps=steps,
            differences=diffs,
            informative=informative,
            names=names,
        )
    )


def _within(k, lo, hi, n):
    return _rows("within_k", "offnull", "all", k, lo, hi, n, set_name="informative") | {"threshold": 4.3}


def test_a_small_set_can_contradict_a_rate_and_says_how_strongly():
    """1 of 3 within 4.3 points against the paper's 24 of 25: Fisher's exact p = 76/3276 (by hand: 25 successes
    among 28, 3 drawn, at most 1 of them), below 0.05. Each transition is a row under the claim."""
    ts = ["base → sft", "sft → rl", "base → sib"]
    diffs = [
        _diff(ts[0], "offnull", -0.5, -2.5, 1.0),
        _diff(ts[1], "offnull", -9.0, -12.0, -6.0),
        _diff(ts[2], "offnull", -8.0, -11.0, -5.0),
    ]
    info = [{"transition": t, "informative": True} for t in ts]
    v = _box([_within(1, 1, 1, 3)], diffs, info)["offnull-within"]
    assert v.verdict == CONTRADICTS and v.css == "fails"
    assert f"p = {76 / 3276:.2g}" in v.test and "one-sided" in v.test
    assert v.reason == f"33 % vs the paper's 96 %: 63 points lower, p = {76 / 3276:.2g}"
    assert "Fisher's exact test of 1 of 3 against 24 of 25" in v.test
    assert [m.outcome for m in v.members] == [HOLDS, FAILS, FAILS]
    assert v.members[0].name == "OffNull vs Full on base → sft" and v.members[0].value == "−0.5 [−2.5, +1.0] points"
    # 3 of 3: consistent, with the exact interval of the rate (its lower end 0.025^(1/3) = 29 %)
    ok = _box([_within(3, 3, 3, 3)], diffs, info)["offnull-within"]
    assert ok.verdict == CONSISTENT and "exact 95 % CI 29–100 %" in ok.test and "p = 1" in ok.test
    # the count's interval over problems reaches 3: a p below and one above 0.05
    assert _box([_within(1, 1, 3, 3)], diffs, info)["offnull-within"].verdict == UNRESOLVED
    # one transition: even 0 of 1 gives p = 2/26 (24 + 0 successes among 26, the one drawn a failure)
    one = _box([_within(0, 0, 0, 1)], diffs[:1], info[:1])["offnull-within"]
    assert one.verdict == TOO_FEW and f"even 0 of 1 gives p = {2 / 26:.2g}" in one.reason
    # transitions named as the page names them (the plan's parent → child), where a name is given
    named = _box([_within(1, 1, 1, 3)], diffs, info, names={ts[0]: "B → S"})["offnull-within"]
    assert [m.name for m in named.members] == ["OffNull vs Full on B → S"] + [m.name for m in v.members[1:]]
    # a transition that is not informative is not in the set's rows
    assert len(_box([_within(1, 1, 1, 3)], diffs, info[:2])["offnull-within"].members) == 2


def _medians(values, half=1.0):
    return [_diff(f"t{i}", "offnull", 0.0, 0.0, 0.0, x, x - half, x + half) for i, x in enumerate(values)]


def test_a_median_is_tested_by_the_sign_test():
    med = lambda xs: _rows("retention_median_pct", "offnull", "all", float(np.median(xs)), 0.0, 100.0, len(xs))  # noqa: E731
    low = [80.0, 82.0, 85.0, 90.0, 91.0, 93.0]  # all 6 below 99: p = 2/64
    v = _box([med(low)], _medians(low))["offnull-median"]
    assert v.verdict == CONTRADICTS and f"p = {2 / 64:.2g}" in v.test and "0 above 99 %, 6 below" in v.test
    assert "points lower" in v.reason and "distribution-free 95 % CI of the median" in v.test
    assert [m.outcome for m in v.members] == ["below 99 %"] * 6
    # five values: even all below gives 2/32 > 0.05
    few = _box([med(low[:5])], _medians(low[:5]))["offnull-median"]
    assert few.verdict == TOO_FEW and "no distribution-free 95 % CI" in few.test
    assert f"even all 5 on one side give p = {2 / 32:.2g}" in few.reason
    # one transition's interval over problems reaches 99: the test reaches p = 0.0625 as well
    near = low[:5] + [98.0]
    assert _box([med(near)], _medians(near))["offnull-median"].verdict == UNRESOLVED
    balanced = [95.0, 96.0, 97.0, 101.0, 102.0, 103.0]
    assert _box([med(balanced)], _medians(balanced, 0.2))["offnull-median"].verdict == CONSISTENT
    # without per-transition values a median is not tested
    assert _box([med(low)])["offnull-median"].verdict == NOT_COMPARABLE


def test_null_above_diag_and_f_diag_by_their_counts():
    rows = [
        _rows("retention_median_pct", "null", "all", 40.0, 35.0, 45.0, 5),
        _rows("retention_median_pct", "diag", "all", 80.0, 75.0, 85.0, 5),
    ]
    diffs = [_diff(f"t{i}", "null", 0, 0, 0, 40.0 + i, 38.0 + i, 42.0 + i) for i in range(5)]
    diffs += [_diff(f"t{i}", "diag", 0, 0, 0, 80.0, 78.0, 82.0) for i in range(5)]
    v = _box(rows, diffs)["null-above-diag"]
    # null below diag on all 5: one-sided P(B ≤ 0), B ~ Bin(5, 1/2) = 1/32
    assert v.verdict == CONTRADICTS and f"p = {1 / 32:.2g}" in v.test and all(m.outcome == FAILS for m in v.members)
    # equal scores are a tie, left out of the sign test: 4 transitions below and one tie are too few
    tied = diffs[:4] + [_diff("t4", "null", 0, 0, 0, 80.0, 80.0, 80.0), _diff("t4", "diag", 0, 0, 0, 80.0, 80.0, 80.0)]
    tie = _box(rows, tied + diffs[5:9])["null-above-diag"]
    assert tie.members[-1].outcome == "tie (left out)" and "below on 4" in tie.test and tie.verdict == TOO_FEW
    four = [d for d in diffs if d["transition"] != "t4"]
    assert _box(rows, four)["null-above-diag"].verdict == TOO_FEW
    # f_diag ≤ 0.011 on every RL step: 1 of 2 against the paper's 17 of 17 (c is no step: left out)
    trs = [
        {"transition": "a", "method": "GRPO", "f_diag_mean": 0.0005},
        {"transition": "b", "method": "GRPO", "f_diag_mean": 0.02},
        {"transition": "c", "method": "GRPO", "f_diag_mean": 0.5},
    ]
    e = _box([], trs=trs, steps={"a", "b"})["rl-fdiag"]
    assert e.value.startswith("1 of 2 ≤ 0.011") and [m.outcome for m in e.members] == [HOLDS, FAILS]
    # 18 successes among 19, 2 drawn, at most 1 of them a success: 1 − C(18,2)/C(19,2) = 2/19
    assert f"p = {2 / 19:.2g}" in e.test and e.verdict == CONSISTENT
    assert e.reason.startswith("50 % vs the paper's 100 %: 50 points lower")


def test_claims_on_each_pair_and_missing_rows():
    rows = [_rows("retention_median_pct", "offnull", "all", 98.5, 97.0, 100.0, 28)]
    comps = [_cmp(0.002, -0.001, 0.004, p=0.3, verdict="indistinguishable", band=(-0.003, 0.003))]
    v = _box(rows, comps=comps)
    assert [c.id for c in CLAIMS] == list(v)
    assert v["offnull-median"].value == "98.5 % [97.0, 100.0]"
    assert "28 evaluated steps" in v["offnull-median"].set and "problems" in v["offnull-median"].basis
    assert v["diag-median-rl"].verdict == NOT_COMPARABLE and "not evaluated here" in v["diag-median-rl"].reason
    # cosines inside a band narrower than 0.008, CI within ±0.008: holds; the step ratio 0.1 is in 0.004–0.17
    assert v["seq-cos"].verdict == HOLDS and "CI over matrices" in v["seq-cos"].basis
    assert v["rl-step-size"].verdict == HOLDS
    assert v["indep-above"].verdict == NOT_COMPARABLE and "no independent" in v["indep-above"].reason
    # a band wider than the paper's bound: not comparable, and said why
    wide = _box([], comps=[_cmp(0.002, -0.001, 0.004, band=(-0.05, 0.05))])
    assert wide["seq-cos"].verdict == NOT_COMPARABLE and "wider than the paper's bound 0.008" in wide["seq-cos"].reason
    # a median inside ±0.008 whose CI over matrices reaches beyond (the demo's sequential pair): not resolved
    loose = _box([], comps=[_cmp(-0.0024, -0.0467, 0.0355, band=(-0.001, 0.001))])
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
    # people's labels and rounding: the demo's page showed "angle16 left cos2", "within its CI: False", 2.48684e+07
    assert cells.shown(True) == "yes" and cells.shown(False) == "no"
    assert (
        cells.shown(24868400.0) == "2.487e+07"
        and cells.shown(5333.33) == "5333"
        and cells.shown(0.0363942) == "0.03639"
    )
    assert cells.label("angle16_left_cos2_mean") == "top-16 left subspaces of W0, W1: mean cos²"
    assert cells.label("band256_off_mixed_mean") == "off share of ‖ΔW‖² between the top 256 and the rest"
    assert cells.label("frac_unchanged_pooled") == "entries unchanged (pooled)"
    assert cells.label("informative_within_ci") == "informative by less than its CI"
    cols = [f"c{i}" for i in range(30)]
    t = cells.Table("t", "T", "", cols, [("", [[cells.Cell(float(i)) for i in range(30)]])])
    parts = cells.split(t, 2)
    assert len(parts) == 3 and all(len(p.columns) <= cells.MAX_COLUMNS and p.columns[:2] == ["c0", "c1"] for p in parts)
    assert sorted({c for p in parts for c in p.columns}) == sorted(cols)
    # the demo's "Accuracy per benchmark (part 2 of 2)" had rows with no variant, "Outlier channels per transition
    # (part 2)" two columns: every part starts with the named key columns, wherever they stand, and parts are even
    names = ["kind", "transition", "variant"] + [f"b{i}" for i in range(14)]
    t = cells.Table("a", "A", "", names, [("SFT", [[cells.Cell(n) for n in names]])])
    parts = cells.split(t, ("transition", "variant"))
    assert [p.columns[:2] for p in parts] == [["transition", "variant"]] * len(parts)
    assert all(p.groups[0][1][0][1].value == "variant" for p in parts)  # the rows' cells follow their columns
    assert sorted(c for p in parts for c in p.columns[2:]) == sorted(
        n for n in names if n not in ("transition", "variant")
    )
    channels = ["transition", "kind", "method", "group", "component"] + [f"c{i}" for i in range(8)]
    parts = cells.split(cells.Table("c", "C", "", channels, []), ("transition", "group", "component"))
    assert len(parts) == 2 and [len(p.columns) for p in parts] == [8, 8]
    assert all(p.columns[:3] == ["transition", "group", "component"] for p in parts)
    # X, X_ci_lo, X_ci_hi become one interval column; a column nobody fills is left out
    rows = [{"x": 1.0, "x_ci_lo": 0.5, "x_ci_hi": 1.5, "note": ""}]
    (col,) = cells.columns_of(rows, ["x", "x_ci_lo", "x_ci_hi", "note"])
    assert (col.key, col.lo, col.hi) == ("x", "x_ci_lo", "x_ci_hi")


def test_provenance_links_open_mlflow_in_training_mode(tmp_path):
    """The run and experiment links carry the tracking owner's query (grrr_stream.tracking.mlflow_view.runs_page),
    and the sentence after the run id is separated from it (the demo's page read "…aa66f.The links")."""
    from grrr_stream.config import TrackingConfig
    from grrr_stream.report.build import _environment, mlflow_links
    from grrr_stream.tracking.mlflow_view import runs_page, shares_page

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
    # and the transitions side by side: the shares charts' address, linked by name
    assert m["shares_link"] == shares_page("http://127.0.0.1:5000", "7") != page
    assert f'href="{m["shares_link"]}">energy shares per transition</a>' in html.replace("&amp;", "&")


def test_the_sft_rl_channel_table_counts_training_steps():
    """Its n counts each group's training steps (channels_sft_rl.csv), not matrices as in the transitions' tables."""
    from pathlib import Path

    from grrr_stream.report.channels import channel_tables
    from grrr_stream.sweep.kinds.channel_groups import SFT_RL_TABLE
    from grrr_stream.sweep.rows import Report, TableRows

    rep = Report(Path("r"))
    row = {"group": "SFT", "component": "diag", "transitions": "a b", "n": 2, "ratio": 0.9, "ci_lo": 0.8, "ci_hi": 1.0}
    rep.add(TableRows(SFT_RL_TABLE, [row]))
    (table,) = channel_tables(rep)
    assert table.columns[:4] == ["group", "component", "transitions", "training steps"]
    assert "matrices" not in table.columns

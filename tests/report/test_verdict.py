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
from grrr_stream.report.verdict import (
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

"""The report's figures (grrr_stream/plots/) drawn for the page: whole-number ticks on layer axes, one colour per
series (shades of blue for SFT, of red for RL), legends beside the axes (never over the bars), the accuracy figure
as wide as the page at most with each whisker its bar's own interval, cosine labels that never say "inside" of
a CI wider than the band, and titles that name models, not workdir paths. Each
figure is caught before it is saved (matplotlib, Agg), so the test reads what was drawn. Fast."""

from __future__ import annotations

import numpy as np
import pytest

from grrr_stream import plots
from grrr_stream.plots import canvas


@pytest.fixture
def drawn(monkeypatch, tmp_path):
    """The figures plots draws, kept open (saved too, through the real canvas.save's settings)."""
    figs = []

    def keep(fig, path):
        figs.append(fig)
        fig.canvas.draw()
        fig.savefig(path, dpi=plots.DPI, bbox_inches="tight")
        return path

    monkeypatch.setattr(canvas, "save", keep)
    yield figs
    canvas.pyplot().close("all")


def test_layer_axes_tick_whole_numbers(drawn, tmp_path):
    rows = [
        {"layer": layer, "module": m, "f_diag": 0.1, "f_off": 0.5, "f_null": 0.4}
        for layer in (0, 1)
        for m in ("q_proj", "k_proj")
    ]
    plots.energy_fractions_by_layer(rows, tmp_path / "e.png", "base → sft")
    (fig,) = drawn
    for ax in fig.axes:
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_every_series_has_its_own_colour_blue_for_sft_red_for_rl(drawn, tmp_path):
    rows = []
    for tid, group in (("base-to-sft", "SFT"), ("base-to-sib", "SFT"), ("sft-to-rl", "RL"), ("base-to-rl", "RL")):
        for layer in (0, 1):
            rows.append(
                {
                    "transition": tid,
                    "group_sft_rl": group,
                    "step": tid != "base-to-rl",
                    "component": "diag",
                    "layer": layer,
                    "energy_share": 0.1 + layer / 10,
                    "channel_share": 0.05,
                }
            )
    plots.channel_layer_shares(rows, tmp_path / "c.png")
    (fig,) = drawn
    lines = {ln.get_label(): ln.get_color() for ln in fig.axes[0].get_lines() if not ln.get_label().startswith("_")}
    from matplotlib.colors import to_rgba

    colours = {k: tuple(np.round(to_rgba(c), 3)) for k, c in lines.items()}
    assert len(colours) == 4 and len(set(colours.values())) == 4, colours
    for label, (r, _g, b, _a) in colours.items():
        assert (b > r) if "(SFT)" in label else (r > b), (label, colours[label])


def test_legends_sit_beside_the_bars(drawn, tmp_path):
    rows = [
        {
            "transition": f"t{i}",
            "f_null_mean": 0.4,
            **{f"band64_{p}_mean": 0.1 for p, _, _ in plots.BAND_PARTS if p != "null"},
        }
        for i in range(4)
    ]
    plots.band_energy_by_transition(rows, 64, tmp_path / "b.png", lambda part, e: f"band{e}_{part}_mean")
    plots.grouped_fractions(rows, [("f_null_mean", "null"), ("band64_diag_principal_mean", "diag")], tmp_path / "g.png")
    for fig in drawn:
        ax = fig.axes[0]
        renderer = fig.canvas.get_renderer()
        legend, axes_box = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
        assert legend.x0 >= axes_box.x1 - 1, (legend, axes_box)


def test_accuracy_figure_fits_the_page_and_each_whisker_is_its_bars_interval(drawn, tmp_path):
    """The demo's figure drew whiskers up to 6 % on bars at 0 % (the paired CI of variant − full, shifted onto the
    score): each whisker is now the bar's own interval, so a variant at 0 % on every resample has none."""
    rows, want = [], {}
    for t in range(10):
        full = 5.0 if t < 9 else 95.0  # the last panel's bars are the tallest: the shared axis must show them
        for v, score, lo, hi in (("base", 2.0, 0.5, 4.0), ("full", full, full - 2, full + 2), ("diag", 0.0, 0.0, 0.0)):
            rows.append(
                {
                    "transition": f"t{t}",
                    "variant": v,
                    "score": score,
                    "score_ci_lo": lo,
                    "score_ci_hi": hi,
                    "minus_full": score - full,
                    "minus_full_ci_lo": score - full - 6.0,
                    "minus_full_ci_hi": score - full + 3.0,
                }
            )
            want.setdefault(f"t{t}", []).append((lo, hi))
    path = plots.accuracy_bars(rows, tmp_path / "a.png")
    (fig,) = drawn
    assert fig.get_size_inches()[0] <= plots.PAGE_INCHES
    from PIL import Image

    assert Image.open(path).size[0] <= plots.PAGE_INCHES * plots.DPI * 1.05
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        segs = [seg for coll in ax.collections for seg in coll.get_segments()]
        ends = sorted((float(np.min(s[:, 1])), float(np.max(s[:, 1]))) for s in segs)
        assert ends == sorted(want[ax.get_title()])  # the diag bar's [0, 0] is a zero-length whisker
        assert ax.get_ylim()[0] == 0.0 and ax.get_ylim()[1] >= 95.0
        if ax.get_ylabel():
            assert "CI" in ax.get_ylabel() and "of − full" not in ax.get_ylabel()


def test_a_cosine_whose_ci_is_wider_than_the_band_is_never_inside(drawn, tmp_path):
    """The demo's Fig. 4B read "inside the isotropic band (p = 0.41)" beside a CI over matrices 37× the band's
    width, where the verdict box said "not resolved": the label now says not resolved and how much wider."""
    wide = {
        "label": "sft vs incr",
        "kind": "sequential",
        "median_cos_off": -0.0004,
        "ci_lo": -0.0467,
        "ci_hi": 0.0355,
        "null_lo": -0.0011,
        "null_hi": 0.0011,
        "p_value": 0.41,
        "null_draws": 10_000,
        "verdict": "indistinguishable",
    }
    narrow = {**wide, "label": "narrow", "ci_lo": -0.0009, "ci_hi": 0.0008}
    assert "inside" not in plots.cosine_label(wide)
    assert plots.cosine_label(wide).startswith("not resolved") and "37× the band's width (±0.0011)" in (
        plots.cosine_label(wide)
    )
    assert plots.cosine_label(narrow).startswith("inside the isotropic band (p = 0.41)")
    plots.cosine_medians([wide, narrow], tmp_path / "c.png")
    (fig,) = drawn
    texts = [" ".join(t.get_text().split()) for t in fig.axes[0].texts]
    assert not any("inside" in t for t in texts if "not resolved" in t)
    assert sum("inside" in t for t in texts) == 1 and sum(t == "band ±0.0011" for t in texts) == 2


def test_titles_name_models_not_workdir_paths():
    assert plots.model_label("/tmp/pytest-7/grrr_demo/tinychain/seed0/sft") == "sft"
    assert plots.model_label("./models/base/") == "base"
    assert plots.model_label("Qwen/Qwen3-8B-Base") == "Qwen/Qwen3-8B-Base"


def test_a_kinds_titled_table_is_shown_as_it_is_and_the_paper_tables_are_not():
    """The page's one generic section: a kind's table with a title, each cell naming its file, row and column; a
    table without one (laid out by report/tables.py) is not in it."""
    from pathlib import Path

    from grrr_stream.report.tables import kind_tables
    from grrr_stream.sweep.rows import Report, TableRows

    rep = Report(Path("r"))
    rep.add(TableRows("toy_rounds.csv", [{"round": 1, "score": 0.5}, {"round": 2, "score": 0.25}], "Toy", "a note"))
    rep.add(TableRows("transitions.csv", [{"transition": "a"}]))
    rep.add(TableRows("empty.csv", [], "Nothing yet"))
    (table,) = kind_tables(rep)
    assert (table.title, table.note, table.columns) == ("Toy", "a note", ["round", "score"])
    ((_, rows),) = table.groups
    assert [[c.value for c in r] for r in rows] == [[1, 0.5], [2, 0.25]]
    assert rows[1][1].src == "toy_rounds.csv#1:score" and rows[1][1].text == "0.25"

"""Figures of the comparisons between updates: median off-diagonal cosines against the isotropic null
(Figures 4B / 5B) and the updates' norms (Figures 4A / 5A)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from . import canvas
from .labels import cosine_label


def cosine_medians(items: Sequence[dict], path: Path, title: str = "") -> Path:
    """Median off-diagonal cosine per pair with its bootstrap CI over matrices and the null's 2σ envelope
    (the paper's Figures 4B / 5B), one row per pair so that any number of pairs stays legible. ``items``:
    Comparison.summary() dicts plus 'label'. Each pair is labelled, right of the plot, by :func:`cosine_label` (what
    the null test says and whether the CI resolves the direction) and its band's half-width: coloured green / red
    only when the median is outside the band and its CI excludes 0, grey otherwise."""
    from matplotlib.transforms import blended_transform_factory

    plt = canvas.pyplot()
    n = max(len(items), 1)
    fig, ax = plt.subplots(figsize=(canvas.PAGE_INCHES, 1.4 + 0.62 * n))
    beside = blended_transform_factory(ax.transAxes, ax.transData)  # x in the axes' width, y at the pair's row
    ys = np.arange(len(items))[::-1]  # the first pair on top
    for y, it in zip(ys, items):
        _band(ax, y, it)
        label = cosine_label(it)
        resolved = label.startswith(("aligned", "anti-aligned"))
        color = (
            {"aligned": "tab:green", "anti-aligned": "tab:red"}.get(it["verdict"], "tab:gray")
            if resolved
            else "tab:gray"
        )
        med = it["median_cos_off"]
        ax.errorbar(
            [med], [y], xerr=[[med - it["ci_lo"]], [it["ci_hi"] - med]], fmt="o", color=color, capsize=4, label=None
        )
        ax.text(1.02, y, _wrap(label, 60), transform=beside, fontsize=7.5, va="center", ha="left")
    ax.axvline(0.0, color="k", lw=0.8)
    ax.set_yticks(ys)
    ax.set_yticklabels([_wrap(str(it["label"]), 30) for it in items], fontsize=8)
    ax.set_ylim(-0.6, len(items) - 0.4)
    xmax = max([max(it["ci_hi"], it["null_hi"]) for it in items] or [0.0])
    xmin = min([min(it["ci_lo"], it["null_lo"]) for it in items] or [0.0])
    span = (xmax - xmin) or 1.0
    ax.set_xlim(min(xmin, 0.0) - 0.08 * span, max(xmax, 0.0) + 0.08 * span)
    ax.set_xlabel("median cos(P_a^off, P_b^off) over matrices (95 % CI)")
    ax.legend(fontsize=8, loc="lower left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(alpha=0.3, axis="x")
    fig.subplots_adjust(left=0.2, right=0.6)  # the labels' column right of the plot
    if title:
        ax.set_title(title)
    return canvas.save(fig, path)


def _band(ax, y: float, it: dict) -> None:
    """The null's ±2σ band of one pair, outlined, its half-width written below it: next to a CI many times wider
    the band is a few pixels wide."""
    ax.fill_betweenx(
        [y - 0.22, y + 0.22],
        it["null_lo"],
        it["null_hi"],
        facecolor="0.8",
        edgecolor="0.3",
        linewidth=0.8,
        label="isotropic null ±2σ" if y == 0 else None,
    )
    ax.annotate(
        f"band ±{max(abs(it['null_lo']), abs(it['null_hi'])):.2g}",
        (0.5 * (it["null_lo"] + it["null_hi"]), y - 0.24),
        fontsize=7,
        ha="center",
        va="top",
        color="0.3",
    )


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width)) or text


def norm_bars(items: Sequence[dict], path: Path, title: str = "") -> Path:
    """Frobenius norms of the updates (Figure 4A: ΔW_SFT, ΔW_incr, ΔW_cum with ‖ΔW_cum‖ = 1;
    Figure 5A: the two independent updates normalised to the larger, with their ratio)."""
    plt = canvas.pyplot()
    fig, axes = plt.subplots(1, max(len(items), 1), figsize=(3.2 * max(len(items), 1), 3.6), squeeze=False)
    for ax, it in zip(axes[0], items):
        if it["kind"] == "sequential":  # stepwise, as results spell it (stats/comparisons.py, STEPWISE)
            names, vals = ["ΔW_SFT", "ΔW_incr", "ΔW_cum"], [it["norm_sft"], it["norm_incr"], it["norm_cum"]]
            ax.set_ylabel("‖ΔW‖_F / ‖ΔW_cum‖_F")
        else:
            top = max(it["norm_a"], it["norm_b"]) or 1.0
            names, vals = ["ΔW_a", "ΔW_b"], [it["norm_a"] / top, it["norm_b"] / top]
            ax.set_ylabel("‖ΔW‖_F / larger")
            ax.set_title(f"ratio {it['norm_ratio']:.3f}", fontsize=9)
        ax.bar(names, vals, color=["tab:blue", "tab:orange", "tab:gray"][: len(vals)])
        ax.set_xlabel(it["label"], fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    if title:
        fig.suptitle(title)
    return canvas.save(fig, path)

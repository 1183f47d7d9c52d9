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
    (the paper's Figures 4B / 5B). ``items``: Comparison.summary() dicts plus 'label'. Each pair is labelled
    by :func:`cosine_label` (what the null test says and whether the CI resolves the direction): coloured green /
    red only when the median is outside the band and its CI excludes 0, grey otherwise."""
    plt = canvas.pyplot()
    fig, ax = plt.subplots(figsize=(min(canvas.PAGE_INCHES, max(5.0, 2.6 * len(items) + 2)), 4.4))
    xs = np.arange(len(items))
    for x, it in zip(xs, items):
        _band(ax, x, it)
        label = cosine_label(it)
        resolved = label.startswith(("aligned", "anti-aligned"))
        color = (
            {"aligned": "tab:green", "anti-aligned": "tab:red"}.get(it["verdict"], "tab:gray")
            if resolved
            else "tab:gray"
        )
        ax.errorbar(
            [x],
            [it["median_cos_off"]],
            yerr=[[it["median_cos_off"] - it["ci_lo"]], [it["ci_hi"] - it["median_cos_off"]]],
            fmt="o",
            color=color,
            capsize=4,
            label=None,
        )
        ax.annotate(
            _wrap(label, 34),
            (x, max(it["ci_hi"], it["null_hi"])),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            va="bottom",
            fontsize=7.5,
        )
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xticks(xs)
    ax.set_xticklabels([_wrap(str(it["label"]), 24) for it in items], fontsize=8)
    ax.set_xlim(-0.7, len(items) - 0.3)
    ymax = max([max(it["ci_hi"], it["null_hi"]) for it in items] or [0.0])
    ymin = min([min(it["ci_lo"], it["null_lo"]) for it in items] or [0.0])
    span = (ymax - ymin) or 1.0
    ax.set_ylim(ymin - 0.1 * span, ymax + 0.6 * span)  # room above for the labels
    ax.set_ylabel("median cos(P_a^off, P_b^off)\nover matrices (95 % CI)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3, axis="y")
    if title:
        ax.set_title(title)
    return canvas.save(fig, path)


def _band(ax, x: float, it: dict) -> None:
    """The null's ±2σ band of one pair, outlined and labelled with its half-width: next to a CI many times wider
    the band is a few pixels tall."""
    ax.fill_between(
        [x - 0.22, x + 0.22],
        it["null_lo"],
        it["null_hi"],
        facecolor="0.8",
        edgecolor="0.3",
        linewidth=0.8,
        label="isotropic null ±2σ" if x == 0 else None,
    )
    ax.annotate(
        f"band ±{max(abs(it['null_lo']), abs(it['null_hi'])):.2g}",
        (x + 0.24, 0.5 * (it["null_lo"] + it["null_hi"])),
        fontsize=7,
        va="center",
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
        if it["kind"] == "sequential":
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

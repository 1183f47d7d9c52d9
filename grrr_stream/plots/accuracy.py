"""The evaluations' figure: each variant's score per transition with the paired interval of its difference to
full."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from . import canvas


def accuracy_bars(rows: Sequence[dict], path: Path, title: str = "", per_row: int = 4) -> Path:
    """Per evaluated transition, each variant's score (bars, %) with its own bootstrap 95 % CI over problems
    (``rows``: the report's differences table: transition, variant, score, score_ci_lo, score_ci_hi; a row without
    them gets no whisker). At most ``per_row`` transitions side by side (the figure is as wide as the page, so its
    text stays readable)."""
    plt = canvas.pyplot()
    groups = list(dict.fromkeys(r["transition"] for r in rows))
    cols = max(1, min(per_row, len(groups)))
    nrows = -(-len(groups) // cols)
    fig, axes = plt.subplots(
        nrows, cols, figsize=(min(canvas.PAGE_INCHES, 3.0 * cols + 1.0), 3.2 * nrows), squeeze=False, sharey=True
    )
    for ax in axes.flat[len(groups) :]:
        ax.set_visible(False)
    top = 0.0
    for ax, g in zip(axes.flat, groups):
        mine = [r for r in rows if r["transition"] == g]
        xs = np.arange(len(mine))
        score = np.array([float(r["score"]) for r in mine])
        ax.bar(xs, score, color=["tab:gray" if r["variant"] in ("full", "base") else "tab:blue" for r in mine])
        # whiskers: the bar's own interval (its score over resampled problems), never another quantity's
        have = [i for i, r in enumerate(mine) if _finite(r.get("score_ci_lo"), r.get("score_ci_hi"))]
        if have:
            lo_end = np.array([float(mine[i]["score_ci_lo"]) for i in have])
            hi_end = np.array([float(mine[i]["score_ci_hi"]) for i in have])
            ax.errorbar(
                xs[have],
                score[have],
                yerr=[np.maximum(score[have] - lo_end, 0), np.maximum(hi_end - score[have], 0)],
                fmt="none",
                color="k",
                capsize=3,
            )
        ax.set_xticks(xs)
        ax.set_xticklabels([r["variant"] for r in mine], rotation=45, ha="right", fontsize=8)
        ax.set_title(g, fontsize=9)
        ax.grid(alpha=0.3, axis="y")
        top = max([top, *score, *(hi_end if have else [])])
    # the panels share y: set once, after every panel's bars and whiskers are known (0 to the highest end)
    axes[0][0].set_ylim(0, min(105.0, 1.06 * top) if top > 0 else 1.0)
    for row in axes:
        row[0].set_ylabel("score (%)\nwhiskers: its 95 % CI over problems")
    if title:
        fig.suptitle(title)
    return canvas.save(fig, path)


def _finite(*xs) -> bool:
    try:
        return all(np.isfinite(float(x)) for x in xs)
    except (TypeError, ValueError):
        return False

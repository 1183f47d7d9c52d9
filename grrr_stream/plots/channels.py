"""The residual channels' figure: per layer, the share of each component's update energy on W0's outlier
channels, one shade per transition (blues SFT, reds RL)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from . import canvas

SFT_RL_COLORS = {"SFT": "#1f77b4", "RL": "#d62728"}
SFT_RL_MAPS = {"SFT": "Blues", "RL": "Reds"}  # one shade per transition within its group


def _group_shades(groups: dict[str, str]) -> dict[str, object]:
    """transition → colour: blues for SFT, reds for RL, greys for the rest, a distinct shade per transition."""
    plt = canvas.pyplot()
    out: dict[str, object] = {}
    by: dict[str, list[str]] = {}
    for tid, g in groups.items():
        by.setdefault(g if g in SFT_RL_MAPS else "", []).append(tid)
    for g, tids in by.items():
        cmap = plt.get_cmap(SFT_RL_MAPS.get(g, "Greys"))
        for k, tid in enumerate(tids):
            out[tid] = (
                cmap(0.85 - 0.5 * k / max(len(tids) - 1, 1)) if len(tids) > 1 else (SFT_RL_COLORS.get(g) or "grey")
            )
    return out


def channel_layer_shares(rows: Sequence[dict], path: Path, title: str = "") -> Path:
    """Per decoder layer, the share of each component's update energy on W0's outlier channels, one line per
    transition (shades of blue SFT, of red RL, grey other, one shade per transition; dashed: not a training step,
    e.g. base → grandchild), the
    channels' own share dotted (``rows``:
    the sweep report's channel_layers table)."""
    plt = canvas.pyplot()
    comps = [c for c in ("diag", "off", "null") if any(r["component"] == c for r in rows)]
    fig, axes = plt.subplots(1, len(comps), figsize=(4.2 * len(comps), 3.6), squeeze=False, sharey=True)
    shades = _group_shades({r["transition"]: r.get("group_sft_rl") or "" for r in rows})
    for ax, comp in zip(axes[0], comps):
        mine = [r for r in rows if r["component"] == comp]
        for tid in dict.fromkeys(r["transition"] for r in mine):
            pts = sorted(
                (int(r["layer"]), float(r["energy_share"]) if r["energy_share"] is not None else np.nan)
                for r in mine
                if r["transition"] == tid
            )
            first = next(r for r in mine if r["transition"] == tid)
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                marker="o",
                ms=3,
                color=shades[tid],
                ls="-" if first.get("step") in (True, "True") else "--",
                label=f"{tid} ({first.get('group_sft_rl') or 'no method'})",
            )
        shares = sorted({float(r["channel_share"]) for r in mine})
        for s in shares:
            ax.axhline(s, color="black", ls=":", lw=0.8)
        ax.set_title(f"{comp}: share on outlier channels")
        ax.set_xlabel("layer")
        canvas.integer_ticks(ax)
    axes[0][0].set_ylabel("share of the component's ‖ΔW‖²")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    if title:
        fig.suptitle(title)
    return canvas.save(fig, path)

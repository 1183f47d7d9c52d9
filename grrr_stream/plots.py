"""Matplotlib figures, written as PNG files (Agg backend, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def energy_fractions_by_layer(rows: Sequence[dict], path: Path, title: str = "") -> Path:
    """Three panels (f_diag, f_off, f_null) against layer, one line per module."""
    plt = _plt()
    modules = list(dict.fromkeys(r["module"] for r in rows))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharex=True)
    for ax, key, label in zip(axes, ("f_diag", "f_off", "f_null"),
                              ("diagonal (reshaping)", "off-diagonal (rotation)", "null (routing)")):
        for mod in modules:
            pts = sorted((r["layer"], r[key]) for r in rows if r["module"] == mod)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=mod)
        ax.set_title(f"{key}: {label}")
        ax.set_xlabel("layer")
        ax.set_ylabel("fraction of ‖ΔW‖²")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=8, loc="best")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def normalized_spectra(spectra: Sequence[tuple[str, np.ndarray, np.ndarray]], path: Path, title: str = "") -> Path:
    """σ_i/σ_1 of W0 and W1 against i/r for a few matrices (the paper's Figure 1, left)."""
    plt = _plt()
    n = max(len(spectra), 1)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.8), squeeze=False)
    for ax, (name, s0, s1) in zip(axes[0], spectra):
        x = np.arange(1, len(s0) + 1) / len(s0)
        ax.semilogy(x, np.maximum(s0 / s0[0], 1e-12), label="W0 (base)")
        ax.semilogy(x, np.maximum(s1 / s1[0], 1e-12), "--", label="W1 (post)")
        ax.set_title(name.replace("model.layers.", "L").replace(".weight", ""), fontsize=9)
        ax.set_xlabel("i / r")
        ax.set_ylabel("σ_i / σ_1")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)

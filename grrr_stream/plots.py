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


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return Path(path)


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
    return _save(fig, path)


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
    return _save(fig, path)


def cosine_medians(items: Sequence[dict], path: Path, title: str = "") -> Path:
    """Median off-diagonal cosine per pair with its bootstrap CI and the null's 2σ envelope
    (the paper's Figures 4B / 5B). ``items``: Comparison.summary() dicts plus 'label'."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(items) + 2), 3.8))
    xs = np.arange(len(items))
    for x, it in zip(xs, items):
        ax.fill_between([x - 0.3, x + 0.3], it["null_lo"], it["null_hi"], color="0.85",
                        label="isotropic null ±2σ" if x == 0 else None)
        color = {"aligned": "tab:green", "anti-aligned": "tab:red"}.get(it["verdict"], "tab:gray")
        ax.errorbar([x], [it["median_cos_off"]], yerr=[[it["median_cos_off"] - it["ci_lo"]],
                                                      [it["ci_hi"] - it["median_cos_off"]]],
                    fmt="o", color=color, capsize=4, label=None)
        ax.annotate(f"p={it['p_value']:.2g}", (x, it["ci_hi"]), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize=8)
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xticks(xs)
    ax.set_xticklabels([it["label"] for it in items], rotation=15, ha="right", fontsize=8)
    ax.set_ylabel("median cos(P_a^off, P_b^off)\nover matrices (95 % CI)")
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3, axis="y")
    if title:
        ax.set_title(title)
    return _save(fig, path)


def norm_bars(items: Sequence[dict], path: Path, title: str = "") -> Path:
    """Frobenius norms of the updates (Figure 4A: ΔW_SFT, ΔW_incr, ΔW_cum with ‖ΔW_cum‖ = 1;
    Figure 5A: the two independent updates normalised to the larger, with their ratio)."""
    plt = _plt()
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
    return _save(fig, path)


BAND_PARTS = (("diag_principal", "diag, principal", "#1f4e79"), ("diag_tail", "diag, tail", "#8fb3d9"),
              ("off_principal", "off, principal×principal", "#7f2704"), ("off_mixed", "off, mixed", "#d94801"),
              ("off_tail", "off, tail×tail", "#fdae6b"), ("null", "null", "#999999"))


def band_energy_by_module(rows: Sequence[dict], edges: Sequence[int], path: Path, title: str = "") -> Path:
    """Mean share of ‖ΔW‖² per module, split by principal band (one panel per edge k): diag and off
    of P inside the top-k block, across it (mixed) and outside it (tail), and the null part."""
    plt = _plt()
    modules = list(dict.fromkeys(r["module"] for r in rows))
    fig, axes = plt.subplots(1, len(edges), figsize=(4.6 * len(edges), 3.8), squeeze=False, sharey=True)
    for ax, k in zip(axes[0], edges):
        bottom = np.zeros(len(modules))
        for part, label, color in BAND_PARTS:
            key = "f_null" if part == "null" else f"band{k}_{part}"
            vals = np.array([np.mean([r[key] for r in rows if r["module"] == m and key in r] or [0.0])
                             for m in modules])
            ax.bar(modules, vals, bottom=bottom, color=color, label=label)
            bottom += vals
        ax.set_title(f"top-{k} band")
        ax.set_ylabel("mean fraction of ‖ΔW‖²")
        ax.tick_params(axis="x", rotation=60, labelsize=8)
        ax.set_ylim(0, 1.02)
    axes[0][-1].legend(fontsize=7, loc="upper right")
    if title:
        fig.suptitle(title)
    return _save(fig, path)


def band_energy_by_transition(rows: Sequence[dict], edge: int, path: Path, title: str = "") -> Path:
    """Mean share of ‖ΔW‖² per transition split by the top-``edge`` principal band (sweep report);
    ``rows``: the report's transitions table (columns ``band{edge}_<part>_mean`` and ``f_null_mean``)."""
    plt = _plt()
    labels = [r["transition"] for r in rows]
    fig, ax = plt.subplots(figsize=(1.2 * len(labels) + 3, 4.2))
    bottom = np.zeros(len(labels))
    for part, label, color in BAND_PARTS:
        key = "f_null_mean" if part == "null" else f"band{edge}_{part}_mean"
        vals = np.array([float(r.get(key) or 0.0) for r in rows])
        ax.bar(labels, vals, bottom=bottom, color=color, label=label)
        bottom += vals
    ax.set_ylabel("mean fraction of ‖ΔW‖²")
    ax.set_title(title or f"energy by the top-{edge} principal band of W0")
    ax.tick_params(axis="x", rotation=30, labelsize=8)
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7, loc="upper right")
    return _save(fig, path)

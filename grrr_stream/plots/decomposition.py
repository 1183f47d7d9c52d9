"""Figures of the decomposition's results: one transition's energy fractions by layer, spectra, principal-band
energies and layer × module heatmaps, and the sweep's bars per transition."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from . import canvas


def energy_fractions_by_layer(rows: Sequence[dict], path: Path, title: str = "") -> Path:
    """Three panels (f_diag, f_off, f_null) against layer, one line per module."""
    plt = canvas.pyplot()
    modules = list(dict.fromkeys(r["module"] for r in rows))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharex=True)
    for ax, key, label in zip(
        axes, ("f_diag", "f_off", "f_null"), ("diagonal (reshaping)", "off-diagonal (rotation)", "null (routing)")
    ):
        for mod in modules:
            pts = sorted((r["layer"], r[key]) for r in rows if r["module"] == mod)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=mod)
        ax.set_title(f"{key}: {label}")
        ax.set_xlabel("layer")
        ax.set_ylabel("fraction of ‖ΔW‖²")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        canvas.integer_ticks(ax)
    axes[-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    if title:
        fig.suptitle(title)
    return canvas.save(fig, path)


def normalized_spectra(spectra: Sequence[tuple[str, np.ndarray, np.ndarray]], path: Path, title: str = "") -> Path:
    """σ_i/σ_1 of W0 and W1 against i/r for a few matrices (the paper's Figure 1, left)."""
    plt = canvas.pyplot()
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
    return canvas.save(fig, path)


BAND_PARTS = (
    ("diag_principal", "diag, principal", "#1f4e79"),
    ("diag_tail", "diag, tail", "#8fb3d9"),
    ("off_principal", "off, principal×principal", "#7f2704"),
    ("off_mixed", "off, mixed", "#d94801"),
    ("off_tail", "off, tail×tail", "#fdae6b"),
    ("null", "null", "#999999"),
)


def band_energy_by_module(
    rows: Sequence[dict], edges: Sequence[int], path: Path, key: Callable[[str, int], str], title: str = ""
) -> Path:
    """Mean share of ‖ΔW‖² per module, split by principal band (one panel per edge k): diag and off
    of P inside the top-k block, across it (mixed) and outside it (tail), and the null part. ``key(part, k)``:
    the rows' column of a part (BAND_PARTS' names) at edge k."""
    plt = canvas.pyplot()
    modules = list(dict.fromkeys(r["module"] for r in rows))
    fig, axes = plt.subplots(1, len(edges), figsize=(4.6 * len(edges), 3.8), squeeze=False, sharey=True)
    for ax, k in zip(axes[0], edges):
        bottom = np.zeros(len(modules))
        for part, label, color in BAND_PARTS:
            col = key(part, k)
            vals = np.array(
                [np.mean([r[col] for r in rows if r["module"] == m and col in r] or [0.0]) for m in modules]
            )
            ax.bar(modules, vals, bottom=bottom, color=color, label=label)
            bottom += vals
        ax.set_title(f"top-{k} band")
        ax.set_ylabel("mean fraction of ‖ΔW‖²")
        ax.tick_params(axis="x", rotation=60, labelsize=8)
        ax.set_ylim(0, 1.02)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    if title:
        fig.suptitle(title)
    return canvas.save(fig, path)


def band_energy_by_transition(
    rows: Sequence[dict], edge: int, path: Path, key: Callable[[str, int], str], title: str = ""
) -> Path:
    """Mean share of ‖ΔW‖² per transition split by the top-``edge`` principal band (sweep report);
    ``rows``: the report's transitions table; ``key(part, edge)``: its column of a part (BAND_PARTS' names)."""
    plt = canvas.pyplot()
    labels = [r["transition"] for r in rows]
    fig, ax = plt.subplots(figsize=(1.2 * len(labels) + 3, 4.2))
    bottom = np.zeros(len(labels))
    for part, label, color in BAND_PARTS:
        vals = np.array([float(r.get(key(part, edge)) or 0.0) for r in rows])
        ax.bar(labels, vals, bottom=bottom, color=color, label=label)
        bottom += vals
    ax.set_ylabel("mean fraction of ‖ΔW‖²")
    ax.set_title(title or f"energy by the top-{edge} principal band of W0")
    ax.tick_params(axis="x", rotation=30, labelsize=8)
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, never over them
    return canvas.save(fig, path)


HEATMAP_KEYS = (
    ("f_diag", "f_diag (reshaping)", (0.0, 1.0)),
    ("f_off", "f_off (rotation)", (0.0, 1.0)),
    ("f_null", "f_null (routing)", (0.0, 1.0)),
    ("r_delta", "r_Δ = ‖ΔW‖/‖W0‖", None),
)


def layer_module_heatmaps(rows: Sequence[dict], path: Path, title: str = "") -> Path:
    """One transition's per-matrix f_diag, f_off, f_null and r_Δ as layer × module heatmaps (``rows``: its
    store's metrics.csv; matrices of experts are averaged per layer and module)."""
    plt = canvas.pyplot()
    modules = list(dict.fromkeys(r["module"] for r in rows))
    layers = sorted({int(r["layer"]) for r in rows})
    fig, axes = plt.subplots(1, 4, figsize=(3.2 * 4 + 1, 0.28 * len(layers) + 2.4), squeeze=False)
    for ax, (key, label, limits) in zip(axes[0], HEATMAP_KEYS):
        grid = np.full((len(layers), len(modules)), np.nan)
        for i, layer in enumerate(layers):
            for j, m in enumerate(modules):
                vals = [
                    float(r[key])
                    for r in rows
                    if int(r["layer"]) == layer and r["module"] == m and r.get(key) is not None
                ]
                if vals:
                    grid[i, j] = np.mean(vals)
        lo, hi = limits or (np.nanmin(grid), np.nanmax(grid))
        im = ax.imshow(grid, aspect="auto", origin="lower", cmap="viridis", vmin=lo, vmax=hi, interpolation="nearest")
        ax.set_title(label, fontsize=9)
        ax.set_xticks(range(len(modules)))
        ax.set_xticklabels(modules, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(len(layers)))
        ax.set_yticklabels(layers, fontsize=7)
        ax.set_ylabel("layer")
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    if title:
        fig.suptitle(title)
    return canvas.save(fig, path)


def grouped_fractions(rows: Sequence[dict], columns: Sequence[tuple[str, str]], path: Path, title: str = "") -> Path:
    """Fractions in [0, 1] per transition as grouped bars (``columns``: (key, legend label) pairs; a missing
    value is left out)."""
    plt = canvas.pyplot()
    labels = [r["transition"] for r in rows]
    width = 0.8 / max(len(columns), 1)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(labels) + 3), 3.8))
    for k, (key, label) in enumerate(columns):
        xs = [i + (k - (len(columns) - 1) / 2) * width for i, r in enumerate(rows) if r.get(key) is not None]
        ax.bar(xs, [float(r[key]) for r in rows if r.get(key) is not None], width, label=label)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("fraction")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, never over them
    if title:
        ax.set_title(title)
    return canvas.save(fig, path)

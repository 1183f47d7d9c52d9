"""Matplotlib figures, written as PNG files (Agg backend, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


DPI = 110
PAGE_INCHES = 12.0  # the report's column is ~1,340 px wide: a figure this wide at DPI is shown at its own size


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    # "tight" keeps legends placed outside the axes inside the image
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    _plt().close(fig)
    return Path(path)


def _integer_ticks(ax, axis: str = "x") -> None:
    """Layer (and other index) axes: ticks on whole numbers only."""
    from matplotlib.ticker import MaxNLocator

    (ax.xaxis if axis == "x" else ax.yaxis).set_major_locator(MaxNLocator(integer=True))


def model_label(source: object) -> str:
    """A model as a figure's title names it: a local checkpoint by its folder's name (never the absolute path,
    which says where the workdir is, not what the model is), a Hub id as it is."""
    text = str(source)
    if text.startswith(("/", "./", "../", "~")) or "\\" in text:
        parts = [p for p in text.replace("\\", "/").split("/") if p]
        return parts[-1] if parts else text
    return text


def p_text(p: float, draws: Optional[int] = None) -> str:
    """A Monte Carlo p-value as people read it: at the floor of ``draws`` draws (no draw as extreme as the
    observation: p = 1/(draws + 1)) 'p < 1e-4' for 10,000 draws, else 'p = 0.031'."""
    if p is None or p != p:
        return "p —"
    if draws and p <= 1.0 / (draws + 1) * (1 + 1e-9):
        return "p < " + f"{1.0 / draws:.0e}".replace("e-0", "e-").replace("e+0", "e")
    return f"p = {p:.2g}"


def cosine_label(item: dict) -> str:
    """What a comparison's median off-diagonal cosine shows, with what each part rests on: the null test
    (outside or inside the matched isotropic band, its p over null draws) and, when outside, whether the
    interval over matrices resolves the direction. A bare 'anti-aligned' is never printed when that interval
    crosses 0 (the two questions differ: the null test asks whether the median is isotropic, the interval how
    it varies over matrices)."""
    med, lo, hi = item.get("median_cos_off"), item.get("ci_lo"), item.get("ci_hi")
    p = p_text(item.get("p_value"), item.get("null_draws"))
    nlo, nhi = item.get("null_lo"), item.get("null_hi")
    ci = f"CI [{lo:.3g}, {hi:.3g}]" if lo is not None and hi is not None else "no CI"
    outside = item.get("verdict") in ("aligned", "anti-aligned") or (
        nlo is not None and nhi is not None and med is not None and not nlo <= med <= nhi
    )
    if med is None or med != med:
        return "no cosine"
    if not outside:
        return f"inside the isotropic band ({p})"
    if lo is not None and hi is not None and lo <= 0.0 <= hi:
        return f"outside the isotropic band ({p}); direction not resolved over matrices: {ci}"
    direction = "aligned" if med > 0 else "anti-aligned"
    return f"{direction}: outside the isotropic band ({p}), {ci}"


def energy_fractions_by_layer(rows: Sequence[dict], path: Path, title: str = "") -> Path:
    """Three panels (f_diag, f_off, f_null) against layer, one line per module."""
    plt = _plt()
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
        _integer_ticks(ax)
    axes[-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
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
    """Median off-diagonal cosine per pair with its bootstrap CI over matrices and the null's 2σ envelope
    (the paper's Figures 4B / 5B). ``items``: Comparison.summary() dicts plus 'label'. Each pair is labelled
    by :func:`cosine_label` (what the null test says and whether the CI resolves the direction): coloured green /
    red only when the median is outside the band and its CI excludes 0, grey otherwise."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(min(PAGE_INCHES, max(5.0, 2.6 * len(items) + 2)), 4.4))
    xs = np.arange(len(items))
    for x, it in zip(xs, items):
        ax.fill_between(
            [x - 0.3, x + 0.3],
            it["null_lo"],
            it["null_hi"],
            color="0.85",
            label="isotropic null ±2σ" if x == 0 else None,
        )
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
    return _save(fig, path)


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width)) or text


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


BAND_PARTS = (
    ("diag_principal", "diag, principal", "#1f4e79"),
    ("diag_tail", "diag, tail", "#8fb3d9"),
    ("off_principal", "off, principal×principal", "#7f2704"),
    ("off_mixed", "off, mixed", "#d94801"),
    ("off_tail", "off, tail×tail", "#fdae6b"),
    ("null", "null", "#999999"),
)


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
            vals = np.array(
                [np.mean([r[key] for r in rows if r["module"] == m and key in r] or [0.0]) for m in modules]
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
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, never over them
    return _save(fig, path)


HEATMAP_KEYS = (
    ("f_diag", "f_diag (reshaping)", (0.0, 1.0)),
    ("f_off", "f_off (rotation)", (0.0, 1.0)),
    ("f_null", "f_null (routing)", (0.0, 1.0)),
    ("r_delta", "r_Δ = ‖ΔW‖/‖W0‖", None),
)


def layer_module_heatmaps(rows: Sequence[dict], path: Path, title: str = "") -> Path:
    """One transition's per-matrix f_diag, f_off, f_null and r_Δ as layer × module heatmaps (``rows``: its
    store's metrics.csv; matrices of experts are averaged per layer and module)."""
    plt = _plt()
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
    return _save(fig, path)


def accuracy_bars(rows: Sequence[dict], path: Path, title: str = "", per_row: int = 4) -> Path:
    """Per evaluated transition, each variant's score (bars, %) with the paired bootstrap 95 % CI of its
    difference to full drawn around the score (``rows``: the report's differences table: transition,
    variant, score, minus_full, minus_full_ci_lo, minus_full_ci_hi). At most ``per_row`` transitions side by
    side (the figure is as wide as the page, so its text stays readable), whiskers clipped to 0–100 %."""
    plt = _plt()
    groups = list(dict.fromkeys(r["transition"] for r in rows))
    cols = max(1, min(per_row, len(groups)))
    nrows = -(-len(groups) // cols)
    fig, axes = plt.subplots(
        nrows, cols, figsize=(min(PAGE_INCHES, 3.0 * cols + 1.0), 3.2 * nrows), squeeze=False, sharey=True
    )
    for ax in axes.flat[len(groups) :]:
        ax.set_visible(False)
    top = 0.0
    for ax, g in zip(axes.flat, groups):
        mine = [r for r in rows if r["transition"] == g]
        xs = np.arange(len(mine))
        score = np.array([float(r["score"]) for r in mine])
        ax.bar(xs, score, color=["tab:gray" if r["variant"] in ("full", "base") else "tab:blue" for r in mine])
        have = [
            i
            for i, r in enumerate(mine)
            if r.get("minus_full_ci_lo") is not None and r.get("minus_full_ci_hi") is not None
        ]
        if have:
            d = np.array([float(mine[i]["minus_full"]) for i in have])
            lo_end = np.clip(score[have] - d + np.array([float(mine[i]["minus_full_ci_lo"]) for i in have]), 0, 100)
            hi_end = np.clip(score[have] - d + np.array([float(mine[i]["minus_full_ci_hi"]) for i in have]), 0, 100)
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
        row[0].set_ylabel("score (%)\nwhiskers: paired 95 % CI of − full")
    if title:
        fig.suptitle(title)
    return _save(fig, path)


def grouped_fractions(rows: Sequence[dict], columns: Sequence[tuple[str, str]], path: Path, title: str = "") -> Path:
    """Fractions in [0, 1] per transition as grouped bars (``columns``: (key, legend label) pairs; a missing
    value is left out)."""
    plt = _plt()
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
    return _save(fig, path)


SFT_RL_COLORS = {"SFT": "#1f77b4", "RL": "#d62728"}
SFT_RL_MAPS = {"SFT": "Blues", "RL": "Reds"}  # one shade per transition within its group


def _group_shades(groups: dict[str, str]) -> dict[str, object]:
    """transition → colour: blues for SFT, reds for RL, greys for the rest, a distinct shade per transition."""
    plt = _plt()
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
    plt = _plt()
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
        _integer_ticks(ax)
    axes[0][0].set_ylabel("share of the component's ‖ΔW‖²")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    if title:
        fig.suptitle(title)
    return _save(fig, path)

"""Runners of the residual-channel units: a model's outlier channels, a transition's energy on them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import StoreError
from .plan_channels import channels_file
from .units import ChannelsParams, ChannelStatsParams, Unit

if TYPE_CHECKING:
    from .runners import RunContext

STATS_FILE = "channel_stats.csv"    # written last: the channel-stats unit's completion marker
LAYERS_FILE = "channel_layers.csv"


def run_channels_unit(u: Unit, ctx: "RunContext") -> dict:
    """``grrr-stream channels`` on one model, into the unit's folder (channels.json written last)."""
    from ..channels.analysis import run_channels
    from ..channels.rule import OutlierRule
    from ..checkpoints.reader import resolve_source

    p: ChannelsParams = u.params
    try:  # transformers' "sequence longer than the model maximum": the text is cut into windows on purpose
        from transformers.utils import logging as tf_logging

        tf_logging.set_verbosity_error()
    except ImportError:
        pass
    folder = resolve_source(p.source, p.revision)
    result = run_channels(folder, Path(u.out), rule=OutlierRule(threshold=float(p.threshold), aggregate=p.aggregate),
                          sequences=p.sequences, seq_len=p.seq_len, batch_size=p.batch_size,
                          max_memory=p.max_memory, do_ablate=p.ablation_seeds is not None,
                          ablation_seeds=p.ablation_seeds or (), progress=ctx.progress)
    r = result["base"]
    out = {"channels": len(r["channels"]), "hidden": r["hidden_size"], "fraction": r["fraction"],
           "jaccard_proxy": r["jaccard"], "perplexity": r["perplexity"]}
    if "ablation" in r:
        out["perplexity_outliers_zeroed"] = r["ablation"]["perplexity_outliers_zeroed"]
        out["perplexity_random_median"] = r["ablation"]["perplexity_random_median"]
    return out


def read_channel_set(unit_out: str | Path) -> dict:
    """The model record of a channels unit's channels.json (``channels``, ``hidden_size``, ...)."""
    return json.loads(channels_file(unit_out).read_text())["base"]


def stats_rows(energies: np.ndarray, records: list[dict], channels: np.ndarray, *, resamples: int,
               seed: int) -> list[dict]:
    """:func:`grrr_stream.channels.enrichment.enrichment`'s rows, plus component ``total`` (the whole update:
    the three components' energies summed per channel, with the same null draws and resamples); with no
    outlier channel, rows with zero shares and no ratio (the rule found none: nothing to enrich)."""
    from ..channels.enrichment import enrichment, groups_of
    from ..geometry.channel_energy import COMPONENTS

    e = np.asarray(energies, dtype=np.float64)
    total = np.repeat(e.sum(axis=2, keepdims=True), 3, axis=2)  # one component's rows are the total's
    if channels.size:
        rows = enrichment(e, records, channels, draws=resamples, seed=seed)
        whole = [{**r, "component": "total"} for r in enrichment(total, records, channels, draws=resamples,
                                                                  seed=seed) if r["component"] == COMPONENTS[0]]
        return _interleave(rows, whole)
    H, nan = e.shape[1], float("nan")
    return [{"group": g, "component": c, "matrices": len(idx), "channels": 0, "hidden": H, "channel_share": 0.0,
             "energy_share": 0.0, "ratio": nan, "ci_lo": nan, "ci_hi": nan, "null_q975": nan, "p_value": nan,
             "energy": float((total if c == "total" else e)[idx][:, :, 0 if c == "total" else k].sum()),
             "draws": resamples, "seed": seed}
            for g, idx in groups_of(records).items() for k, c in enumerate((*COMPONENTS, "total"))]


def _interleave(rows: list[dict], whole: list[dict]) -> list[dict]:
    """Each group's total row after its three component rows."""
    by_group = {r["group"]: r for r in whole}
    out = []
    for i, r in enumerate(rows):
        out.append(r)
        if i + 1 == len(rows) or rows[i + 1]["group"] != r["group"]:
            out.append(by_group[r["group"]])
    return out


def run_channel_stats_unit(u: Unit, ctx: "RunContext") -> dict:
    """One transition's energy on its W0's outlier channels: channel_layers.csv, then channel_stats.csv."""
    from ..channels.enrichment import store_energies
    from ..channels.layers import layer_shares
    from ..channels.rule import jaccard
    from ..files import atomic_write_text, to_csv

    p: ChannelStatsParams = u.params
    store = Path(ctx.stores[p.transition])
    energies, records = store_energies(store)
    base = read_channel_set(p.channels_out)
    if int(base["hidden_size"]) != energies.shape[1]:
        raise StoreError(f"{channels_file(p.channels_out)} is for hidden size {base['hidden_size']}, but {store} "
                         f"has {energies.shape[1]} residual channels")
    channels = np.asarray(sorted(base["channels"]), dtype=np.int64)
    extra = {"transition": p.transition}
    if p.post_channels_out is not None:
        extra["post_jaccard"] = jaccard(base["channels"], read_channel_set(p.post_channels_out)["channels"])
    rows = [{**extra, **r} for r in stats_rows(energies, records, channels, resamples=p.resamples, seed=p.seed)]
    layers = [{"transition": p.transition, **r} for r in layer_shares(energies, records, channels)]
    out = Path(u.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / LAYERS_FILE, to_csv(layers))
    atomic_write_text(out / STATS_FILE, to_csv(rows))
    if ctx.tracking.enabled:
        from ..tracking.runs import log_channel_stats

        log_channel_stats(store, rows, layers, [out / STATS_FILE, out / LAYERS_FILE], ctx.tracking)
    overall = {r["component"]: r for r in rows if r["group"] == "all"}
    return {"channels": int(channels.size), "channel_share": channels.size / energies.shape[1],
            **{f"share_{c}": _finite(r["energy_share"]) for c, r in overall.items()},
            **{f"ratio_{c}": _finite(r["ratio"]) for c, r in overall.items()}}


def _finite(x) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None

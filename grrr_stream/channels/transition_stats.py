"""One transition's update energy on a set of residual channels: the one function behind both
``grrr-stream channel-stats`` and the sweep's ``channel-stats`` units, with one schema.

``channel_stats.csv``: per group (all, reader, writer, module=NAME) and component (diag, off, null, and
total: the three summed per channel, with the same null draws and resamples) the rows of
:func:`.enrichment.enrichment`, led by ``transition`` (and ``post_jaccard``, the Jaccard of W0's and W1's
sets, when W1's is given); ``channel_layers.csv``: the share per decoder layer (:func:`.layers.layer_shares`).
With no outlier channel (the rule found none), rows of zero shares and no ratio.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from ..errors import StoreError
from ..files import atomic_write_text, to_csv
from .groups import Member
from .rule import jaccard

STATS_FILE = "channel_stats.csv"  # written last: the sweep's channel-stats unit's completion marker
LAYERS_FILE = "channel_layers.csv"


@dataclass
class ChannelStats:
    transition: str
    hidden: int
    channels: np.ndarray
    rows: list[dict]  # channel_stats.csv
    layers: list[dict]  # channel_layers.csv
    member: "Member"  # what a group of transitions reads of this one (channels.groups)

    def write(self, out: Path) -> list[Path]:
        """channel_layers.csv, then channel_stats.csv (last: it marks the pair complete), in ``out``."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / LAYERS_FILE, to_csv(self.layers))
        atomic_write_text(out / STATS_FILE, to_csv(self.rows))
        return [out / STATS_FILE, out / LAYERS_FILE]


def transition_channel_stats(
    store: Path,
    channels: Sequence[int],
    *,
    draws: int,
    seed: int,
    hidden: Optional[int] = None,
    label: Optional[str] = None,
    post_channels: Optional[Sequence[int]] = None,
    what: str = "the channel set",
) -> ChannelStats:
    """The statistics of ``store``'s update on ``channels`` (chosen for hidden size ``hidden``: refused when the
    store has another); ``label``: the transition's name (default: the store's)."""
    from .enrichment import store_energies
    from .layers import layer_shares

    energies, records = store_energies(Path(store))
    if hidden is not None and int(hidden) != energies.shape[1]:
        raise StoreError(
            f"{what} was chosen for hidden size {hidden}, but {store} has {energies.shape[1]} "
            "residual channels: a different model"
        )
    if label is None:
        from ..store.transition_store import StoredTransition

        label = StoredTransition(Path(store)).label
    chans = np.asarray(sorted(int(c) for c in channels), dtype=np.int64)
    extra: dict = {"transition": label}
    if post_channels is not None:
        extra["post_jaccard"] = jaccard(list(channels), list(post_channels))
    rows = [{**extra, **r} for r in stats_rows(energies, records, chans, resamples=draws, seed=seed)]
    layers = [{"transition": label, **r} for r in layer_shares(energies, records, chans)]
    return ChannelStats(label, int(energies.shape[1]), chans, rows, layers, Member.of(label, energies, records, chans))


def stats_rows(
    energies: np.ndarray, records: list[dict], channels: np.ndarray, *, resamples: int, seed: int
) -> list[dict]:
    """:func:`.enrichment.enrichment`'s rows, plus component ``total`` (the whole update: the three components'
    energies summed per channel, with the same null draws and resamples); with no outlier channel, rows with
    zero shares and no ratio (the rule found none: nothing to enrich)."""
    from ..geometry.channel_energy import COMPONENTS
    from .enrichment import enrichment, groups_of

    e = np.asarray(energies, dtype=np.float64)
    total = np.repeat(e.sum(axis=2, keepdims=True), 3, axis=2)  # one component's rows are the total's
    if channels.size:
        rows = enrichment(e, records, channels, draws=resamples, seed=seed)
        whole = [
            {**r, "component": "total"}
            for r in enrichment(total, records, channels, draws=resamples, seed=seed)
            if r["component"] == COMPONENTS[0]
        ]
        return _interleave(rows, whole)
    H, nan = e.shape[1], float("nan")
    return [
        {
            "group": g,
            "component": c,
            "matrices": len(idx),
            "channels": 0,
            "hidden": H,
            "channel_share": 0.0,
            "energy_share": 0.0,
            "ratio": nan,
            "ci_lo": nan,
            "ci_hi": nan,
            "null_q975": nan,
            "p_value": nan,
            "energy": float((total if c == "total" else e)[idx][:, :, 0 if c == "total" else k].sum()),
            "draws": resamples,
            "seed": seed,
        }
        for g, idx in groups_of(records).items()
        for k, c in enumerate((*COMPONENTS, "total"))
    ]


def _interleave(rows: list[dict], whole: list[dict]) -> list[dict]:
    """Each group's total row after its three component rows."""
    by_group = {r["group"]: r for r in whole}
    out = []
    for i, r in enumerate(rows):
        out.append(r)
        if i + 1 == len(rows) or rows[i + 1]["group"] != r["group"]:
            out.append(by_group[r["group"]])
    return out

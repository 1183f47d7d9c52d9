"""Channel ablation: perplexity with the outlier channels zeroed, against count-matched random sets.

Where the zeroing happens: the residual stream at every decoder layer's input and at the
final norm's input (:func:`.activations.calibration_pass`), i.e. after the embedding and after
every decoder layer's output, so no sublayer and not the LM head ever reads those channels.
Random control sets have the same size as the outlier set and are drawn uniformly without
replacement from the *other* channels (a draw that hit an outlier channel would ablate it too
and measure the outliers again), one set per seed with numpy's default_rng(seed).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .activations import Loaded, calibration_pass

SEEDS = (0, 1, 2)


def random_sets(hidden: int, outliers: list[int], seeds=SEEDS) -> list[list[int]]:
    rest = np.setdiff1d(np.arange(hidden), np.asarray(outliers, dtype=np.int64))
    k = len(outliers)
    if k > rest.size:
        k = rest.size
    return [sorted(int(c) for c in np.random.default_rng(s).choice(rest, size=k, replace=False)) for s in seeds]


def ablate(
    loaded: Loaded,
    ids,
    outliers: list[int],
    hidden: int,
    *,
    batch_size: int = 1,
    seeds=SEEDS,
    baseline: float | None = None,
    on_layer: Callable[[str], Callable] | None = None,
) -> dict:
    """Perplexities: intact (``baseline`` if already known), outliers zeroed, and each random set zeroed.
    ``on_layer(what)``: the per-layer progress callback of one pass (:func:`.activations.calibration_pass`)."""

    def ppl(channels, what):
        return calibration_pass(
            loaded,
            ids,
            batch_size=batch_size,
            zero_channels=np.asarray(channels, dtype=np.int64),
            on_layer=on_layer(what) if on_layer else None,
        ).perplexity

    intact = baseline if baseline is not None else ppl([], "intact")
    zeroed = ppl(outliers, "outliers zeroed") if outliers else intact
    sets = random_sets(hidden, outliers, seeds)
    random = [{"seed": s, "channels": c, "perplexity": ppl(c, f"random set, seed {s}")} for s, c in zip(seeds, sets)]
    return {
        "where": "residual stream zeroed after the embedding and after every decoder layer",
        "perplexity_intact": intact,
        "perplexity_outliers_zeroed": zeroed,
        "n_channels_zeroed": len(outliers),
        "random": random,
        "perplexity_random_median": float(np.median([r["perplexity"] for r in random])) if random else intact,
    }

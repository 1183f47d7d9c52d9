"""The label-free outlier rule, its weight-only proxy, and their overlap.

Rule (a setting, :class:`OutlierRule`): at each depth l, the robust z-score of each
channel's log-RMS against all channels of that depth,
    z_l[c] = (log r_l[c] − median_c log r_l) / (1.4826 · MAD_c log r_l),
then one score per channel aggregated over depths (default: the median over layers), and the
channels whose score exceeds ``threshold`` (default 2.5) are the outliers.

Why the median over layers: an outlier channel is a property of the channel that persists
through depth (massive activations appear after the first layers and stay). The max over L
layers would add L chances per channel for a noise spike to pass (under a Gaussian null the
max of 28 z-scores exceeds 2.5 for 16 % of channels); the median needs the channel to stand
out at half the depths or more and ignores a single-layer spike. ``max`` and ``mean`` are
available as settings.

Proxy (no forward pass): per channel, the aggregated |norm gain| of the decoder layers'
input norms times the Euclidean norm of the embedding's column, ``g[c] · ‖E[:, c]‖``, with the
same robust z (one "layer") and the same threshold.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..errors import ConfigError

AGGREGATES = ("median", "max", "mean")
MAD_SCALE = 1.4826  # makes the MAD a consistent estimator of the standard deviation under a normal law


@dataclass(frozen=True)
class OutlierRule:
    threshold: float = 2.5
    aggregate: str = "median"

    def __post_init__(self):
        if self.aggregate not in AGGREGATES:
            raise ConfigError(f"outlier rule aggregate {self.aggregate!r}: choose one of {', '.join(AGGREGATES)}")
        if not np.isfinite(self.threshold):
            raise ConfigError(f"outlier rule threshold {self.threshold!r} must be a finite number")

    def describe(self) -> dict:
        return {
            **asdict(self),
            "score": "robust z of log-RMS per layer (median, 1.4826·MAD across channels), "
            f"{self.aggregate} over layers",
        }


def robust_z(values: np.ndarray) -> np.ndarray:
    """Robust z-score along the last axis: (v − median) / (1.4826 · MAD); 0 where the MAD is 0."""
    v = np.asarray(values, dtype=np.float64)
    med = np.median(v, axis=-1, keepdims=True)
    mad = MAD_SCALE * np.median(np.abs(v - med), axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (v - med) / mad
    return np.where(mad > 0, z, 0.0)


def _log(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    tiny = np.finfo(np.float64).tiny  # a channel that is exactly 0 everywhere gets a finite, very low score
    return np.log(np.maximum(x, tiny))


def channel_scores(rms_per_layer: np.ndarray, rule: OutlierRule) -> np.ndarray:
    """One score per channel from a (layers, channels) array of RMS values."""
    z = robust_z(_log(np.atleast_2d(rms_per_layer)))
    return {"median": np.median, "max": np.max, "mean": np.mean}[rule.aggregate](z, axis=0)


def select(scores: np.ndarray, rule: OutlierRule) -> list[int]:
    return [int(c) for c in np.flatnonzero(np.asarray(scores) > rule.threshold)]


def outlier_channels(rms_per_layer: np.ndarray, rule: OutlierRule) -> list[int]:
    return select(channel_scores(rms_per_layer, rule), rule)


def proxy_values(norm_gains: np.ndarray, column_norms: np.ndarray) -> np.ndarray:
    """g[c]·‖E[:, c]‖: ``norm_gains`` (layers, channels) effective gains, ``column_norms`` ‖E[:, c]‖.

    g[c] is the median over layers of |gain| (the same aggregation as the rule's default)."""
    g = np.median(np.abs(np.atleast_2d(np.asarray(norm_gains, dtype=np.float64))), axis=0)
    return g * np.asarray(column_norms, dtype=np.float64)


def proxy_channels(norm_gains: np.ndarray, column_norms: np.ndarray, rule: OutlierRule) -> list[int]:
    z = robust_z(_log(proxy_values(norm_gains, column_norms)))
    return select(z, rule)


def jaccard(a, b) -> float:
    """|A ∩ B| / |A ∪ B|; 1.0 for two empty sets (they agree)."""
    a, b = set(a), set(b)
    return 1.0 if not (a | b) else len(a & b) / len(a | b)

"""The enrichment of a group of transitions (the sweep's SFT vs RL table): the mean over the group's
transitions of each one's outlier ratio, with a 95 % interval and a p-value for that mean.

For transition t with per-matrix energies e_t,m[j, c], W0's outlier set S_t (k_t of H channels) and
c one of diag, off, null, total (the three summed), ratio_t,c = Σ_m Σ_{j∈S_t} e / Σ_m Σ_j e / (k_t / H)
(:mod:`.enrichment`); the group's statistic is its mean over the group's transitions.

* **Interval**: a joint bootstrap over matrices (:func:`grrr_stream.stats.bootstrap.joint_replicates`, the one
  the claims use over benchmark problems: a matrix plays a problem's part). Each replicate
  resamples every transition's own matrices with replacement (stratified: each keeps its count), and
  transitions with the same matrix list (the same layers, modules and experts: one architecture) share the
  draw, since a layer whose update favours the outlier channels in one step tends to in the next; resampling
  them independently would treat that as independent noise and give too narrow an interval. The interval
  is the percentile interval of the replicates' group mean.
* **p-value**: the count-matched random-channel null of :mod:`.enrichment`, pooled the same way: draw d
  applies one uniformly random permutation π_d of the H channels to every transition's outlier set, so
  π_d(S_t) is a uniformly random set of k_t channels (each transition's own null) while sets that are
  shared or overlap between transitions (one W0 for two steps; a parent and child keeping most outlier
  channels) stay shared or overlap as much. p = (1 + #{null group mean ≥ observed}) / (1 + draws),
  one-sided; ``null_q975`` is the null mean's 97.5 % quantile. Transitions of different hidden sizes
  draw independent permutations.

Transitions with no outlier channel (or no energy in a component) have no ratio and are left out of that
component's mean, interval and null, as they are of the table's means.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..files import temp_sibling
from ..stats.bootstrap import block_rng, blocks, interval, joint_replicates

COMPONENTS = ("diag", "off", "null", "total")
TIE = 1e-12  # a null mean equal to the observed one up to rounding counts as reaching it


@dataclass(frozen=True)
class Member:
    """One transition of a group, as much of it as the group's statistics read: per matrix and component
    (diag, off, null, total) its energy on W0's outlier channels and in all channels, each channel's energy
    summed over matrices, the identity of its matrix list, and the outlier set. :meth:`of` makes one from the
    store's (matrices, H, 3) energies; a sweep's channel-stats unit keeps it (:meth:`save`), so its group is
    summarised without opening the store again."""

    transition: str
    per_matrix: np.ndarray  # (matrices, 8): inside, then total, per component
    channel_totals: np.ndarray  # (H, 4)
    signature: str  # the matrix list's identity: transitions with the same one are resampled jointly
    channels: np.ndarray

    @classmethod
    def of(cls, transition: str, energies: np.ndarray, records: list[dict], channels) -> "Member":
        e = np.asarray(energies, dtype=np.float64)
        e = np.concatenate([e, e.sum(axis=2, keepdims=True)], axis=2)  # (matrices, H, 4)
        chans = np.asarray(channels, dtype=np.int64)
        per_matrix = np.concatenate([e[:, chans, :].sum(axis=1), e.sum(axis=1)], axis=1)
        return cls(transition, per_matrix, e.sum(axis=0), _signature(records), chans)

    @property
    def hidden(self) -> int:
        return int(self.channel_totals.shape[0])

    def save(self, path: Path) -> None:
        """The member as one .npz file (written atomically)."""
        import os

        path = Path(path)
        tmp = temp_sibling(path)
        with open(tmp, "wb") as f:
            np.savez(
                f,
                per_matrix=self.per_matrix,
                channel_totals=self.channel_totals,
                channels=self.channels,
                signature=np.asarray(self.signature),
                transition=np.asarray(self.transition),
            )
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> "Member":
        with np.load(Path(path)) as z:
            return cls(
                str(z["transition"]),
                z["per_matrix"],
                z["channel_totals"],
                str(z["signature"]),
                z["channels"].astype(np.int64),
            )


def _signature(records: list[dict]) -> str:
    """The matrix list's identity: transitions with the same one are resampled jointly."""
    text = "|".join(f"{r['layer']}:{r['module']}:{r['expert']}" for r in records)
    return "channels-matrices:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def _usable(members: list[Member]) -> list[Member]:
    return [m for m in members if 0 < len(m.channels) < m.hidden]


def bootstrap_means(members: list[Member], *, draws: int, seed: int) -> np.ndarray:
    """(draws, 4) replicates of the group's mean ratio per component (NaN where no transition has one)."""
    # per member: means over resampled matrices (named streams: every group draws the same resamples)
    reps = joint_replicates([{m.signature: m.per_matrix} for m in members], resamples=draws, seed=seed, prefix="joint")
    ratios = []
    for m, r in zip(members, reps):
        share = len(m.channels) / m.hidden
        with np.errstate(invalid="ignore", divide="ignore"):
            ratios.append(r[:, :4] / r[:, 4:] / share)
    return _nanmean(np.stack(ratios), axis=0)


def null_means(members: list[Member], *, draws: int, seed: int) -> np.ndarray:
    """(draws, 4) group means of the ratio of π_d(S_t), one random channel permutation per draw and hidden size."""
    acc = np.zeros((len(members), draws, 4))
    for H in sorted({m.hidden for m in members}):
        start = 0
        for b, size in enumerate(blocks(draws)):
            perm = np.argsort(block_rng(seed, f"channels-null:{H}", b).random((size, H)), axis=1)
            for i, m in enumerate(members):
                if m.hidden != H:
                    continue
                T = m.channel_totals
                with np.errstate(invalid="ignore", divide="ignore"):
                    acc[i, start : start + size] = (
                        T[perm[:, m.channels]].sum(axis=1) / T.sum(axis=0) / (len(m.channels) / H)
                    )
            start += size
    return _nanmean(acc, axis=0)


def _nanmean(x: np.ndarray, axis: int) -> np.ndarray:
    finite = np.isfinite(x)
    n = finite.sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, np.where(finite, x, 0.0).sum(axis=axis) / n, np.nan)


def group_enrichment(members: list[Member], *, draws: int, seed: int, level: float = 0.95) -> dict[str, dict]:
    """Per component: the group's mean ratio, its interval (``ci_lo``, ``ci_hi``), the null's 97.5 %
    quantile and the p-value, over the members with an outlier set."""
    members = _usable(members)
    out = {
        c: {
            "ratio": math.nan,
            "ci_lo": math.nan,
            "ci_hi": math.nan,
            "null_q975": math.nan,
            "p_value": math.nan,
            "draws": draws,
        }
        for c in COMPONENTS
    }
    if not members:
        return out
    point = []
    for m in members:
        sums = m.per_matrix.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            point.append(sums[:4] / sums[4:] / (len(m.channels) / m.hidden))
    point = _nanmean(np.stack(point), axis=0)
    boot, null = bootstrap_means(members, draws=draws, seed=seed), null_means(members, draws=draws, seed=seed)
    for c, comp in enumerate(COMPONENTS):
        if not math.isfinite(point[c]):
            continue
        b, nl = boot[:, c][np.isfinite(boot[:, c])], null[:, c][np.isfinite(null[:, c])]
        lo, hi = interval(b, level)
        out[comp].update(
            ratio=float(point[c]),
            ci_lo=lo,
            ci_hi=hi,
            null_q975=float(np.quantile(nl, 0.975)) if nl.size else math.nan,
            p_value=float((1 + np.sum(nl >= point[c] * (1 - TIE))) / (1 + nl.size)),
        )
    return out

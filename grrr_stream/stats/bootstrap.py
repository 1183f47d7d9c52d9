"""The bootstrap every statistic of the package shares: seeded blocks of draws, the percentile interval, a
safe ratio, and joint replicates (one resample of shared units applied to every member that has them).

A leaf: numpy only. Random streams: block ``k`` of a stream draws from
``SeedSequence([seed, crc32(stream), k])``, so results do not depend on how the blocks are scheduled
(one process, threads or a Dask cluster) and two statistics on different streams never share draws.
Users: :mod:`.summaries` and :mod:`.comparisons` (bootstrap of matrices), :mod:`.claims` and
:mod:`.claims_sets` (problems within and across transitions), :mod:`grrr_stream.channels.groups`
(matrices of a group of transitions).
"""

from __future__ import annotations

import math
import zlib
from typing import Mapping, Sequence

import numpy as np

BLOCK = 1000  # resamples / null draws per block (one Dask task each where a graph is built)


def block_rng(seed: int, stream: str, block: int) -> np.random.Generator:
    """The generator of block ``block`` of stream ``stream``."""
    return np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(stream.encode()), block]))


def blocks(total: int) -> list[int]:
    """The sizes of the blocks that make ``total`` draws."""
    return [min(BLOCK, total - i) for i in range(0, total, BLOCK)]


def interval(x: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The percentile interval of replicates ``x`` at ``level`` (NaN, NaN when there are none)."""
    x = np.asarray(x)
    if x.size == 0:
        return math.nan, math.nan
    lo, hi = np.percentile(x, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return float(lo), float(hi)


def ratio(a, b):
    """100·a/b, elementwise; NaN where b is 0 (a float for scalars)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(b != 0, 100.0 * a / np.where(b != 0, b, 1.0), np.nan)
    return float(out) if out.ndim == 0 else out


def joint_replicates(
    members: Sequence[Mapping[str, np.ndarray]], *, resamples: int, seed: int, prefix: str = "joint"
) -> list[np.ndarray]:
    """Per member, its (resamples, V) column means over resampled units, summed over its sets.

    ``members[i]``: set name → (n, V_i) values of its n units (problems of a benchmark, matrices of an
    architecture) for its V_i columns. Replicate j draws one resample (with replacement, n of n) of each
    (set, n) pair, stream ``{prefix}:{set}:{n}``, and every member holding that set with n units is
    evaluated on that same draw: what the members share is resampled jointly, not as independent noise.
    Members whose copies of a set have different unit counts are different sets: each count draws on
    its own. Every member's columns must be the same across its sets."""
    by_set: dict[tuple[str, int], list[int]] = {}
    for i, m in enumerate(members):
        for name, values in m.items():
            by_set.setdefault((name, values.shape[0]), []).append(i)
    width = [next(iter(m.values())).shape[1] if m else 0 for m in members]
    reps = [np.zeros((resamples, w)) for w in width]
    for (name, n), who in sorted(by_set.items()):
        stacked = np.concatenate([np.asarray(members[i][name], dtype=np.float64) for i in who], axis=1)
        cuts = np.cumsum([0] + [members[i][name].shape[1] for i in who])
        start = 0
        for k, size in enumerate(blocks(resamples)):
            rng = block_rng(seed, f"{prefix}:{name}:{n}", k)
            # one resample per row, as multiplicities (float: a float matmul is much faster)
            counts = rng.multinomial(n, np.full(n, 1.0 / n), size=size).astype(np.float64)
            acc = counts @ stacked / n
            for j, i in enumerate(who):
                reps[i][start : start + size] += acc[:, cuts[j] : cuts[j + 1]]
            start += size
    return reps

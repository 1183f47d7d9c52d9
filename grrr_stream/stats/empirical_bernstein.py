"""The predictable-plug-in empirical-Bernstein confidence sequence for the mean of a finite population of values in
[0, 1] drawn without replacement (I. Waudby-Smith and A. Ramdas, "Confidence sequences for sampling without
replacement", NeurIPS 2020, §3; the plug-in bets of "Estimating means of bounded random variables by betting",
JRSS-B 2024, §3.3), the adaptive design's ``sequence: eb``: for values in [0, 1] drawn without replacement from N,
the mean m lies, at every t at once with probability ≥ 1 − α, in

    ( Σ λ_i (x_i + S_{i−1}/(N−i+1)) ± (log(2/α) + Σ v_i ψ(λ_i)) ) / Σ λ_i (1 + (i−1)/(N−i+1)),

v_i = 4 (x_i − μ̂_{i−1})², ψ(λ) = (−log(1 − λ) − λ)/4, λ_i predictable. Its closed form costs O(t) per path, so a
simulation of a thousand studies runs in seconds, but it is wider than the betting sequence of
:mod:`grrr_stream.stats.betting`: the bound under the exponential it uses for log(1 + λy) costs the betting
capital's edge when the bets are large.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .betting import removed_values

TRUNCATION = 0.5  # bets λ stay below this (the papers' 1/2): a bad early bet cannot dominate the sum


def eb_wor_cs(
    x: np.ndarray, population: int, alpha: float = 0.05, removed: Optional[np.ndarray] = None
) -> tuple[np.ndarray, np.ndarray]:
    """The running intersection of the empirical-Bernstein sequence for the mean of ``population`` values in [0, 1]
    drawn without replacement, after each of the draws ``x`` (last axis; leading axes are independent paths):
    (lo, hi), each of x's shape. ``removed``: the values the draws take out of the population where they are not
    the draws themselves, as :func:`~grrr_stream.stats.betting.betting_wor_cs`'s (the bound below needs only that
    x_i lies in [0, 1] and has the mean of what is left given the past)."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-1]
    if n > population:
        raise ValueError(f"{n} draws from a population of {population}")
    gone = removed_values(x, removed)
    t = np.arange(1, n + 1, dtype=np.float64)
    cum = np.cumsum(x, axis=-1)
    mean_before = (0.5 + cum - x) / t  # μ̂_{i−1}, shrunk to 1/2
    sq = np.cumsum((x - (0.5 + cum) / (t + 1)) ** 2, axis=-1)
    var_before = (0.25 + sq - (x - (0.5 + cum) / (t + 1)) ** 2) / t  # σ̂²_{i−1}
    cum = np.cumsum(gone, axis=-1)
    before = cum - gone  # S_{i−1}: what the draws before i took out
    lam = np.minimum(np.sqrt(2 * math.log(2 / alpha) / (var_before * t * np.log1p(t))), TRUNCATION)
    left = population - t + 1  # N − i + 1
    centre = np.cumsum(lam * (x + before / left), axis=-1)
    scale = np.cumsum(lam * (1 + (t - 1) / left), axis=-1)
    psi = (-np.log1p(-lam) - lam) / 4
    radius = math.log(2 / alpha) + np.cumsum(4 * (x - mean_before) ** 2 * psi, axis=-1)
    # whatever the sequence says, the mean lies between the draws' sum with the rest all 0 and with the rest all 1:
    # exact once every value is drawn
    lo = np.maximum.accumulate(np.maximum((centre - radius) / scale, cum / population), axis=-1)
    hi = np.minimum.accumulate(np.minimum((centre + radius) / scale, (cum + population - t) / population), axis=-1)
    return lo, np.maximum(hi, lo)

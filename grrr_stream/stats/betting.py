"""The hedged betting confidence sequence for the mean of a finite population of values in [0, 1] drawn without
replacement (I. Waudby-Smith and A. Ramdas, "Confidence sequences for sampling without replacement", NeurIPS 2020,
§3.2; the capital and bets of "Estimating means of bounded random variables by betting", JRSS-B 2024, §4-5), the
default sequence of :mod:`grrr_stream.stats.anytime`.

Were m the population's mean, the mean of what is left before draw i would be μ_i(m) = (N m − S_{i−1}) /
(N − i + 1), and the capitals K⁺_t(m) = Π (1 + λ⁺_i (x_i − μ_i(m))), K⁻_t(m) = Π (1 − λ⁻_i (x_i − μ_i(m))) are
nonnegative martingales; by Ville's inequality m is excluded, with error α over all t at once, where either
reaches 2/α (the hedged capital (K⁺ + K⁻)/2 reaching 1/α excludes these and at most a sliver more: at an end of
the interval the other capital is near 0). The bets λ±_i are predictable (from draws before i), of one of two
kinds:

- *tuned* to a target half-width h: λ_i = h / σ̂²_{i−1}. Against a mean h away from the truth a constant bet λ
  grows the log capital by about λh − λ²σ²/2 a draw, most at λ = h/σ², so the interval reaches ±h after about
  the fewest draws; truncated at ``TUNED_CAP`` of what keeps the capital positive (over μ_i or 1 − μ_i);
- the empirical-Bernstein *plug-in* of :func:`~grrr_stream.stats.empirical_bernstein.eb_wor_cs` (no target: fair
  at every width, best at none), truncated at ``CAP`` of that.

Any predictable bet keeps the sequence valid; the kind only moves where it is narrow.

K⁺ falls and K⁻ rises as m rises, so each end of the interval is found by bisection within the running
intersection so far, conservatively (the reported end is a point known excluded); m outside the deterministic
bounds (the draws' sum with the rest all 0 or all 1) is excluded too.

Unlike the empirical-Bernstein closed form, each end costs a pass over the draws per bisection step, so the
sequence is computed at given *looks* (the decision boundaries) and intersected over them: a sequence valid at
every time is valid at the times it is looked at.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

BISECTIONS = 16  # the first look's ends to 2⁻¹⁶ of the deterministic bounds' width
LATER_BISECTIONS = 12  # a later look's to 2⁻¹² of the interval at the look before (its bracket)
CAP = 0.5  # plug-in bets stay within this share of what keeps the capital positive
# Tuned bets stay within this share: a close variant differs from full on a few % of problems, so σ̂² is small, h/σ̂²
# exceeds any cap and the cap sets the pace (docs/evaluation.md, "Bets": 0.5 answered more, 0.9 a longer tail).
TUNED_CAP = 0.7


def looks_of(looks: Optional[Sequence[int]], n: int) -> np.ndarray:
    """The looks (numbers of draws, 1..n, increasing, unique); None: after every draw."""
    out = np.arange(1, n + 1) if looks is None else np.unique(np.asarray(looks, dtype=np.int64))
    if len(out) and (out[0] < 1 or out[-1] > n):
        raise ValueError(f"looks must lie in 1..{n} (the draws), got {out[0]}..{out[-1]}")
    return out


def bets(x: np.ndarray, alpha: float, target=None) -> np.ndarray:
    """The predictable bets λ_i, untruncated (x's shape): tuned to the half-width ``target`` (x's units, a
    number or an array that broadcasts against x), or the plug-in (None)."""
    t = np.arange(1, x.shape[-1] + 1, dtype=np.float64)
    cum = np.cumsum(x, axis=-1)
    dev = (x - (0.5 + cum) / (t + 1)) ** 2
    var_before = (0.25 + np.cumsum(dev, axis=-1) - dev) / t  # σ̂²_{i−1}, shrunk towards 1/4
    if target is not None:
        return np.asarray(target, dtype=np.float64) / var_before
    return np.sqrt(2 * math.log(2 / alpha) / (var_before * t * np.log1p(t)))


def _cap(target) -> float:
    return CAP if target is None else TUNED_CAP


def log_capital(
    x: np.ndarray, before: np.ndarray, lam: np.ndarray, population: int, m: np.ndarray, sign: int, cap: float = CAP
) -> np.ndarray:
    """log K⁺ (sign +1) or log K⁻ (−1) of candidate means ``m`` (x's leading shape) after all draws of ``x``
    (``before``: S_{i−1}; ``lam``: the bets, truncated at ``cap``). Only for m within the deterministic bounds
    after these draws."""
    left = population - np.arange(x.shape[-1], dtype=np.float64)  # N − i + 1
    mu = (population * m[..., None] - before) / left
    room = np.clip(mu if sign > 0 else 1 - mu, 1e-12, None)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.log1p(sign * np.minimum(lam, cap / room) * (x - mu)).sum(axis=-1)


def removed_values(x: np.ndarray, removed: Optional[np.ndarray]) -> np.ndarray:
    """What the draws ``x`` take out of the population: ``removed`` where given (draws made with unequal
    probabilities, :mod:`grrr_stream.stats.allocation`), else the draws themselves."""
    gone = x if removed is None else np.asarray(removed, dtype=np.float64)
    if gone.shape != x.shape:
        raise ValueError(f"removed has shape {gone.shape}, the draws {x.shape}")
    return gone


def betting_wor_cs(
    x: np.ndarray,
    population: int,
    alpha: float = 0.05,
    looks: Optional[Sequence[int]] = None,
    target=None,
    removed: Optional[np.ndarray] = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The running intersection, over ``looks`` (numbers of draws; None: every draw), of the betting sequence for
    the mean of ``population`` values in [0, 1] drawn without replacement, the draws ``x`` on the last axis
    (leading axes: independent paths): (lo, hi), each of shape x.shape[:-1] + (len(looks),). ``target``: the
    half-width the bets are tuned to (x's units; None: the plug-in bets).

    ``removed``: the values the draws take out of the population, where they are not the draws themselves: draws
    made with unequal, predictable probabilities p_i observe x_i = removed_i / ((N − i + 1) p_i), whose mean
    given the past is still the mean of what is left (:mod:`grrr_stream.stats.allocation`). Both in [0, 1]."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-1]
    if n > population:
        raise ValueError(f"{n} draws from a population of {population}")
    at = looks_of(looks, n)
    gone = removed_values(x, removed)
    lam, cap = bets(x, alpha, target), _cap(target)
    cum = np.cumsum(gone, axis=-1)
    before, target = cum - gone, math.log(2 / alpha)
    lo = np.empty(x.shape[:-1] + (len(at),))
    hi = np.empty_like(lo)
    low, high = np.zeros(x.shape[:-1]), np.ones(x.shape[:-1])  # the running intersection so far
    for j, k in enumerate(at):
        low = np.maximum(low, cum[..., k - 1] / population)
        high = np.minimum(high, (cum[..., k - 1] + population - k) / population)
        args = (x[..., :k], before[..., :k], lam[..., :k], population, cap)
        steps = BISECTIONS if j == 0 else LATER_BISECTIONS
        low, high = _end(args, target, +1, low, high, steps), _end(args, target, -1, high, low, steps)
        lo[..., j], hi[..., j] = low, np.maximum(high, low)
    return lo, hi


def _end(args: tuple, target: float, sign: int, out: np.ndarray, inside: np.ndarray, steps: int) -> np.ndarray:
    """Bisection between ``out`` (an end of the running intersection: beyond it every mean is excluded) and
    ``inside`` (the other end) for the last mean that capital ``sign`` excludes; ``out`` only ever moves to
    excluded means, so the end found is conservative by at most the bracket over 2^steps."""
    x, before, lam, population, cap = args
    for _ in range(steps):
        mid = (out + inside) / 2
        excluded = log_capital(x, before, lam, population, mid, sign, cap) >= target
        out, inside = np.where(excluded, mid, out), np.where(excluded, inside, mid)
    return out


def betting_excludes(
    x: np.ndarray,
    population: int,
    m: np.ndarray,
    alpha: float = 0.05,
    looks: Optional[Sequence[int]] = None,
    target=None,
    removed: Optional[np.ndarray] = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Whether the running intersection over ``looks`` has put the population's mean above ``m`` (every mean ≤ m
    excluded) and below it (every mean ≥ m excluded) by the last look: a point test, one pass over the draws
    (``m``: x's leading shape; ``target`` and ``removed``: as :func:`betting_wor_cs`'s). (above, below), booleans
    of that shape."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-1]
    at = looks_of(looks, n) - 1
    m = np.asarray(m, dtype=np.float64)
    gone = removed_values(x, removed)
    lam, cum, cap = bets(x, alpha, target), np.cumsum(gone, axis=-1), _cap(target)
    before, target = cum - gone, math.log(2 / alpha)
    left = population - np.arange(n, dtype=np.float64)
    mu = (population * m[..., None] - before) / left
    d_lo, d_hi = cum[..., at] / population, (cum[..., at] + population - at - 1) / population
    ends = []
    for sign in (+1, -1):
        room = np.clip(mu if sign > 0 else 1 - mu, 1e-12, None)
        with np.errstate(invalid="ignore", divide="ignore"):
            logk = np.cumsum(np.log1p(sign * np.minimum(lam, cap / room) * (x - mu)), axis=-1)[..., at]
        impossible = m[..., None] < d_lo if sign > 0 else m[..., None] > d_hi
        ends.append((impossible | (logk >= target)).any(axis=-1))
    return ends[0], ends[1]

"""The store's own rounding in a composed variant, estimated and bounded from the stored values alone.

A store kept in a dtype narrower than the decomposition's compute dtype (bfloat16/float16 P
and null residual from a float32 decomposition) holds each value y rounded to nearest: the
value x the decomposition computed lies within half a unit in the last place of y,
|x − y| ≤ ulp(y)/2. The variant's intended update uses those rounded values, so it carries

    E = (w_diag − w_off)·U0 diag(δp) V0ᵀ + (w_null − w_off)·δN + w_band·U0_k δB V0_kᵀ (− δR)

which the cast comparison cannot see (it measures against the stored update). With U0, V0
orthonormal, ‖U0 X V0ᵀ‖ = ‖X‖, so E's norm needs only the rounding errors of the stored
entries themselves:

- *bound*: every |δ| ≤ ulp(y)/2, so ‖δ‖ ≤ sqrt(Σ ulp²/4), and the terms add by the triangle
  inequality. It always holds;
- *estimate*: the discarded low bits of a computed value are uniformly distributed over the
  rounding interval, so E[δ²] = ulp(y)²/12; the terms are independent roundings and their
  expected squares add. Over thousands of entries the estimate is within a few per cent of
  the actual error (tests/variants/test_variant_dtypes.py measures it against a float64 truth).

Neither recomputes anything from the checkpoints. A store in the compute dtype (or wider)
holds the computed values unrounded: both are 0 (the decomposition's own float32 arithmetic,
~1e-6 relative, is not counted here).
"""

from __future__ import annotations

import math

import torch

from .fidelity import casts_exactly

_STEP = 1 << 22  # entries per block: bounded temporaries on a large null residual


def ulp(y: torch.Tensor) -> torch.Tensor:
    """The spacing of y's dtype at each value of y (float64): 2^(exponent − mantissa bits), subnormals
    included (the spacing never falls below the smallest subnormal's)."""
    fi = torch.finfo(y.dtype)
    y = y.double()
    _, e = torch.frexp(y)  # y = m·2^e with 0.5 ≤ |m| < 1: ulp = eps·2^(e − 1)
    spacing = torch.ldexp(torch.full_like(y, fi.eps), e - 1)
    spacing = torch.where(y == 0, 0.0, spacing)  # frexp(0) = (0, 0): zero's spacing is the floor below
    spacing = torch.maximum(spacing, torch.tensor(fi.tiny * fi.eps, dtype=torch.float64))
    return torch.where(torch.isfinite(y), spacing, math.inf)  # an overflowed value: no bound


def rounds(stored: torch.dtype, compute: torch.dtype) -> bool:
    """True when a store in ``stored`` rounds values computed in ``compute``."""
    return not casts_exactly(compute, stored)


def rounding(y: torch.Tensor, compute: torch.dtype, weights: torch.Tensor | None = None) -> tuple[float, float]:
    """(expected Σ w²δ², bound on sqrt(Σ w²δ²)) of the rounding errors δ of the stored values ``y``;
    (0, 0) when the store keeps the compute dtype's values exactly. ``weights`` (same shape as y,
    default 1) weigh each entry's error."""
    if not rounds(y.dtype, compute) or y.numel() == 0:
        return 0.0, 0.0
    flat = y.reshape(-1)
    w = None if weights is None else weights.reshape(-1).double()
    u2 = 0.0
    for i in range(0, flat.numel(), _STEP):
        s = ulp(flat[i : i + _STEP]).square_()
        if w is not None:
            s.mul_(w[i : i + _STEP].square())
        u2 += float(s.sum())
    return u2 / 12.0, math.sqrt(u2 / 4.0)


def combine(terms: list[tuple[float, tuple[float, float]]]) -> tuple[float, float]:
    """(expected ‖E‖², bound on ‖E‖) of E = Σ c·δ_term over independent roundings of distinct entries."""
    expected = sum(c * c * t[0] for c, t in terms)
    bound = sum(abs(c) * t[1] for c, t in terms)
    return expected, bound

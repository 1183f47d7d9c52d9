"""Update sparsity at checkpoint precision: how many entries the update left alone (compared as values in the
dtype that holds both checkpoints), measured on the reader thread while the checkpoint tensors are there."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

from ...columns import CONSOLE, DEFAULT_SHOWN, FIGURE, JOINED, POOLED, REPORT, TRANSITIONS, Column
from ...dtypes import common_dtype, name_of
from .base import Analysis, MatrixState

if TYPE_CHECKING:
    import torch


def sparsity_compare(base: "torch.dtype", post: "torch.dtype") -> str:
    """How :func:`update_sparsity` compares a pair, as recorded with its numbers: the dtype the values are
    compared in, and for a pair whose checkpoints differ in dtype which two were upcast to it
    ('bfloat16'; 'float32 (bfloat16→float32)'; 'float32 (float16→bfloat16)')."""
    common = name_of(common_dtype(base, post))
    return common if base == post else f"{common} ({name_of(base)}→{name_of(post)})"


_UINTS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def update_sparsity(w0: "torch.Tensor", w1: "torch.Tensor") -> dict:
    """How many entries the update left alone, compared as VALUES in the common dtype: the narrowest
    float dtype that holds both checkpoints' values exactly (:func:`common_dtype`; the pair's own dtype
    when they share one, float32 for bfloat16 vs float32 or vs float16). Both are upcast to it, which is
    exact, so for a bf16 W0 and a float32 W1 an entry is unchanged when W1 equals W0 upcast.

    - ``frac_unchanged``: entries with W1 == W0 as values (+0 and −0 are equal, as in sparsity_in_rl);
    - ``frac_bitwise_unchanged``: entries whose bit patterns in the common dtype are identical (+0 → −0
      counts as changed here);
    - ``frac_within_ulp``: entries that moved by at most one representable step of the COMMON dtype (a
      neighbouring value, unchanged ones included; ±0 are one value, so +0 to the smallest negative
      subnormal is one step). For a mixed pair that is a float32 (or float64) ulp, not the narrower one's;
    - ``sparsity_compare``: which comparison was made (:func:`sparsity_compare`).

    Values, not NaN or ±Inf: the pipeline refuses non-finite matrices before this. Integer work only, on the
    bit patterns x, y (as signed integers of the common dtype's width w), in blocks (a 14M-entry matrix in
    well under a second). Two values of the same sign are k representable steps apart exactly when their
    patterns differ by ±k, so for them d = x − y (with wrap-around) ∈ {−1, 0, 1} is "within one step" and
    d = 0 "equal". Two finite values of opposite signs never give such a d (their patterns differ by
    2^(w−1) ± a magnitude below 2^(w−1) − 1); of them only ±0 and the smallest subnormals are within one
    step (|x| + |y| ≤ 1 in magnitude bits: +0/−0 equal, ±0 and ∓smallest one step apart), and those pairs are
    found among the few whose magnitude bits are all 0 but the last, and counted apart. numpy rather than
    torch for the integer loops: 2.6–5× cheaper (docs/benchmarks.md)."""
    import torch

    common = common_dtype(w0.dtype, w1.dtype)
    out = {"sparsity_compare": sparsity_compare(w0.dtype, w1.dtype)}
    n = w0.numel()
    if n == 0:
        return {"frac_unchanged": 1.0, "frac_bitwise_unchanged": 1.0, "frac_within_ulp": 1.0, **out}
    width = torch.finfo(common).bits // 8
    ints, unsigned = getattr(torch, f"int{8 * width}"), _UINTS[width]
    signed = np.dtype(f"i{width}")
    magnitude = np.iinfo(signed).max  # every bit but the sign
    a, b = w0.reshape(-1), w1.reshape(-1)
    # 64 Ki entries a block, into buffers made once: the inputs' blocks and the temporaries stay in the core's
    # own cache (several times faster than larger blocks or a new array per operation: docs/benchmarks.md).
    step = min(n, 1 << 16)
    d, mask = np.empty(step, signed), np.empty(step, bool)
    same = bitwise = within = 0
    for i in range(0, n, step):  # blocks: bounded temporaries (the upcast of a mixed pair included)
        x, y = (t[i : i + step].to(common).view(ints).cpu().numpy() for t in (a, b))  # may view the inputs: read only
        dk, mk = d[: x.size], mask[: x.size]
        bitwise += int(np.count_nonzero(np.equal(x, y, out=mk)))
        np.subtract(x, y, out=dk)  # wraps silently in the patterns' width; see the docstring
        dk += 1  # d ∈ {−1, 0, 1} ⇔ d + 1 ∈ {0, 1, 2} ⇔ (d + 1) as unsigned ≤ 2 (negatives are huge)
        within += int(np.count_nonzero(np.less_equal(dk.view(unsigned), 2, out=mk)))
        np.bitwise_or(x, y, out=dk)
        dk &= magnitude - 1
        if not np.all(dk):  # some pair has both ±0 or ±smallest subnormal: rare, counted apart
            tiny = np.flatnonzero(dk == 0)
            xs, ys = x[tiny], y[tiny]
            apart = (xs ^ ys) < 0  # opposite signs: counted by neither test above
            steps = (xs & magnitude) + (ys & magnitude)  # 0, 1 or 2 steps apart across zero
            same += int(np.count_nonzero(apart & (steps == 0)))
            within += int(np.count_nonzero(apart & (steps <= 1)))
    same += bitwise  # equal values of one sign have equal patterns
    return {"frac_unchanged": same / n, "frac_bitwise_unchanged": bitwise / n, "frac_within_ulp": within / n, **out}


# pooled over the entries of a scope (as sparsity_in_rl pools over the model: a large MLP matrix weighs more
# than a small k_proj, unlike a mean of per-matrix fractions), with their per-matrix spread
SPARSITY_COLUMNS = (
    Column("sparsity_compare", "entries compared in", aggregate=JOINED, shown=frozenset({TRANSITIONS, REPORT})),
    Column(
        "frac_unchanged",
        "entries unchanged",
        aggregate=POOLED,
        short="unchanged entries",
        shown=DEFAULT_SHOWN | {CONSOLE, FIGURE},
    ),
    Column("frac_bitwise_unchanged", "entries bitwise unchanged", aggregate=POOLED),
    Column(
        "frac_within_ulp",
        "entries within 1 ulp",
        aggregate=POOLED,
        short="entries within 1 ulp",
        shown=DEFAULT_SHOWN | {CONSOLE, FIGURE},
    ),
)


def pooled_sparsity(rows: Sequence[dict]) -> dict:
    """The sparsity figures of a set of matrices (metrics rows with ``rows`` and ``cols``): what each sparsity
    column's aggregate gives for them."""
    out: dict = {}
    for c in SPARSITY_COLUMNS:
        out.update(c.aggregate.reduce(c.name, rows))
    return out


def _read(opts: Any, matrix: Any, w0: "torch.Tensor", w1: "torch.Tensor") -> dict:
    return update_sparsity(w0, w1)


def _split(state: MatrixState, opts: Any, prepared: Optional[dict]) -> Optional[dict]:
    return prepared


ANALYSIS = Analysis("sparsity", None, {"split": _split}, SPARSITY_COLUMNS, read=_read)

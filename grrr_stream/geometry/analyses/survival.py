"""Component survival: how much of each component (ΔW_diag, ΔW_off, ΔW_null) survives W0 + component stored in a
16-bit dtype (survival_dtype), estimated on a sample of rows or columns the reader thread takes of W0."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Optional

from ...columns import CONSOLE, DEFAULT_SHOWN, FIGURE, Column
from ...dtypes import SIXTEEN_BIT, torch_dtype
from .base import Analysis, AnalysisSettings, MatrixState

if TYPE_CHECKING:
    import torch


class SurvivalSettings(AnalysisSettings):
    # how much of each component survives W0 + component stored in this dtype (None: skip)
    survival_dtype: Optional[Literal[SIXTEEN_BIT]] = "bfloat16"


@dataclass(frozen=True)
class SurvivalSample:
    """What the reader thread takes of one matrix: the sampled rows (axis 0) or columns (axis 1) of W0 in the
    checkpoint's dtype, and the dtype of the round trip."""

    axis: int
    indices: "torch.Tensor"
    w0: "torch.Tensor"
    target: "torch.dtype"


def round_trip_survival(
    w0_rows: "torch.Tensor", components: dict[str, "torch.Tensor"], dtype: Optional["torch.dtype"] = None
) -> dict[str, float]:
    """How much of each component survives W0 + component stored in ``dtype``: the share of its energy
    that is left once the rounding error is taken out, max(0, 1 − ‖realised − c‖² / ‖c‖²) with realised
    = cast(W0 + c) − W0 (1 for a zero component). ``w0_rows`` and each component: the same sample of
    entries (rows or columns) of W0 and of the component.

    Why this and not ⟨realised, c⟩²/‖c‖⁴: the error realised − c has a part along c (a component of
    0.6 ulp per entry is realised as 1 ulp: overshoot, which the projection counted as more than
    everything kept) and a part orthogonal to c (noise the projection ignored); ‖realised − c‖²
    counts both. It is 1 − fidelity² of the variants' fidelity report (fidelity = ‖error‖/‖c‖),
    clipped at 0 where the error is as large as the component itself.

    W0 + c is formed in float64 when W0 is wider than float32 or c is float64, else in float32 (the
    sums are accumulated in float64 either way): rounding W0 + c to float32 before ``dtype`` can
    change a 16-bit result only at an exact tie, far below what this share resolves. ``dtype``: default bfloat16."""
    import torch

    dtype = torch.bfloat16 if dtype is None else dtype
    wide = w0_rows.dtype == torch.float64 or any(c.dtype == torch.float64 for c in components.values())
    work = torch.float64 if wide else torch.float32
    base = w0_rows.to(work)
    out = {}
    for name, c in components.items():
        c = c.to(work)
        realised = (base + c).to(dtype).to(work) - base  # nearby floats: exact or nearly
        cc = float(torch.sum((c * c).double()))
        err = float(torch.sum((realised.double() - c.double()).square()))
        out[name] = max(0.0, 1.0 - err / cc) if cc > 0 else 1.0
    return out


def survival_sample(shape: tuple[int, int], target: int = 256) -> tuple[int, "torch.Tensor"]:
    """(axis, indices): an evenly spaced sample of at most ``target`` rows (axis 0) or columns (axis 1)
    along the longer side, on which component survival is estimated (all of them when fewer). 256
    rows of a matrix are ≥ 256·min(m, n) entries, plenty for an energy share; 1024 made the estimate
    cost as much as a small model's SVDs (tools/bench_decompose.py)."""
    import torch

    m, n = shape
    axis, size = (0, m) if m >= n else (1, n)
    step = max(1, -(-size // target))
    return axis, torch.arange(0, size, step)


def component_samples(
    proj, frame, axis: int, idx: "torch.Tensor", delta_sample: "torch.Tensor"
) -> dict[str, "torch.Tensor"]:
    """ΔW_diag, ΔW_off and ΔW_null on the sampled rows (axis 0) or columns (axis 1), given ΔW there.

    One rank-r product (the diagonal part); the off-diagonal part is what remains of ΔW, ΔW − diag −
    null, instead of U_s (P − diag P) Vᵀ: two products fewer, which on small models (where the sample
    is the whole matrix) cost as much as the frame's SVD. Its rounding is relative to ‖ΔW‖ (float32
    eps), far below the bf16 round trip it is used to measure. ``proj``, ``frame``: the matrix's
    :class:`~grrr_stream.geometry.frame.Projection` and :class:`~grrr_stream.geometry.frame.Frame`."""
    U, V, P = frame.U, frame.V, proj.P
    p = P.diagonal()
    idx = idx.to(U.device)
    if axis == 0:
        diag = (U[idx] * p) @ V.T
        null = proj.null[idx]
    else:
        diag = U @ (p[:, None] * V[idx].T)
        null = proj.null[:, idx]
    if proj.null_is_structural_zero:
        null = null.new_zeros(null.shape)
    return {"diag": diag, "off": delta_sample - diag - null, "null": null}


def _read(opts: Any, matrix: Any, w0: "torch.Tensor", w1: "torch.Tensor") -> SurvivalSample:
    axis, idx = survival_sample(tuple(w0.shape))
    sample = (w0[idx] if axis == 0 else w0[:, idx]).clone()
    return SurvivalSample(axis, idx, sample, torch_dtype(opts.survival_dtype))


def _delta(state: MatrixState, opts: Any, sample: Optional[SurvivalSample]) -> None:
    """ΔW on the sampled rows or columns, before it becomes the null residual."""
    if sample is not None:
        idx = sample.indices.to(state.delta.device)
        state.scratch["survival"] = (state.delta[idx] if sample.axis == 0 else state.delta[:, idx]).clone()


def _split(state: MatrixState, opts: Any, sample: Optional[SurvivalSample]) -> Optional[dict]:
    if sample is None:
        return None
    device = state.proj.P.device
    idx = sample.indices.to(device)
    parts = component_samples(state.proj, state.frame, sample.axis, idx, state.scratch.pop("survival"))
    kept = round_trip_survival(sample.w0.to(device), parts, sample.target)
    return {KEPT.at(dtype=opts.survival_dtype, part=c).name: v for c, v in kept.items()}


KEPT = Column(
    "{dtype}_kept_{part}",
    "{part} energy kept through {dtype}",
    short="{part} kept ({dtype})",
    shown=DEFAULT_SHOWN | {FIGURE, CONSOLE},
)

ANALYSIS = Analysis(
    "survival",
    SurvivalSettings,
    {"delta": _delta, "split": _split},
    (KEPT,),
    profiles={"paper": {"survival_dtype": None}},
    result_defaults={"survival_dtype": "bfloat16"},
    result_group="analyses",
    enabled=lambda opts: opts.survival_dtype is not None,
    read=_read,
)

"""The dtype fidelity report of a variant: how much of each intended update survives the cast.

Each matrix is compared *after* its cast to the output dtype with the intended update,
in float64 sums: a bf16 variant of an RL-sized update (‖ΔW‖ ≈ 3e-4 ‖W0‖, below bf16's
rounding of W0) silently loses most of it, and the report says so.

Two more things the report states, both from what the build reads anyway:

- the store's own rounding (:mod:`.store_error`): a store kept in bfloat16/float16
  rounds P and the null residual that composed variants use, an error the cast comparison
  cannot see (it measures against the update as the store holds it). Each row carries the
  estimated norm of that error and a hard bound on it; the summary adds them to the cast
  error (``total_error``: against the update computed exactly from the two checkpoints);
- the dtypes of the two checkpoints' decomposed matrices, and whether the sides differ.

A channel variant (:mod:`.channels`) intends only the part of its update on its channel set, and
is measured against that. Its report also says how much of the unrestricted update that part is:
``channel_share`` = ‖M ⊙ X‖² / ‖X‖² summed over matrices, X the variant's update on every channel
(ΔW for channels-outlier/-rest, Σ w_c ΔW_c for a component: Σ w_c² e_c, the components being
orthogonal), per matrix in the CSV's ``unrestricted_norm`` column. The shares of the ``outlier`` and
``rest`` variants of one update add up to 1.
"""

from __future__ import annotations

import math
import sys
import warnings
from dataclasses import asdict, dataclass, field
from typing import Optional

import torch

from ..dtypes import SIXTEEN_BIT
from ..files import to_csv

FIDELITY_WARN = 0.01  # warn when more than 1 % of an intended update is lost to the cast

# Casts that keep every value: a base/full variant keeps its checkpoint's dtype where the
# requested variant dtype would round it (a float32 checkpoint asked for in bfloat16).
_EXACT_INTO = {
    torch.bfloat16: (torch.bfloat16, torch.float32, torch.float64),
    torch.float16: (torch.float16, torch.float32, torch.float64),
    torch.float32: (torch.float32, torch.float64),
    torch.float64: (torch.float64,),
}


def casts_exactly(src: torch.dtype, dst: torch.dtype) -> bool:
    """True when casting ``src`` values to ``dst`` keeps every value."""
    return dst in _EXACT_INTO.get(src, ())


@dataclass
class MatrixFidelity:
    name: str
    layer: int
    module: str
    intended_norm: float
    error_norm: float
    fidelity: float  # ‖cast(W_variant) − W0 − intended‖ / ‖intended‖ (0 when both are 0)
    energy_survived: float  # max(0, 1 − fidelity²): share of the intended update's energy kept, in [0, 1]
    removed_norm: float = 0.0  # ‖R‖ of the random control (= ‖diag P‖), or ‖band block‖ of a band variant
    expert: Optional[int] = None  # expert index of a mixture-of-experts matrix (empty otherwise)
    # the store's rounding of the parts this variant takes from it (P, the null residual): estimated norm
    # (root of its expected square), its ratio to ‖intended‖, and a bound that always holds
    store_error_norm: float = 0.0
    store_error: float = 0.0
    store_error_bound: float = 0.0


@dataclass
class FidelityReport:
    variant: str
    dtype: str
    rows: list[MatrixFidelity] = field(default_factory=list)
    store_dtype: str = "float32"
    base_dtype: str = ""  # dtype(s) of the decomposed matrices in the base checkpoint ('bfloat16')
    post_dtype: str = ""
    # a channel variant: its channel set (ChannelRestriction.metadata), and per matrix ‖X‖² of the update
    # it restricts (see the module doc); empty for every other variant
    channels: Optional[dict] = None
    unrestricted: dict = field(default_factory=dict)

    def summary(self) -> dict:
        i2 = sum(r.intended_norm**2 for r in self.rows)
        e2 = sum(r.error_norm**2 for r in self.rows)
        s2 = sum(r.store_error_norm**2 for r in self.rows)
        b2 = sum(r.store_error_bound**2 for r in self.rows)  # ‖E‖² = Σ‖E_m‖² ≤ Σ bound_m²
        differ = self.base_dtype != self.post_dtype
        out = {
            "variant": self.variant,
            "dtype": self.dtype,
            "matrices": len(self.rows),
            "fidelity": _ratio(e2, i2),
            "fidelity_max": max((r.fidelity for r in self.rows), default=0.0),
            "energy_survived": _kept(e2, i2),
            "intended_norm": math.sqrt(i2),
            "store_dtype": self.store_dtype,
            "store_error": _ratio(s2, i2),
            "store_error_max": max((r.store_error for r in self.rows), default=0.0),
            "store_error_bound": _ratio(b2, i2),
            # cast and store rounding are independent roundings: their squares add
            "total_error": _ratio(e2 + s2, i2),
            "base_dtype": self.base_dtype,
            "post_dtype": self.post_dtype,
            "sides_differ": differ,
            "sides": (
                f"base {self.base_dtype}, post {self.post_dtype}: the sides differ in dtype"
                if differ
                else f"base and post {self.base_dtype}"
            ),
        }
        if self.channels is not None:
            u2 = sum(self.unrestricted.values())
            c = self.channels
            out.update(
                channels=c["set"],
                outlier_channels=c["count"],
                kept_channels=c["count"] if c["set"] == "outlier" else c["hidden"] - c["count"],
                channel_share=i2 / u2 if u2 > 0 else 0.0,
                unrestricted_norm=math.sqrt(u2),
            )
        return out

    def add(self, row: MatrixFidelity) -> None:
        self.rows.append(row)

    def csv(self) -> str:
        if self.channels is None:
            return to_csv(asdict(r) for r in self.rows)
        return to_csv(
            {**asdict(r), "unrestricted_norm": math.sqrt(self.unrestricted.get(r.name, 0.0))} for r in self.rows
        )

    def account(
        self,
        name: str,
        layer: int,
        module: str,
        w0: torch.Tensor,
        out: torch.Tensor,
        intended: Optional[torch.Tensor],
        removed: float,
        source: Optional[torch.Tensor] = None,
        fill: bool = False,
        expert: Optional[int] = None,
        store: tuple[float, float] = (0.0, 0.0),
    ) -> None:
        """Add the row of one matrix: fidelity of the cast variant against the intended update, by row blocks.

        ``intended`` is the update relative to W0; for copied matrices pass ``source`` (W0 or
        W1) instead, the intended update then being source − W0 exactly. With ``fill`` the
        same pass also writes out = cast(W0 + intended), formed in float64 (bounded memory).
        ``store``: (expected square, bound) of the store's rounding in ``intended``
        (:func:`.store_error.rounding`).
        """
        step = max(1, (1 << 22) // max(1, w0.shape[1]))
        if (
            fill
            and intended is not None
            and out.dtype == torch.float32
            and intended.dtype == torch.float32
            and casts_exactly(w0.dtype, torch.float32)
        ):
            i2, e2 = _twosum_pass(w0, out, intended, step)
        else:
            i2, e2 = _float64_pass(w0, out, intended, source, fill, step)
        s2, bound = store
        self.add(
            MatrixFidelity(
                name,
                layer,
                module,
                math.sqrt(i2),
                math.sqrt(e2),
                _ratio(e2, i2),
                _kept(e2, i2),
                removed,
                expert,
                math.sqrt(s2),
                _ratio(s2, i2),
                bound,
            )
        )


def _kept(e2: float, i2: float) -> float:
    """max(0, 1 − e2 / i2): the share of the intended energy that survives the cast, in [0, 1] (1 when
    nothing was intended). The error counts both what is lost or overshot along the intended update and
    the rounding noise orthogonal to it; the same definition as the decomposition's ``{dtype}_kept_*``
    (:func:`grrr_stream.geometry.analyses.survival.round_trip_survival`). ⟨realised, intended⟩²/‖intended‖⁴, used
    before, could exceed 1 and called an update buried in noise 98 % kept."""
    return max(0.0, 1.0 - e2 / i2) if i2 > 0 else 1.0


def _ratio(e2: float, i2: float) -> float:
    """sqrt(e2 / i2): an error relative to the intended update (0 when both are 0)."""
    return math.sqrt(e2 / i2) if i2 > 0 else (0.0 if e2 == 0 else math.inf)


def _twosum_pass(w0: torch.Tensor, out: torch.Tensor, intended: torch.Tensor, step: int) -> tuple[float, float]:
    """Fill out = fl(W0 + intended) in float32; ‖intended‖² and ‖error‖² by row blocks.

    float32 out of float32 arithmetic: the rounding error of out = fl(W0 + intended) is
    obtained exactly in float32 by Knuth's TwoSum (a + b = s + e, exactly), so no float64
    pass is needed; only the sums are accumulated in float64.
    """
    i2 = e2 = 0.0
    for i in range(0, w0.shape[0], step):
        a = w0[i : i + step].float()
        b = intended[i : i + step].cpu()
        s_ = a + b
        bb = s_ - a
        e = (a - (s_ - bb)) + (b - bb)  # realised = s − a = b − e; error = −e
        out[i : i + step] = s_
        # per block, BLAS dot products (float32, blocked accumulation: relative error ~1e-7 on
        # blocks of 4 M entries), summed across blocks in float64
        b, e = b.reshape(-1), e.reshape(-1)
        i2 += float(torch.dot(b, b))
        e2 += float(torch.dot(e, e))
    return i2, e2


def _float64_pass(
    w0: torch.Tensor,
    out: torch.Tensor,
    intended: Optional[torch.Tensor],
    source: Optional[torch.Tensor],
    fill: bool,
    step: int,
) -> tuple[float, float]:
    """‖intended‖² and ‖realised − intended‖² in float64, by row blocks (where a
    cast to a narrower dtype is measured)."""
    i2 = e2 = 0.0
    for i in range(0, w0.shape[0], step):
        base = w0[i : i + step].double()
        if intended is None:
            want = source[i : i + step].double() - base
        else:
            want = intended[i : i + step].double().cpu()
        if fill:
            out[i : i + step] = (base + want).to(out.dtype)
        realised = out[i : i + step].double() - base
        err = realised - want
        i2 += float((want * want).sum())
        e2 += float((err * err).sum())
    return i2, e2


def warn_if_lossy(summary: dict, stream=None) -> None:
    if summary["fidelity"] > FIDELITY_WARN or summary["fidelity_max"] > FIDELITY_WARN:
        msg = (
            f"WARNING: variant '{summary['variant']}' in {summary['dtype']} loses "
            f"{100 * summary['fidelity']:.1f} % of its intended update to the cast (worst matrix "
            f"{100 * summary['fidelity_max']:.1f} %; energy kept {100 * summary['energy_survived']:.1f} %). "
            "Use variant dtype float32 to keep small updates."
        )
        warnings.warn(msg, stacklevel=2)
        print(msg, file=stream or sys.stderr)


def store_warning(summary: dict) -> Optional[str]:
    """One line when the variant took parts rounded by a 16-bit store, with the error that implies."""
    if summary.get("store_dtype") not in SIXTEEN_BIT or not summary.get("store_error_bound"):
        return None
    return (
        f"WARNING: variant '{summary['variant']}': the store keeps P and the null residual in "
        f"{summary['store_dtype']}; their rounding puts an estimated {summary['store_error']:.2g} relative error "
        f"(at most {summary['store_error_bound']:.2g}) into the variant's update, beyond the cast's "
        f"{summary['fidelity']:.2g} (a store in the compute dtype adds none). Decompose with store_dtype "
        "float32 for exact components."
    )


def warn_if_store_rounded(summary: dict, stream=None) -> None:
    msg = store_warning(summary)
    if msg:
        print(msg, file=stream or sys.stderr)

"""Off-diagonal cosine geometry of two transitions that share a base frame (``grrr-stream compare``),
with the bootstrap CI and the matched isotropic null of :mod:`grrr_stream.stats.summaries`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from ..dtypes import SIXTEEN_BIT
from ..errors import StoreMismatchError
from ..store.transition_store import StoredTransition
from .summaries import NullTest, bootstrap_ci, median_cosine_null


def _offdiag_sums(a, b):
    """Dask scalars Σ_off a·b, Σ_off a², Σ_off b² (float64), without materialising masks."""
    import dask.array as da

    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    da_, db_ = da.diagonal(a64), da.diagonal(b64)
    return (
        (a64 * b64).sum() - (da_ * db_).sum(),
        (a64 * a64).sum() - (da_ * da_).sum(),
        (b64 * b64).sum() - (db_ * db_).sum(),
    )


def check_shared_frame(a: StoredTransition, b: StoredTransition) -> None:
    """Refuse to compare transitions whose P matrices live in different frames."""
    problems = []
    if a.manifest["identity"]["base_fingerprint"] != b.manifest["identity"]["base_fingerprint"]:
        problems.append("their base checkpoints differ")
    if list(a.matrices) != list(b.matrices):
        problems.append("they decompose different sets of matrices")
    else:
        bad = [n for n in a.matrices if a.matrices[n]["frame_key"] != b.matrices[n]["frame_key"]]
        if bad:
            problems.append(
                f"{len(bad)} matrices use different frames (compute dtype or core threshold), e.g. {bad[0]}"
            )
    if problems:
        raise StoreMismatchError(
            f"cannot compare {a.path} with {b.path}: "
            + "; ".join(problems)
            + ". Both transitions must start from the same base with the same frame settings."
        )


# The stepwise comparison (SFT → RL: the incremental RL step ΔW_incr against its SFT step ΔW_SFT) is the kind
# 'sequential' wherever a kind is stored or hashed: unit ids and keys (compare/sequential/...), the bootstrap's
# random streams, the comparisons' files, CSV and JSON, MLflow's params, runs and tags. It was named so before issue
# 49 and keeps that spelling there, so that workdirs resume and results stay as they were; what a person reads
# (flags, config keys, labels, docs) says 'stepwise'.
STEPWISE = "sequential"
KINDS = (STEPWISE, "independent", "cumulative")


def stored_kind(kind: str) -> str:
    """A comparison's kind as results spell it: ``stepwise`` is :data:`STEPWISE`; the others as they are."""
    return STEPWISE if kind == "stepwise" else kind


def kind_label(kind: str) -> str:
    """A comparison's kind as a person reads it: the stored :data:`STEPWISE` is ``stepwise``."""
    return "stepwise" if stored_kind(kind) == STEPWISE else kind


@dataclass
class Comparison:
    """Off-diagonal geometry of two updates in one base frame.

    kinds: stepwise (:data:`STEPWISE`; a = base→SFT, b = base→RL; compares ΔW_SFT with ΔW_incr = W_RL − W_SFT),
    ``independent`` (two models neither of which descends from the other, compared as their
    updates from their nearest common ancestor C: P_a − P_C and P_b − P_C; P_C = 0 when C is
    the base) or ``cumulative`` (the two cumulative updates from the base as they are).
    """

    kind: str
    a: str
    b: str
    rows: list[dict]  # per matrix: name, layer, module, d, cos_off, off_norm_a, off_norm_b
    median: float
    ci: tuple[float, float]
    null: NullTest
    norms: dict[str, float] = field(default_factory=dict)
    ancestor: Optional[str] = None  # store of base→C for an independent pair whose C is not the base
    ancestor_label: Optional[str] = None  # the model the two updates are taken from

    def summary(self) -> dict:
        return {
            "kind": self.kind,
            "a": self.a,
            "b": self.b,
            "ancestor": self.ancestor_label or "",
            "ancestor_store": self.ancestor or "",
            "n_matrices": len(self.rows),
            "median_cos_off": self.median,
            "ci_lo": self.ci[0],
            "ci_hi": self.ci[1],
            "p_value": self.null.p_value,
            "null_mean": self.null.null_mean,
            "null_std": self.null.null_std,
            "null_lo": self.null.envelope[0],
            "null_hi": self.null.envelope[1],
            "null_draws": self.null.draws,
            "verdict": self.null.verdict,
            **self.norms,
        }


def _refuse_reduced_precision_differences(stores: Sequence[StoredTransition], what: str) -> None:
    low = [t for t in stores if t.store_dtype() in SIXTEEN_BIT]
    if low:
        raise StoreMismatchError(
            f"{what} takes differences of stored P matrices, and {low[0].path} stores them in "
            f"{low[0].store_dtype()}: an increment that is a small fraction of the cumulative update keeps few "
            "or none of its bits there. Decompose these transitions with store_dtype float32 (or float64)."
        )


def _refuse_null_norms_only(stores: Sequence[StoredTransition], what: str) -> None:
    """Increments need the null residual arrays; a store that kept only their norms cannot give them."""
    short = [t for t in stores if t.manifest["settings"].get("null_storage", "array") != "array"]
    if short:
        raise StoreMismatchError(
            f"{what} needs the norm of the increment, which takes differences of the stored null residual "
            f"arrays, and {short[0].path} kept only their norms (null_storage: norms). Decompose these "
            "transitions again with null_storage: array (the default)."
        )


def _increment_norm_sq(t: StoredTransition, ref: StoredTransition, name: str):
    """Dask scalar ‖ΔW_t − ΔW_ref‖² of one matrix from stored P and null arrays (float64)."""
    dP = t.dask_array(name, "P").astype(np.float64) - ref.dask_array(name, "P").astype(np.float64)
    sq = (dP**2).sum()
    has_t, has_r = t.has_array(name, "null"), ref.has_array(name, "null")
    if has_t or has_r:
        Nt = t.dask_array(name, "null").astype(np.float64) if has_t else 0.0
        Nr = ref.dask_array(name, "null").astype(np.float64) if has_r else 0.0
        sq = sq + ((Nt - Nr) ** 2).sum()
    return sq


def compare(
    a: StoredTransition,
    b: StoredTransition,
    kind: str,
    *,
    ancestor: Optional[StoredTransition] = None,
    ancestor_label: Optional[str] = None,
    resamples: int = 10_000,
    null_draws: int = 10_000,
    seed: int = 0,
    alpha: float = 0.05,
    scheduler: Any = None,
) -> Comparison:
    """Off-diagonal cosine geometry of two transitions in the shared base frame.

    ``stepwise`` (stored as :data:`STEPWISE`): ``a`` is base→SFT and ``b`` is base→RL (cumulative); the increment
    P_incr = P_cum − P_SFT (and null_incr likewise) is formed lazily from the stored
    arrays, so no SVD is needed. ``independent``: ``a`` and ``b`` are base→A and base→B;
    with ``ancestor`` (base→C, C their nearest common ancestor) their updates from C,
    P_A − P_C and P_B − P_C, are compared; without it C is the base. ``cumulative``: the
    two updates from the base as they are (what a shared ancestor update dominates).
    All stores must share the base frame.
    """
    import dask

    kind = stored_kind(kind)
    _check_comparable(a, b, kind, ancestor)
    sums, norm_terms, meta = _cosine_graphs(a, b, kind, ancestor)
    computed_sums, computed_norms = dask.compute(sums, norm_terms, scheduler=scheduler or "threads")
    rows = _cosine_rows(meta, computed_sums)
    cos = np.array([r["cos_off"] for r in rows])
    ident = a.manifest["identity"]["post_fingerprint"], b.manifest["identity"]["post_fingerprint"]
    stream = f"{kind}:{ident[0]}:{ident[1]}"
    if ancestor is not None:
        stream += f":from:{ancestor.manifest['identity']['post_fingerprint']}"
    median = float(np.median(cos))
    ci_job = bootstrap_ci(cos, resamples=resamples, seed=seed, stream=stream + ":boot", delayed=True)
    null_job = median_cosine_null(
        median, [r["d"] for r in rows], draws=null_draws, seed=seed, stream=stream + ":null", alpha=alpha, delayed=True
    )
    ci, null = dask.compute(ci_job, null_job, scheduler=scheduler or "threads")
    norms = _update_norms(a, b, kind, ancestor, computed_norms)
    if ancestor_label is None:
        ancestor_label = (
            Path(ancestor.manifest["post"]).name
            if ancestor is not None
            else (Path(a.manifest["base"]).name if kind == "independent" else None)
        )
    return Comparison(
        kind=kind,
        a=str(a.path),
        b=str(b.path),
        rows=rows,
        median=median,
        ci=(float(ci["median"][0]), float(ci["median"][1])),
        null=null,
        norms=norms,
        ancestor=str(ancestor.path) if ancestor is not None else None,
        ancestor_label=ancestor_label,
    )


def _check_comparable(
    a: StoredTransition, b: StoredTransition, kind: str, ancestor: Optional[StoredTransition]
) -> None:
    """Refuse an unknown kind, and stores that do not share the frame or cannot give the differences."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}")
    if ancestor is not None and kind != "independent":
        raise ValueError("an ancestor applies to independent comparisons only")
    check_shared_frame(a, b)
    if ancestor is not None:
        check_shared_frame(a, ancestor)
    if kind == STEPWISE:
        _refuse_reduced_precision_differences([a, b], "a stepwise comparison")
        _refuse_null_norms_only([a, b], "a stepwise comparison")
    elif ancestor is not None:
        _refuse_reduced_precision_differences([a, b, ancestor], "an independent comparison from a common ancestor")
        _refuse_null_norms_only([a, b, ancestor], "an independent comparison from a common ancestor")


def _cosine_graphs(
    a: StoredTransition, b: StoredTransition, kind: str, ancestor: Optional[StoredTransition]
) -> tuple[list, list, list]:
    """Per matrix, lazily: the off-diagonal sums of the two compared updates, the squared norms of the
    increments (stepwise, or from a common ancestor), and (name, layer, module, d)."""
    sums, norm_terms, meta = [], [], []
    for name, attrs in a.matrices.items():
        Pa, Pb = a.dask_array(name, "P"), b.dask_array(name, "P")
        if kind == STEPWISE:
            Pb = Pb.astype(np.float64) - Pa.astype(np.float64)
            norm_terms.append((_increment_norm_sq(b, a, name),))
        elif ancestor is not None:
            Pc = ancestor.dask_array(name, "P").astype(np.float64)
            Pa, Pb = Pa.astype(np.float64) - Pc, Pb.astype(np.float64) - Pc
            norm_terms.append((_increment_norm_sq(a, ancestor, name), _increment_norm_sq(b, ancestor, name)))
        sums.append(_offdiag_sums(Pa, Pb))
        r = Pa.shape[0]
        meta.append((name, attrs["layer"], attrs["module"], r * r - r))
    return sums, norm_terms, meta


def _cosine_rows(meta: list, computed_sums: list) -> list[dict]:
    rows = []
    for (name, layer, module, d), (ab, aa, bb) in zip(meta, computed_sums):
        cos = ab / math.sqrt(aa * bb) if aa > 0 and bb > 0 else 0.0
        rows.append(
            {
                "name": name,
                "layer": layer,
                "module": module,
                "d": d,
                "cos_off": cos,
                "off_norm_a": math.sqrt(max(aa, 0.0)),
                "off_norm_b": math.sqrt(max(bb, 0.0)),
            }
        )
    return rows


def _update_norms(
    a: StoredTransition, b: StoredTransition, kind: str, ancestor: Optional[StoredTransition], computed_norms: list
) -> dict[str, float]:
    """The sizes of the compared updates: relative to the cumulative one for a stepwise pair."""
    na = math.sqrt(sum(r["delta_fro"] ** 2 for r in a.rows()))
    nb = math.sqrt(sum(r["delta_fro"] ** 2 for r in b.rows()))
    if kind == STEPWISE:
        n_incr = math.sqrt(sum(t[0] for t in computed_norms))
        return {"norm_sft": na / nb, "norm_incr": n_incr / nb, "norm_cum": 1.0, "norm_cum_abs": nb}
    if ancestor is not None:  # the two steps from the common ancestor
        na = math.sqrt(sum(t[0] for t in computed_norms))
        nb = math.sqrt(sum(t[1] for t in computed_norms))
    return {"norm_a": na, "norm_b": nb, "norm_ratio": min(na, nb) / max(na, nb) if max(na, nb) > 0 else 0.0}

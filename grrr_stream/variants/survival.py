"""How much of each component of a stored transition survives W0 + component rounded to a 16-bit dtype, per
matrix and pooled over the model: what an engine in that dtype keeps of a variant's update.

Per matrix, the estimate is the decomposition's own (:func:`grrr_stream.geometry.analyses.survival.round_trip_survival`
on the rows or columns :func:`~grrr_stream.geometry.analyses.survival.survival_sample` picks): read from the store's
metrics (``{dtype}_kept_{diag,off,null}``) when it was decomposed with that ``survival_dtype``, else measured
here from the store and the two checkpoints, with the same functions on the same sample. Pooled over matrices
as the variants' fidelity report pools them: Σ kept energy / Σ intended energy, each matrix's share weighted by
its component's energy ``e_{c}`` (the whole matrix's, from the store's metrics).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch

from ..checkpoints.reader import Checkpoint
from ..dtypes import torch_dtype
from ..errors import GrrrError
from ..geometry.analyses.survival import KEPT, component_samples, round_trip_survival, survival_sample
from ..geometry.frame import Frame, Projection, project
from ..store.transition_store import StoredTransition
from .compose import stored_frame

COMPONENTS = ("diag", "off", "null")


class DamagedSurvivalError(GrrrError, ValueError):
    """The store's survival shares or energies are not what a decomposition writes (a share outside [0, 1], an
    energy below 0, a string, a missing field): an engine dtype must not rest on them."""


def _number(row: dict, field: str, high: float) -> float:
    """``row[field]`` as a float when it is a finite real in [0, ``high``], else :class:`DamagedSurvivalError`
    naming the matrix and the field."""
    v = row.get(field)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= high:  # NaN fails the range too
        raise DamagedSurvivalError(
            f"matrix {row.get('name')!s}: {field} = {v!r} is not a number in [0, {high:g}]"[:300]
        )
    return float(v)


def stored_columns(transition: StoredTransition, dtype: str) -> Optional[list[dict]]:
    """Per matrix {name, e_diag, e_off, e_null, kept_diag, kept_off, kept_null} from the store's metrics, or None
    when the store was decomposed without the survival analysis in ``dtype`` (profile 'paper', another or no
    ``survival_dtype``). A share outside [0, 1] or an energy that is not a finite number ≥ 0 is
    :class:`DamagedSurvivalError`: read back, not trusted."""
    keys = [KEPT.at(dtype=dtype, part=c).name for c in COMPONENTS]
    out = []
    for row in transition.rows():
        if any(row.get(k) is None for k in keys):
            return None
        out.append(
            {
                "name": row["name"],
                **{f"e_{c}": _number(row, f"e_{c}", math.inf) for c in COMPONENTS},
                **{f"kept_{c}": _number(row, k, 1.0) for c, k in zip(COMPONENTS, keys)},
            }
        )
    return out


def measured_columns(transition: StoredTransition, dtype: str) -> list[dict]:
    """The same rows as :func:`stored_columns`, measured: per matrix, W0 and W1 read from the checkpoints, the
    frame from the store's frame cache (recomputed when absent), P and the null residual from the store (the
    projection recomputed when the store kept only the null residual's norms); the shares on the decomposition's
    sample of rows or columns. Costs a read of both checkpoints and, per matrix, one rank-r product on the sample
    (tools/bench_dtype_choice.py)."""
    m = transition.manifest
    base, post = Checkpoint.open(Path(m["base_folder"])), Checkpoint.open(Path(m["post_folder"]))
    cd, target = torch_dtype(m["settings"]["compute_dtype"]), torch_dtype(dtype)
    out = []
    for name, attrs in transition.matrices.items():
        w0, w1 = base.read_matrix(attrs), post.read_matrix(attrs)
        axis, idx = survival_sample(tuple(w0.shape))
        frame = stored_frame(transition, name, attrs, w0, cd)
        delta = w1.to(cd).sub_(w0.to(cd))
        del w1
        delta_sample = (delta[idx] if axis == 0 else delta[:, idx]).clone()
        proj = _projection(transition, name, attrs, delta, frame, cd)
        kept = round_trip_survival(
            (w0[idx] if axis == 0 else w0[:, idx]), component_samples(proj, frame, axis, idx, delta_sample), target
        )
        metrics = attrs["metrics"]
        out.append(
            {
                "name": name,
                **{f"e_{c}": _number({"name": name, **metrics}, f"e_{c}", math.inf) for c in COMPONENTS},
                **{f"kept_{c}": kept[c] for c in COMPONENTS},
            }
        )
    return out


def _projection(
    transition: StoredTransition, name: str, attrs: dict, delta: torch.Tensor, frame: Frame, cd: torch.dtype
) -> Projection:
    """P and the null residual as the store holds them; projected again where it kept only the null's norms."""
    kept = attrs.get("null_kept")
    if attrs.get("null_stored") or kept == "none":
        P = transition.read_tensor(name, "P").to(cd)
        null = transition.read_tensor(name, "null").to(cd) if attrs.get("null_stored") else torch.zeros_like(delta)
        return Projection(P, null, null_is_structural_zero=kept == "none")
    return project(delta, frame, in_place=True)


@dataclass(frozen=True)
class ComponentSurvival:
    """One component pooled over a transition's matrices: ``kept`` = Σ kept energy / Σ energy, and the matrix
    that keeps the smallest share of it (among those where it has energy)."""

    component: str
    kept: float
    worst_matrix: str
    worst_kept: float
    matrices: int


def pooled(rows: Sequence[dict], components: Sequence[str] = COMPONENTS) -> dict[str, ComponentSurvival]:
    """Each component of ``components`` pooled over ``rows`` (:func:`stored_columns` or :func:`measured_columns`);
    a component with no energy anywhere keeps all of it (1.0), as the fidelity report says of a zero update. A share
    that is not a number counts as nothing kept: an estimate that failed must not pass a floor."""
    out = {}
    for c in components:
        have = [r for r in rows if r[f"e_{c}"] > 0]
        share = {r["name"]: r[f"kept_{c}"] if math.isfinite(r[f"kept_{c}"]) else 0.0 for r in have}
        total = sum(r[f"e_{c}"] for r in have)
        kept = sum(r[f"e_{c}"] * share[r["name"]] for r in have) / total if total > 0 else 1.0
        worst = min(have, key=lambda r: share[r["name"]], default=None)
        out[c] = ComponentSurvival(
            c, kept, worst["name"] if worst else "", share[worst["name"]] if worst else 1.0, len(have)
        )
    return out


def transition_survival(
    transition: StoredTransition, dtype: str = "bfloat16", components: Sequence[str] = COMPONENTS
) -> tuple[dict[str, ComponentSurvival], str]:
    """(each component pooled over the transition, where the per-matrix shares come from: 'stored' or
    'measured')."""
    rows = stored_columns(transition, dtype)
    source = "stored"
    if rows is None:
        rows, source = measured_columns(transition, dtype), "measured"
    return pooled(rows, components), source

"""The engine dtype of one evaluation: ``engine.dtype: auto`` resolved for its transition before any engine
starts (docs/evaluation.md, "The engine dtype").

'auto' runs the engine in bfloat16 when every part of the stored update that the evaluated variants carry keeps
at least ``engine.auto_min_energy`` of its energy through bf16 rounding of W0 + part, pooled over the model
(:mod:`grrr_stream.variants.survival`), and in float32 otherwise. A variant is judged by the parts it is made of
(:func:`evaluated_parts`); ``base`` is W0 and carries no update. A variant that copies W1's entries (``full``,
``proj``, ``channels-outlier``/``-rest``) is exact in bf16 when both checkpoints hold their decomposed matrices
in bf16 already (W0 + ΔW = W1 rounds to itself); with wider checkpoints it is judged by all three parts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping, Optional, Sequence

from ..checkpoints.reader import Checkpoint
from ..store.transition_store import StoredTransition
from ..variants.spec import VariantSpec
from ..variants.survival import ComponentSurvival, DamagedSurvivalError, stored_columns, transition_survival
from .settings import EngineSettings

NARROW = "bfloat16"  # the dtype 'auto' takes where the update survives it
WIDE = "float32"  # and where it does not


def evaluated_parts(specs: Sequence[VariantSpec], checkpoints_narrow: bool) -> dict[str, list[str]]:
    """Part of the stored update (diag, off, null) → the variants that carry it. A composed variant carries the
    parts it weighs, a band variant the off-diagonal part, a random-removal control also the diagonal part (its
    removed core component R has ‖diag P‖'s norm, in the same frame). A variant that copies W1's entries carries
    nothing rounding can take when ``checkpoints_narrow`` (both checkpoints in bf16), else all three parts."""
    out: dict[str, list[str]] = {}
    for s in specs:
        if s.is_base:
            continue
        copies_w1 = s.is_full or (
            (s.diag, s.off, s.null) == (1.0, 1.0, 1.0) and s.random_removal_seed is None and s.band is None
        )
        if copies_w1:
            parts = set() if checkpoints_narrow else {"diag", "off", "null"}
        else:
            parts = {c for c, w in (("diag", s.diag), ("off", s.off), ("null", s.null)) if w != 0.0}
            parts |= {"off"} if s.band is not None else set()
            parts |= {"diag"} if s.random_removal_seed is not None else set()
        for c in sorted(parts):
            out.setdefault(c, []).append(s.name)
    return out


def choose_engine_dtype(
    survival: Mapping[str, ComponentSurvival], floor: float, needed_by: Optional[Mapping[str, Sequence[str]]] = None
) -> tuple[str, str]:
    """(dtype, reason): bfloat16 when every part in ``survival`` keeps at least ``floor`` of its energy through
    bf16 rounding, else float32, the reason naming each part below the floor (its share, its worst matrix and the
    variants that carry it). No part to judge (only base and checkpoints exact in bf16): bfloat16."""
    if not survival:
        return NARROW, "no evaluated variant carries a part of the update that bf16 rounding can take"
    shown = lambda s: f"{s.component} {s.kept:.4f}"  # noqa: E731
    failed = [s for s in survival.values() if s.kept < floor]
    if not failed:
        worst = min(survival.values(), key=lambda s: s.kept)
        return NARROW, (
            f"every part keeps at least {floor:g} of its energy in bf16 ("
            f"{', '.join(shown(s) for s in survival.values())}; lowest {worst.component})"
        )
    said = []
    for s in sorted(failed, key=lambda s: s.kept):
        users = ", ".join((needed_by or {}).get(s.component, ()))
        said.append(
            f"{s.component} keeps {s.kept:.4f} < {floor:g} (worst matrix {s.worst_matrix}: "
            f"{s.worst_kept:.4f})" + (f", carried by {users}" if users else "")
        )
    return WIDE, "bf16 rounding takes too much: " + "; ".join(said)


@dataclass(frozen=True)
class EngineChoice:
    """The dtype an evaluation's engine runs in and why: ``requested`` (the setting), ``dtype`` (what runs),
    ``reason``; for 'auto' also the floor, each judged part's pooled share (``parts``), where the per-matrix
    shares came from ('stored' in the store's metrics, or 'measured') and the seconds that took."""

    requested: str
    dtype: str
    reason: str
    floor: Optional[float] = None
    parts: dict = field(default_factory=dict)
    source: str = ""
    seconds: float = 0.0

    def record(self) -> dict:
        return {
            "requested": self.requested,
            "dtype": self.dtype,
            "reason": self.reason,
            "floor": self.floor,
            "parts": self.parts,
            "source": self.source,
            "seconds": round(self.seconds, 3),
        }


def resolve_engine_dtype(
    transition: StoredTransition,
    specs: Sequence[VariantSpec],
    engine: EngineSettings,
    last_step: Optional[StoredTransition] = None,
    *,
    measure: bool = True,
) -> Optional[EngineChoice]:
    """The engine dtype of evaluating ``specs`` of ``transition``: the setting itself unless it is 'auto'.
    ``measure`` False: None where a store lacks the stored shares, instead of measuring them (a forecast reads
    what the decomposition stored, it does not read checkpoints).

    ``last_step``: for a transition from the base to a model trained from an intermediate one, the store of that
    last step (intermediate → W1). Its parts are judged too: an RL step on top of an SFT model is small against the
    cumulative update, so the cumulative parts can keep 99.9 % of their energy in bf16 while the RL step inside them
    is rounded away (bf16(W1) falls back towards the intermediate model)."""
    if engine.dtype != "auto":
        return EngineChoice(engine.dtype, engine.dtype, "set in the engine settings")
    began = time.monotonic()
    if not measure and any(stored_columns(t, NARROW) is None for t in (transition, last_step) if t is not None):
        return None
    needed = evaluated_parts(specs, _narrow_checkpoints(transition))
    try:
        survival, source = transition_survival(transition, NARROW, sorted(needed)) if needed else ({}, "")
        step, step_source = transition_survival(last_step, NARROW, sorted(needed)) if needed and last_step else ({}, "")
    except DamagedSurvivalError as e:
        reason = f"the stored bf16 survival data is damaged ({e}), so it cannot vouch for bf16"
        return EngineChoice("auto", WIDE, reason, engine.auto_min_energy, {}, "stored", time.monotonic() - began)
    if needed and last_step is not None:
        label = f"of the last step {_model_name(last_step, 'base_folder')} → {_model_name(last_step, 'post_folder')}"
        for c, share in step.items():
            survival[f"{c} {label}"] = replace(share, component=f"{c} {label}")
            needed[f"{c} {label}"] = needed[c]
        source = source if step_source == source else f"{source}, last step {step_source}"
    dtype, reason = choose_engine_dtype(survival, engine.auto_min_energy, needed)
    parts = {
        c: {"kept": s.kept, "worst_matrix": s.worst_matrix, "worst_kept": s.worst_kept, "variants": needed[c]}
        for c, s in survival.items()
    }
    return EngineChoice("auto", dtype, reason, engine.auto_min_energy, parts, source, time.monotonic() - began)


def _model_name(transition: StoredTransition, side: str) -> str:
    return Path(transition.manifest[side]).name


def _narrow_checkpoints(transition: StoredTransition) -> bool:
    """True when both checkpoints hold every decomposed matrix in bf16 (read from their headers)."""
    m = transition.manifest
    for side in ("base_folder", "post_folder"):
        ckpt = Checkpoint.open(Path(m[side]))
        if any(ckpt.tensors[a.get("tensor") or n].dtype != "BF16" for n, a in transition.matrices.items()):
            return False
    return True

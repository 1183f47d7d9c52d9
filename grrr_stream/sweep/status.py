"""What a planned sweep has done and what it still needs: unit states for ``status``, disk for ``sweep``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from ..errors import GrrrError
from .plan import Plan
from .records import Records, SweepLock, blockers, unit_state
from .units import DecomposeParams, Unit, VariantParams

_DETAIL = {
    "damaged": "recorded done, but its result folder is missing or incomplete; the next run redoes it",
    "stale": "its tables are for another metric or pass@k/maj@k; the next run recomputes them from the "
             "recorded answers (no generation)",
}


def sweep_status(plan: Plan) -> list[dict]:
    """One row per unit: id, kind, state (done / pending / failed / blocked / interrupted / running), detail."""
    records = Records(plan.workdir)
    running = SweepLock(plan.workdir).held()
    states: dict[str, str] = {}
    rows = []
    for u in plan.units:
        state, rec = unit_state(u, records)
        if state == "interrupted" and running:
            state = "running"
        bad = blockers(u, states)
        if state in ("pending", "interrupted", "damaged", "stale") and bad:
            state = "blocked"
        states[u.id] = state
        rows.append({"unit": u.id, "kind": u.kind, "state": state, "detail": _detail(u, state, rec, bad),
                     "out": u.out})
    return rows


def _detail(u: Unit, state: str, rec: Optional[dict], blocked_by: list[str]) -> str:
    if state == "failed":
        return rec.get("error", "")
    if state == "done":
        return f"{rec.get('seconds', 0):.1f} s"
    if state == "blocked":
        return "needs " + ", ".join(blocked_by)
    if state in ("pending", "interrupted", "running"):
        return _partial_progress(u)
    return _DETAIL.get(state, "")


def _partial_progress(u: Unit) -> str:
    """What a unit already holds from an earlier, unfinished run (it resumes from there)."""
    out = Path(u.out)
    if u.kind == "decompose" and (out / "matrices").is_dir():
        from ..store.transition_store import TransitionStore

        manifest = TransitionStore.read_manifest(out) or {}
        total = len(manifest.get("matrices", []))
        done = len(TransitionStore(out, None).completed())
        return f"{done}/{total} matrices stored" if total else ""
    if u.kind == "evaluate" and out.is_dir():
        scored = sorted(p.parent.name + "/" + p.stem for p in out.glob("*/*.json"))
        return f"{len(scored)} of {len(u.params.variants) * len(u.params.benchmarks)} variant×benchmark scored"
    return ""


class _Checkpoints:
    """Local checkpoints opened once each (None: not here, or unreadable)."""

    def __init__(self) -> None:
        self._opened: dict[str, object] = {}

    def get(self, src: str):
        from ..checkpoints.reader import Checkpoint

        if src not in self._opened:
            try:
                self._opened[src] = Checkpoint.open(Path(src)) if Path(src).is_dir() else None
            except (GrrrError, OSError):
                self._opened[src] = None
        return self._opened[src]


def unit_disk_needs(plan: Plan) -> dict[str, Optional[list]]:
    """unit id → what it will write (a list of runtime.diskplan.DiskNeed), from the checkpoint headers, for the
    decompositions and variant builds whose checkpoints are on this machine; None where the size is not
    known before the checkpoints are (Hub downloads, the generated tiny chain). Other units write little."""
    checkpoints = _Checkpoints()
    out: dict[str, Optional[list]] = {}
    bases: dict[str, str] = {}  # transition id → base source
    for u in plan.units:
        if isinstance(u.params, DecomposeParams):
            bases[u.params.transition] = u.params.base
            out[u.id] = _decompose_needs(u, checkpoints)
        elif isinstance(u.params, VariantParams):
            out[u.id] = _variant_needs(u, checkpoints.get(bases.get(u.params.transition, "")))
    return out


def _decompose_needs(u: Unit, checkpoints: _Checkpoints) -> Optional[list]:
    from ..decompose.plan import plan_transition
    from ..runtime.diskplan import transition_needs

    p: DecomposeParams = u.params
    ck, post = checkpoints.get(p.base), checkpoints.get(p.post)
    if ck is None or post is None:
        return None
    try:  # the decomposition's own planning: the same matrices, experts and fused blocks
        names = plan_transition(ck, post, p.config(u.out)).matrices
    except GrrrError:
        return None  # the unit itself will say what is wrong
    s = p.settings
    return transition_needs(
        [ck.matrix_shape(m) for m in names], Path(u.out), Path(p.frame_cache),
        store_dtype=s.store_dtype, compute_dtype=s.compute_dtype, null_storage=s.null_storage,
        core_truncated=s.core_rel_threshold is not None,
        # a later decomposition from the same W0 finds its frames in the cache
        frames_cached_fraction=1.0 if u.after else 0.0)


def _variant_needs(u: Unit, ck) -> Optional[list]:
    from ..runtime.diskplan import DiskNeed
    from ..dtypes import ITEMSIZE

    if ck is None:
        return None
    item = ITEMSIZE[u.params.dtype]
    size = sum(math.prod(t.shape) * item if t.is_floating else t.nbytes for t in ck.tensors.values())
    return [DiskNeed("variant", Path(u.out), size)]

"""What a planned sweep has done and what it still needs: unit states for ``status``, disk for ``sweep``."""

from __future__ import annotations

from typing import Optional

from .estimate import Checkpoints, DiskFacts
from .kinds import KINDS, decompose
from .plan import Plan
from .records import Records, SweepLock, blockers, unit_state
from .units import Unit

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
        rows.append({"unit": u.id, "kind": u.kind, "state": state, "detail": _detail(u, state, rec, bad), "out": u.out})
    return rows


def _detail(u: Unit, state: str, rec: Optional[dict], blocked_by: list[str]) -> str:
    if state == "failed":
        return rec.get("error", "")
    if state == "done":
        return f"{rec.get('seconds', 0):.1f} s"
    if state == "blocked":
        return "needs " + ", ".join(blocked_by)
    if state in ("pending", "interrupted", "running"):
        progress = KINDS[u.kind].progress  # what it already holds from an earlier, unfinished run
        return progress(u) if progress is not None else ""
    return _DETAIL.get(state, "")


def unit_disk_needs(plan: Plan) -> dict[str, Optional[list]]:
    """unit id → what it will write (a list of runtime.diskplan.DiskNeed), from the checkpoint headers, for the
    kinds that say (decompositions, variant builds) when their checkpoints are on this machine; None where the
    size is not known before the checkpoints are (Hub downloads, the generated tiny chain). Other units write
    little."""
    facts = DiskFacts(Checkpoints(), decompose.by_transition(plan.units))
    return {u.id: KINDS[u.kind].disk(u, facts) for u in plan.units if KINDS[u.kind].disk is not None}

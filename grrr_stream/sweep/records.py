"""Records: what is done, failed or running, one JSON file per unit under WORKDIR/.sweep/units.

A unit is done when its record says so with the same key *and* its result folder still
holds a finished result; what needs a failed unit is blocked (:func:`blockers`, the one
place that says so for the executors and for ``status``). One sweep process per workdir.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Optional

from ..errors import WorkdirBusyError
from ..locks import FileLock
from .units import EvaluateParams, Unit

# the states of units that others cannot use: whatever needs them is blocked
BLOCKING = ("failed", "blocked")


class Records:
    """One JSON file per (unit, key) under WORKDIR/.sweep/units, replaced atomically. Keyed
    files keep the record of a setting you switch away from and back to."""

    def __init__(self, workdir: Path):
        self.dir = Path(workdir) / ".sweep" / "units"

    def path(self, unit: Unit) -> Path:
        return self.dir / f"{unit.id.replace('/', '__')}@{unit.key[:12]}.json"

    def read(self, unit: Unit) -> Optional[dict]:
        try:
            return json.loads(self.path(unit).read_text())
        except (OSError, ValueError):
            return None

    def write(self, unit: Unit, record: dict) -> None:
        from ..files import atomic_write_text

        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path(unit), json.dumps(record, indent=2, default=str))


class SweepLock(FileLock):
    """One sweep process per workdir."""

    def __init__(self, workdir: Path):
        super().__init__(Path(workdir) / ".sweep" / "lock")

    def busy(self, holder: str) -> Exception:
        return WorkdirBusyError(f"another grrr-stream sweep is running on {self.path.parent.parent} ({holder}); "
                                "wait for it to finish (`grrr-stream status CONFIG` shows its progress) or stop it "
                                "before starting this one")


# the file each kind of unit writes last: a unit is done only when its record says so *and* this is there
_COMPLETION = {"generate": "chain.json", "stats": "table_overall.csv", "compare": "comparisons.csv",
               "variant": "grrr_variant.json", "evaluate": "evaluation.json", "channels": "channels.json",
               "channel-stats": "channel_stats.csv"}


def output_complete(unit: Unit) -> bool:
    """A cheap check that a unit's result folder still holds a finished result."""
    out = Path(unit.out)
    if unit.kind == "decompose":
        from ..store.transition_store import TransitionStore

        manifest = TransitionStore.read_manifest(out) or {}
        matrices = out / "matrices"
        return (bool(manifest.get("complete")) and (out / "metrics.csv").is_file() and matrices.is_dir()
                and sum(1 for p in matrices.iterdir() if p.is_dir()) >= len(manifest.get("matrices", ())))
    marker = _COMPLETION.get(unit.kind)
    if marker is None or not (out / marker).is_file():
        return False
    if isinstance(unit.params, EvaluateParams):  # tables of another metric or pass@k / maj@k: summarised again
        return _tables_match(unit.params, out / marker)
    return True


def _tables_match(p: EvaluateParams, marker: Path) -> bool:
    """Whether an evaluation's tables are for the metric, pass@k and maj@k asked for now (no generation
    depends on them, so they are not in the key)."""
    try:
        meta = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    have = meta.get("sampling") or {}
    want = {"pass_k": p.sampling.pass_k, "maj_k": p.sampling.maj_k}
    return (meta.get("metric", "avg") == p.metric
            and all(list(have.get(k) or ()) == list(want[k] or ()) for k in ("pass_k", "maj_k")))


def unit_state(unit: Unit, records: Records) -> tuple[str, Optional[dict]]:
    """'done', 'failed', 'interrupted' (started, never finished), 'damaged' (recorded done, but its result
    folder is gone or incomplete: redone), 'stale' (an evaluation whose tables are for other metrics:
    summarised again, no generation) or 'pending'."""
    rec = records.read(unit)
    if rec is None or rec.get("key") != unit.key:
        return "pending", None
    status = rec.get("status")
    if status == "done":
        if output_complete(unit):
            return "done", rec
        if unit.kind == "evaluate" and (Path(unit.out) / "evaluation.json").is_file():
            return "stale", rec  # other metrics asked for now: summarised again from its answers
        return "damaged", rec
    if status == "failed":
        return "failed", rec
    if status == "running":
        return "interrupted", rec
    return "pending", None


def blockers(unit: Unit, states: Mapping[str, str]) -> list[str]:
    """The dependencies of ``unit`` that failed or are blocked themselves: it cannot run this time."""
    return [d for d in unit.deps if states.get(d) in BLOCKING]

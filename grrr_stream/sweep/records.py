"""Records: what is done, failed or running, one JSON file per unit in the workdir's records folder.

A unit is done when its record says so with the same key *and* its result folder still holds a finished
result (its kind's ``done``: the completion marker); what needs a failed unit is blocked (:func:`blockers`,
the one place that says so for the executors and for ``status``). One sweep process per workdir.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, Mapping, Optional

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from ..errors import WorkdirBusyError
from ..files import atomic_write_text
from ..locks import FileLock
from .kinds import KINDS
from .units import Unit
from .workdir import Workdir

# the states of units that others cannot use: whatever needs them is blocked
BLOCKING = ("failed", "blocked")


class UnitRecord(BaseModel):
    """The fields of a unit's record that are read back (the sweep, ``status`` and the report read them); others
    are kept as they are."""

    model_config = ConfigDict(extra="allow", strict=True)

    key: str
    status: Literal["running", "done", "failed"]
    started: Optional[float] = None
    seconds: Optional[float] = None
    error: str = ""
    result: dict = {}

    @field_validator("started", "seconds", mode="before")
    @classmethod
    def _number(cls, v):
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


class Records:
    """One JSON file per (unit, key) in the workdir's records folder, replaced atomically. Keyed
    files keep the record of a setting you switch away from and back to."""

    def __init__(self, workdir: Path):
        self.dir = Workdir(workdir).units

    def path(self, unit: Unit) -> Path:
        return self.dir / f"{unit.id.replace('/', '__')}@{unit.key[:12]}.json"

    def read(self, unit: Unit) -> Optional[dict]:
        """The unit's record, or None when there is none or it is not a record (unreadable, not JSON, not of
        :class:`UnitRecord`'s shape): such a unit is pending and its next run rewrites the record."""
        try:
            rec = json.loads(self.path(unit).read_text())
        except (OSError, ValueError):
            return None
        try:
            UnitRecord.model_validate(rec)
        except ValidationError:
            return None
        return rec

    def damaged(self, unit: Unit) -> Optional[str]:
        """Why the unit's record file, when there is one, is not a record (None: none, or a record)."""
        path = self.path(unit)
        if not path.is_file():
            return None
        try:
            UnitRecord.model_validate(json.loads(path.read_text()))
        except (OSError, ValueError) as e:  # pydantic's ValidationError is a ValueError
            first = str(e).splitlines()
            return f"{path} is not a unit record ({' '.join(first[:3])[:300]})"
        return None

    def done_under_any_key(self, unit: Unit):
        """The keys under which the unit's records say it is done (this key's and others')."""
        for p in self.dir.glob(f"{unit.id.replace('/', '__')}@*.json"):
            try:
                rec = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(rec, dict) and rec.get("status") == "done":
                yield rec.get("key")

    def write(self, unit: Unit, record: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path(unit), json.dumps(record, indent=2, default=str))


class SweepLock(FileLock):
    """One sweep process per workdir."""

    def __init__(self, workdir: Path):
        self.workdir = Workdir(workdir)
        super().__init__(self.workdir.lock)

    def busy(self, holder: str) -> Exception:
        return WorkdirBusyError(
            f"another grrr-stream sweep is running on {self.workdir.root} ({holder}); "
            "wait for it to finish (`grrr-stream status CONFIG` shows its progress) or stop it "
            "before starting this one"
        )


def output_complete(unit: Unit) -> bool:
    """A cheap check that a unit's result folder still holds a finished result."""
    return KINDS[unit.kind].done(unit)


def unit_state(unit: Unit, records: Records) -> tuple[str, Optional[dict]]:
    """'done', 'failed', 'interrupted' (started, never finished), 'damaged' (recorded done, but its result
    folder is gone or incomplete: redone), 'stale' (an evaluation whose tables are for other metrics:
    summarised again, no generation) or 'pending'."""
    rec = records.read(unit)
    if rec is None or rec.get("key") != unit.key:
        return "pending", None
    status = rec.get("status")
    if status == "done":
        kind = KINDS[unit.kind]
        if kind.done(unit):
            return "done", rec
        if kind.stale is not None and kind.stale(unit):
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

"""The layout of a sweep's workdir: the one place that spells its folder and file names.

```
WORKDIR/
  .sweep/units/<unit>@<key12>.json   one record per unit and key (records.Records)
  .sweep/lock                        one sweep process per workdir (records.SweepLock)
  .sweep/tracking/                   MLflow logging recorded for later (tracking.run_log receives this path)
  .sweep/forecast.json               the forecast made when the sweep started
  report/                            the sweep's tables (sweep.rows) and its HTML page (report/)
  logs/<unit>.log                    each unit's third-party output
  <kind folders>/<name>-<key8>/      each unit's results (kinds.*: stores, frames, stats, comparisons, ...)
```

Changing a name here moves where old workdirs are read: the names below are the ones every earlier
version wrote, so an old workdir still reads as done.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Workdir:
    """A sweep's workdir and the paths of everything the sweep keeps there."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def state(self) -> Path:
        """The sweep's own bookkeeping (records, lock, pending tracking, forecast)."""
        return self.root / ".sweep"

    @property
    def units(self) -> Path:
        """The unit records."""
        return self.state / "units"

    @property
    def lock(self) -> Path:
        return self.state / "lock"

    @property
    def tracking(self) -> Path:
        """Where the units and the sweep record the MLflow logging that could not be delivered yet."""
        return self.state / "tracking"

    @property
    def forecast(self) -> Path:
        return self.state / "forecast.json"

    @property
    def report(self) -> Path:
        return self.root / "report"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def log(self, unit_id: str) -> Path:
        """``logs/<unit>.log``, the unit id's '/' written as '__' (one flat folder)."""
        return self.logs / (unit_id.replace("/", "__") + ".log")

    def folder(self, name: str) -> Path:
        """The folder of one kind's results (``stores``, ``frames``, ``stats``, ...): named by the kind's module."""
        return self.root / name

    def is_sweep(self) -> bool:
        """Whether a sweep ran here (its bookkeeping folder exists)."""
        return self.state.is_dir()

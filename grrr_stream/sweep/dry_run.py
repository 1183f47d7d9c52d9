"""A sweep's dry run (``grrr-stream sweep --dry-run``) as one result: the plan, every unit's state, the disk the
units still to run need, and the forecast (on this machine, or on a device of the forecast's table together
with the other GPUs of that table). Nothing is run and nothing is written to the workdir."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..errors import ConfigError
from ..forecast import devices  # devices.DEVICES looked up when called: tests narrow it
from ..forecast.devices import names
from .config import SweepConfig
from .forecast import Forecast, forecast_plan
from .plan import Plan, plan_sweep
from .status import sweep_status, unit_disk_needs
from .units import Unit


@dataclass
class DryRun:
    plan: Plan
    status: dict[str, dict]  # unit id → its row of sweep_status (state, detail)
    disk: dict[str, Optional[list]]  # unit id → its DiskNeeds (None: known once its checkpoints are here)
    to_run: list[Unit]  # the units not done, in plan order
    forecast: Forecast  # every unit, on ``target`` (None: this machine, calibrated)
    target: Optional[str] = None
    others: dict[str, Forecast] = field(default_factory=dict)  # another GPU of the table → the plan's forecast there

    @property
    def needs(self) -> list:
        """The disk needs of the units still to run (runtime.diskplan.DiskNeed), where they are known."""
        return [n for u in self.to_run for n in (self.disk.get(u.id) or [])]

    @property
    def todo(self) -> set[str]:
        return {u.id for u in self.to_run}


def forecast_device(name: Optional[str]) -> Optional[str]:
    """``name`` if it is a device of the forecast's table (or None); checked before anything is planned."""
    if name is None:
        return None

    if name.strip().lower() not in names():
        raise ConfigError(
            f"--forecast-for {name}: not a device of the forecast's table; choose one of "
            f"{', '.join(names())} (cpu: this machine, measured)"
        )
    return name


def dry_run_sweep(config: SweepConfig | Plan, *, forecast_for: Optional[str] = None) -> DryRun:
    """Plan ``config`` (or take its plan), read each unit's state and disk need, and forecast the plan on this
    machine or on ``forecast_for`` (a device of :mod:`grrr_stream.forecast.devices`; a GPU there also gives the
    plan on each other GPU of the table, from published figures)."""
    target = forecast_device(forecast_for)
    plan = config if isinstance(config, Plan) else plan_sweep(config)
    status = {r["unit"]: r for r in sweep_status(plan)}
    to_run = [u for u in plan.units if status[u.id]["state"] != "done"]
    disk = unit_disk_needs(plan)
    fc = forecast_plan(plan, disk=disk, target=target)
    others = {}
    if target is not None and target.strip().lower() != "cpu":
        shown = target.strip().lower()
        others = {name: forecast_plan(plan, online=False, target=name) for name in devices.DEVICES if name != shown}
    return DryRun(plan, status, disk, to_run, fc, target, others)

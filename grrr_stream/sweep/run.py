"""Running a planned sweep: lock the workdir, run what is not done, write the report, log the sweep's run."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from typing import Optional, TextIO

from ..config import TrackingConfig
from .display import Display
from .execute import DaskExecutor, LocalExecutor, execute_units, make_client
from .plan import Plan
from .records import Records, SweepLock, unit_state
from .report import Report, write_report
from ..runs import log_sweep
from ..unit_log import log_path, unit_log
from .runners import RunContext
from .units import DecomposeParams, Unit


@dataclass
class SweepResult:
    plan: Plan
    states: dict[str, str]               # unit id → done | failed | blocked | pending
    records: dict[str, Optional[dict]]
    ran: list[str]                       # units executed in this call
    report: Report
    run_id: Optional[str] = None

    @property
    def report_files(self) -> list:
        return self.report.files

    @property
    def claims(self) -> dict:            # evaluation suite → claims.summarise(...)
        return self.report.claims

    @property
    def failed(self) -> list[str]:
        return [u for u, s in self.states.items() if s == "failed"]

    @property
    def ok(self) -> bool:
        return all(s == "done" for s in self.states.values())


def run_sweep(plan: Plan, *, scheduler: Optional[str] = None, tracking: Optional[TrackingConfig] = None,
              progress: bool = True, device: Optional[str] = None, stream: Optional[TextIO] = None,
              verbose: bool = False) -> SweepResult:
    """Execute every unit that is not done; record failures and go on with what does not depend on them."""
    stream = stream or sys.stderr
    started = time.time()  # the sweep's MLflow run, opened at the end, starts here
    tracking = tracking or TrackingConfig(enabled=False)
    # every unit's run carries the sweep's tag: one search finds the whole sweep (not a result key)
    tracking = tracking.model_copy(update={"sweep": tracking.sweep or plan.config.name})
    from ..files import ensure_folder

    ensure_folder(plan.workdir, "workdir")
    records = Records(plan.workdir)
    with SweepLock(plan.workdir):
        states = {u.id: unit_state(u, records)[0] for u in plan.units}
        todo = [u for u in plan.units if states[u.id] != "done"]
        for u in todo:  # failed or interrupted before: run again (dependents wait for the new outcome)
            states[u.id] = "pending"
        display = Display(len(plan.units), len(plan.units) - len(todo), progress, stream)
        display.say(f"{plan.config.name}: {len(plan.units)} units, {len(plan.units) - len(todo)} already done, "
                    f"{len(todo)} to run")
        if tracking.enabled:
            from ..tracking import prepare

            with unit_log(log_path(plan.workdir, "sweep"), verbose=verbose):  # MLflow's database migrations
                prepare(tracking.uri, tracking.experiment)
        stores = {u.params.transition: u.out for u in plan.units if isinstance(u.params, DecomposeParams)}
        ctx = RunContext(str(plan.workdir), tracking, progress, device, threads=None, stores=stores,
                         informative_points=plan.config.claims.informative_points, verbose=verbose)
        ran = _run(todo, states, display, scheduler, ctx)
        recs = {u.id: records.read(u) for u in plan.units}
        result = SweepResult(plan, states, recs, ran, write_report(plan, states, recs))
        if tracking.enabled:
            with unit_log(log_path(plan.workdir, "sweep"), verbose=verbose):
                result.run_id = log_sweep(plan, result, tracking, started)
    return result


def _run(todo: list[Unit], states: dict[str, str], display: Display, scheduler: Optional[str],
         ctx: RunContext) -> list[str]:
    """Execute ``todo`` here or on the scheduler's cluster, which is closed afterwards."""
    client, cluster, threads = make_client(scheduler)
    ctx = replace(ctx, threads=threads)
    try:
        executor = LocalExecutor(ctx) if client is None else DaskExecutor(client, ctx)
        return execute_units(todo, states, executor, display)
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()

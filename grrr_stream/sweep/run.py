"""Running a planned sweep: lock the workdir, refuse a disk too small, write the forecast, run what is not
done, write the report, log the sweep's run."""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional, TextIO

from ..config import TrackingConfig
from ..files import ensure_folder
from ..report.verdict_rows import WORDS
from ..runtime.diskplan import check_space
from ..tracking.run_log import missed, preflight, say_missed
from ..tracking.runs import log_sweep, sweep_runs
from ..unit_log import console, unit_log
from .context import RunContext
from .display import Display
from .execute import DaskExecutor, LocalExecutor, execute_units, make_client
from .forecast import forecast_plan
from .kinds import claims
from .placement import place
from .plan import Plan
from .records import Records, SweepLock, unit_state
from .rows import Report
from .status import unit_disk_needs
from .tables import write_report
from .tracker import Tracker
from .units import Unit
from .workdir import Workdir

if TYPE_CHECKING:
    from .forecast import Forecast


@dataclass
class SweepResult:
    plan: Plan
    states: dict[str, str]  # unit id → done | failed | blocked | pending
    records: dict[str, Optional[dict]]
    ran: list[str]  # units executed in this call
    report: Report
    run_id: Optional[str] = None
    html: Optional[Path] = None  # WORKDIR/report/index.html
    # units (and "sweep", its own run) whose MLflow logging was missed in this call: recorded in the
    # workdir's pending tracking folder (Workdir.tracking) for a rerun or `grrr-stream track`
    tracking_missed: list[str] = field(default_factory=list)
    tracking_why: list[str] = field(default_factory=list)  # why, each distinct reason once

    @property
    def report_files(self) -> list:
        return self.report.files

    @property
    def claims(self) -> dict:  # evaluation suite → stats.claims_sets.summarise(...)
        return claims.summaries(self.report)

    @property
    def failed(self) -> list[str]:
        return [u for u, s in self.states.items() if s == "failed"]

    @property
    def ok(self) -> bool:
        return all(s == "done" for s in self.states.values())


def _sweep_tracking(tracking: TrackingConfig, plan: Plan, layout: Workdir) -> TrackingConfig:
    """Every unit's run carries the sweep's tag, so one search finds the whole sweep (not a result key); what
    cannot be logged is recorded with the unit records, for a rerun or `grrr-stream track WORKDIR`."""
    return tracking.model_copy(
        update={"sweep": tracking.sweep or plan.config.name, "pending_dir": str(layout.tracking)}
    )


def _preflight(tracking: TrackingConfig, layout: Workdir, stream: TextIO, verbose: bool) -> TrackingConfig:
    """The tracking server checked once: MLflow's database migrations go to the sweep's log, what the check
    says to the terminal (told apart before the log takes descriptor 2, which ``sys.stderr`` writes to)."""
    own = None if stream is sys.stderr else stream
    with unit_log(layout.log("sweep"), verbose=verbose):
        return preflight(tracking, own or console())


def run_sweep(
    plan: Plan,
    *,
    scheduler: Optional[str] = None,
    tracking: Optional[TrackingConfig] = None,
    progress: bool = True,
    device: Optional[str] = None,
    stream: Optional[TextIO] = None,
    verbose: bool = False,
    forecast: bool = True,
    forecast_for: Optional[str] = None,
) -> SweepResult:
    """Execute every unit that is not done; record failures and go on with what does not depend on them.

    Before any work: refuses (:class:`~grrr_stream.errors.DiskSpaceError`) when the units still to run need more
    disk than the workdir's has, and (``forecast``) writes the forecast of the plan to the workdir's
    forecast.json, whose seconds units.csv puts next to the measured ones (a forecast that fails is reported
    and the sweep runs; ``forecast_for``: a device of the forecast's table whose published figures its times
    assume instead of this machine's measured rates)."""
    stream = stream or sys.stderr
    layout = Workdir(plan.workdir)
    started = time.time()  # the sweep's MLflow run, opened at the end, starts here
    missed_before = len(missed())
    tracking = _sweep_tracking(tracking or TrackingConfig(enabled=False), plan, layout)

    ensure_folder(plan.workdir, "workdir")
    records = Records(plan.workdir)
    with SweepLock(plan.workdir):
        states = {u.id: unit_state(u, records)[0] for u in plan.units}
        todo = [u for u in plan.units if states[u.id] != "done"]
        for u in todo:  # failed or interrupted before: run again (dependents wait for the new outcome)
            states[u.id] = "pending"
        disk = _check_disk(plan, todo)
        fc = _write_forecast(plan, todo, disk, layout, stream, forecast_for) if forecast else None
        display = _start_display(plan, todo, fc, progress, stream)
        if tracking.enabled:  # once, before any unit: unreachable → refuse (required) or record only
            tracking = _preflight(tracking, layout, stream, verbose)
        tracker, ctx = _units_context(plan, tracking, progress, device, verbose)
        with tracker or contextlib.nullcontext():
            ran = _run(plan, todo, states, display, scheduler, ctx, fc, stream)
        result = _report(plan, states, records, ran, display, tracker, stream)
        with unit_log(layout.log("sweep"), verbose=verbose):  # MLflow's own output
            write_pages(result, tracking, started)
        if tracking.enabled and result.run_id is None:
            result.tracking_missed.append("sweep")
    result.tracking_why = _why(missed()[missed_before:], result, tracker)
    return result


def _why(said: list[str], result: SweepResult, tracker: Optional[Tracker]) -> list[str]:
    """Why the runs were not logged, each reason once: as this process said it ("name: why"), as a unit's record
    keeps it (its worker's), and as the background logging last failed."""
    found = [s.partition(": ")[2] or s for s in said]
    for u in result.tracking_missed:
        text = str((result.records.get(u) or {}).get("tracking") or "").removeprefix("not logged: ")
        found += [part.partition(": ")[2] or part for part in text.split("; ") if part]
    if tracker is not None and tracker.last.error:
        found.append(tracker.last.error)
    return list(dict.fromkeys(found))


def _start_display(plan: Plan, todo: list[Unit], fc: Optional["Forecast"], progress: bool, stream: TextIO) -> Display:
    """The sweep's display (its ETA from the forecast's seconds per unit), after its first line."""
    seconds = {u.unit: u.seconds for u in fc.units} if fc is not None else {}
    display = Display(len(plan.units), len(plan.units) - len(todo), progress, stream, forecast=seconds)
    display.say(
        f"{plan.config.name}: {len(plan.units)} units, {len(plan.units) - len(todo)} already done, {len(todo)} to run"
    )
    return display


def _units_context(
    plan: Plan, tracking: TrackingConfig, progress: bool, device: Optional[str], verbose: bool
) -> tuple[Optional[Tracker], RunContext]:
    """The tracker that logs what the units record while they compute (None when tracking is off, or found
    unreachable so that it only records), and the units' run context (deferring their logging to the tracker)."""
    tracker = Tracker(Path(tracking.pending_dir), tracking) if tracking.enabled and not tracking.record_only else None
    units_tracking = tracking.model_copy(update={"defer": True}) if tracker else tracking
    ctx = RunContext(
        str(plan.workdir),
        units_tracking,
        progress,
        device,
        threads=None,
        outs={u.id: u.out for u in plan.units},
        verbose=verbose,
    )
    return tracker, ctx


def _report(
    plan: Plan,
    states: dict[str, str],
    records: Records,
    ran: list[str],
    display: Display,
    tracker: Optional[Tracker],
    stream: TextIO,
) -> SweepResult:
    """The sweep's result with its report written, and the units whose MLflow logging was missed."""
    recs = {u.id: records.read(u) for u in plan.units}
    display.say("writing the report (tables, figures, page)")  # seconds: a line, not a silence
    result = SweepResult(plan, states, recs, ran, write_report(plan, states, recs))
    result.tracking_missed = [u for u in ran if (recs.get(u) or {}).get("tracking")]
    if tracker is not None and tracker.left():  # the server went away during the sweep
        say_missed(tracker.left(), tracker.last.error or "still pending", stream)
        result.tracking_missed += tracker.left()
    return result


def _check_disk(plan: Plan, todo: list[Unit]) -> dict:
    """Refuse before any work when the units still to run need more disk than there is; their disk plan."""
    disk = unit_disk_needs(plan)
    needs = [n for u in todo for n in (disk.get(u.id) or [])]
    check_space(
        needs,
        f"the {len(todo)} sweep unit(s) still to run",
        "Free space, point workdir at another disk, or run fewer transitions; finished units are kept.",
    )
    return disk


def _write_forecast(
    plan: Plan, todo: list[Unit], disk: dict, layout: Workdir, stream: TextIO, target: Optional[str] = None
) -> Optional["Forecast"]:
    """The forecast.json of this run, and its headline; the forecast (the display's ETA starts from its seconds,
    a cluster's units ask for its memory), None when it failed: a forecast never stops a sweep."""
    try:
        fc = forecast_plan(plan, disk=disk, target=target)
        fc.write_json(layout.forecast)
        stream.write(f"[sweep] forecast: {fc.headline({u.id for u in todo})} (per unit: --dry-run)\n")
        return fc
    except Exception as e:  # noqa: BLE001 - reported, and the sweep runs
        stream.write(f"[sweep] no forecast ({type(e).__name__}: {e})\n")
        return None


def write_pages(result: SweepResult, tracking: TrackingConfig, started: Optional[float] = None) -> Path:
    """The HTML report, named by the sweep's MLflow run when tracked (log_sweep logs the report's other files,
    then calls back with the run's id — None when its logging was recorded for later — and logs the page);
    ``started``: None to only rewrite the page."""
    from ..report import write_html

    def page(run_id: Optional[str]) -> Path:
        # not asked when the target was found unreachable before the work (nothing to wait on twice)
        runs = sweep_runs(tracking) if tracking.enabled and not tracking.record_only else []
        result.html = write_html(
            result.plan, result.report, result.records, tracking=tracking, run_id=run_id, runs=runs
        )
        return result.html

    if tracking.enabled and started is not None:
        from ..report.build import verdict_box

        box = [
            (v.claim.id, v.verdict, "; ".join(x for x in (v.value, v.reason, v.p, v.detect, v.test) if x))
            for v in verdict_box(result.plan, result.report)
        ]
        result.run_id = log_sweep(result.plan, result, tracking, started, html=page, verdicts=box, words=WORDS)
    if result.html is None:  # not tracked, or the sweep's run was finished already (nothing new to log)
        page(result.run_id)
    return result.html


def _run(
    plan: Plan,
    todo: list[Unit],
    states: dict[str, str],
    display: Display,
    scheduler: Optional[str],
    ctx: RunContext,
    fc: Optional["Forecast"],
    stream: TextIO,
) -> list[str]:
    """Execute ``todo`` here or on the scheduler's cluster, which is closed afterwards; on a cluster, units that
    fit no worker are refused before any runs."""
    client, cluster, threads = make_client(scheduler)
    ctx = replace(ctx, threads=threads)
    try:
        if client is None:
            executor = LocalExecutor(ctx)
        else:
            executor = DaskExecutor(client, ctx, *place(client, plan, todo, fc, ctx.device, stream))
        return execute_units(todo, states, executor, display)
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()

"""What a kind of unit is: :class:`Kind`, the record each kind's module ends with as ``KIND``, and the types of
its hooks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol

from ...columns import Column
from ..estimate import UnitForecast, constant
from ..resources import Needs, cpu_needs
from ..sections import Section
from ..units import PlannedModel, Transition, Unit, UnitParams

if TYPE_CHECKING:
    from ..context import PlanContext, RunContext
    from ..estimate import DiskFacts, Facts
    from ..rows import Report, TableRows

Problems = list[str]


class Planned(Protocol):
    """What a kind's report rows are read with: the plan's config, transitions and models (a ``sweep.plan.Plan``)."""

    config: Any
    transitions: dict[str, Transition]
    models: dict[str, PlannedModel]


class PlanHook(Protocol):
    def __call__(self, ctx: "PlanContext", /) -> tuple[list[Unit], Problems]: ...


class RunHook(Protocol):
    def __call__(self, unit: Unit, ctx: "RunContext", /) -> dict: ...


class EstimateHook(Protocol):
    def __call__(self, unit: Unit, facts: "Facts", /) -> UnitForecast: ...


class DiskHook(Protocol):
    def __call__(self, unit: Unit, facts: "DiskFacts", /) -> Optional[list]: ...


class NeedsHook(Protocol):
    def __call__(self, unit: Unit, forecast: Optional[UnitForecast], device: Optional[str], /) -> Needs: ...


class ReportHook(Protocol):
    """A kind's rows from its finished units (``done``): its tables, in the order they are written; what else
    the page needs of its units it keeps in ``report.data`` under a constant of its module."""

    def __call__(self, plan: Planned, done: list[Unit], report: "Report", /) -> list["TableRows"]: ...


class WriteHook(Protocol):
    """Files beyond its tables (figures, text) written into ``report.folder``; the paths written."""

    def __call__(self, report: "Report", /) -> list[Path]: ...


def constant_estimate(seconds: Optional[float] = None) -> EstimateHook:
    """The estimate of a kind whose time is a measured constant (None: unknown)."""
    return lambda u, facts: constant(u, seconds, facts.write(u))


@dataclass(frozen=True, kw_only=True)
class Kind:
    """One kind of sweep unit, everything the sweep needs of it.

    ``plan(ctx)`` returns its units and the config problems it found; ``run(unit, ctx)`` does one unit's work
    and returns a small JSON-able summary for its record; ``marker`` is the file its unit writes last (a unit
    is done when its record says so *and* ``complete(unit)``, by default: the marker is there);
    ``config`` the sections of the sweep YAML it owns (:class:`~..sections.Section`: the sweep config is
    assembled from them); ``estimate(unit, facts)`` its forecast; ``report(plan, done, report)`` its report
    rows (:class:`~..rows.TableRows`, each written into ``WORKDIR/report``: ``tables`` names them) from its
    finished units, and ``write(report)`` its figures and other files; ``disk(unit, facts)`` what it will write
    (None: not known yet; no hook: little); ``progress(unit)`` what an unfinished unit already holds;
    ``stale(unit)`` whether a done unit only needs its tables again; ``needs(unit, forecast, device)`` what it
    needs of a Dask worker (GPUs, GPU memory, RAM: :mod:`..resources`), from its forecast (None: none made)
    and the run's ``--device`` (None: the unit's own). ``columns``: what a unit of one transition (its params'
    ``transition``) gives of it, each a :class:`grrr_stream.columns.Column` read from the unit's result under
    the column's name: transitions.csv, the console, the report's table beyond the paper and the transition's
    MLflow run take them where the column says it appears; a column shown nowhere names a column of its tables
    for people (its label and unit)."""

    name: str
    params: type[UnitParams]
    plan: PlanHook
    run: RunHook
    marker: Optional[str]
    config: tuple[Section, ...] = ()  # its sections of the sweep YAML
    tables: tuple[str, ...] = ()  # the tables it writes into WORKDIR/report (its ``report`` rows)
    on_worker: bool = False  # heavy (GPU- or memory-bound): run on a Dask worker, not the scheduler
    estimate: EstimateHook = constant_estimate()
    complete: Optional[Callable[[Unit], bool]] = None
    stale: Optional[Callable[[Unit], bool]] = None
    report: Optional[ReportHook] = None
    write: Optional[WriteHook] = None
    disk: Optional[DiskHook] = None
    progress: Optional[Callable[[Unit], str]] = None
    needs: NeedsHook = cpu_needs
    columns: tuple[Column, ...] = ()  # its tables' columns, and what its units give of their transitions

    def __post_init__(self) -> None:
        if self.params.kind != self.name:
            raise ValueError(f"kind {self.name}: its params say kind {self.params.kind!r}")

    def done(self, unit: Unit) -> bool:
        """A cheap check that a unit's result folder still holds a finished result."""
        if self.complete is not None:
            return self.complete(unit)
        return self.marker is not None and (Path(unit.out) / self.marker).is_file()

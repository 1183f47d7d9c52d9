"""What a kind of unit is: :class:`Kind`, the record each ``kinds/<kind>.py`` module ends with as ``KIND``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from ..estimate import UnitForecast, constant
from ..resources import Needs, cpu_needs
from ..units import Unit, UnitParams

if TYPE_CHECKING:
    from ..context import PlanContext, RunContext
    from ..estimate import DiskFacts, Facts
    from ..rows import Report


def constant_estimate(seconds: Optional[float] = None) -> Callable[[Unit, "Facts"], UnitForecast]:
    """The estimate of a kind whose time is a measured constant (None: unknown)."""
    return lambda u, facts: constant(u, seconds, facts.write(u))


@dataclass(frozen=True)
class Kind:
    """One kind of sweep unit, everything the sweep needs of it.

    ``plan(ctx)`` returns its units and the config problems it found; ``run(unit, ctx)`` does one unit's work
    and returns a small JSON-able summary for its record; ``marker`` is the file its unit writes last (a unit
    is done when its record says so *and* ``complete(unit)``, by default: the marker is there);
    ``estimate(unit, facts)`` its forecast; ``report(plan, done, report)`` fills the report's rows from its
    finished units and ``write(report, put)`` writes its ``tables`` (``put(name, rows)``) and figures;
    ``disk(unit, facts)`` what it will write (None: not known yet; no hook: little); ``progress(unit)`` what
    an unfinished unit already holds; ``stale(unit)`` whether a done unit only needs its tables again;
    ``needs(unit, forecast, device)`` what it needs of a Dask worker (GPUs, GPU memory, RAM: :mod:`..resources`),
    from its forecast (None: none made) and the run's ``--device`` (None: the unit's own)."""

    name: str
    params: type[UnitParams]
    plan: Callable[["PlanContext"], tuple[list[Unit], list[str]]]
    run: Callable[[Unit, "RunContext"], dict]
    marker: Optional[str]
    tables: tuple[str, ...] = ()  # the tables it writes into WORKDIR/report (with ``write``)
    on_worker: bool = False  # heavy (GPU- or memory-bound): run on a Dask worker, not the scheduler
    estimate: Callable[[Unit, "Facts"], UnitForecast] = constant_estimate()
    complete: Optional[Callable[[Unit], bool]] = None
    stale: Optional[Callable[[Unit], bool]] = None
    report: Optional[Callable[..., None]] = None
    write: Optional[Callable[["Report", Callable], None]] = None
    disk: Optional[Callable[[Unit, "DiskFacts"], Optional[list]]] = None
    progress: Optional[Callable[[Unit], str]] = None
    needs: Callable[[Unit, Optional[UnitForecast], Optional[str]], Needs] = cpu_needs

    def __post_init__(self) -> None:
        if self.params.kind != self.name:
            raise ValueError(f"kind {self.name}: its params say kind {self.params.kind!r}")

    def done(self, unit: Unit) -> bool:
        """A cheap check that a unit's result folder still holds a finished result."""
        if self.complete is not None:
            return self.complete(unit)
        return self.marker is not None and (Path(unit.out) / self.marker).is_file()

"""The forecast of a planned sweep, before it spends anything: per unit and summed, the bytes to download,
the bytes to write, the peak RAM and the seconds, from the model of the work (:mod:`grrr_stream.forecast`).

Each kind estimates its own units (``estimate(unit, facts)`` in ``kinds/<kind>.py``): decompositions (SVD and
projection flops), variant builds (rank-r products), evaluations (prompts × samples × max_new_tokens × 2 ×
parameters, plus the engine's start), channels units (forward passes over the calibration text at the CPU's
forward rate) and channel-stats units (the null's cells at their measured rate) are modelled; training the tiny
chain, statistics and comparisons are a measured constant each (stated in the output). Written to the
workdir's forecast.json when a sweep starts (:func:`~.run.run_sweep`): units.csv puts each unit's estimate next
to its measured time.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from ..forecast import target as tgt  # a device to forecast for (--forecast-for): published figures
from ..forecast import work
from ..forecast.calibrate import Rates, calibrate
from ..forecast.downloads import download_basis
from ..forecast.summary import lever_lines, split_lines
from ..progress import fmt_seconds
from .estimate import Facts, UnitForecast
from .kinds import KINDS, decompose, generate
from .plan import Plan
from .status import unit_disk_needs
from .workdir import Workdir

__all__ = ["Forecast", "UnitForecast", "estimates", "forecast_plan", "print_forecast", "print_other_devices"]


@dataclass
class Forecast:
    units: list[UnitForecast]
    rates: Optional[Rates]
    sources: dict[str, str]  # model source → where its facts came from
    downloads: dict = field(default_factory=dict)  # model source → how its download size is known (notes)

    def total(self, field: str) -> tuple[float, int]:
        """(sum over the units where it is known, number of units where it is not)."""
        vals = [getattr(u, field) for u in self.units]
        return sum(v for v in vals if v is not None), sum(v is None for v in vals)

    def headline(self, todo: set[str]) -> str:
        """'time 5m10s on cpu (2 threads) for 12 unit(s)' (+ how many are unknown)."""
        rows = Forecast([u for u in self.units if u.unit in todo], self.rates, self.sources)
        known, unknown = rows.total("seconds")
        return (
            f"{_secs(known)}"
            + (f" + {unknown} unit(s) unknown" if unknown else "")
            + f" for {len(rows.units)} unit(s) on {self.rates.device if self.rates else 'an unknown device'}"
        )

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {"units": {u.unit: asdict(u) for u in self.units}, "device": self.rates.device if self.rates else None},
                indent=1,
            )
        )


def estimates(workdir: Path) -> dict[str, Optional[float]]:
    """unit id → its forecast seconds, from the forecast written when the sweep started ({} if none)."""
    try:
        data = json.loads(Workdir(workdir).forecast.read_text())
        return {k: v.get("seconds") for k, v in data["units"].items()}
    except (OSError, ValueError, KeyError, AttributeError, TypeError):  # none, or not the forecast's shape
        return {}


def forecast_plan(
    plan: Plan,
    *,
    online: Optional[bool] = None,
    rates: Optional[Rates] = None,
    disk: Optional[dict] = None,
    target: Optional[str] = None,
) -> Forecast:
    """The forecast of every unit of ``plan`` (``online`` None: probe the Hub when a Hub model is looked up;
    ``rates`` None: calibrate, or with ``target`` (a device of :mod:`grrr_stream.forecast.devices` other than
    'cpu') its published figures; ``disk``: :func:`~.status.unit_disk_needs` of the plan, when known already)."""
    if rates is None and target is not None and target.strip().lower() != "cpu":
        rates = tgt.rates_for(target)

    facts = Facts(
        decompose.by_transition(plan.units),
        tuple(str(u.out) for u in generate.planned(plan.units)),
        online,
        unit_disk_needs(plan) if disk is None else disk,
    )
    for u in facts.dec.values():
        facts.get(u.params.base, u.params.base_revision)
        facts.get(u.params.post, u.params.post_revision)
    shapes = [s for f in facts.models.values() for s in (f.shapes or [])]
    if rates is None and shapes:
        rates = calibrate(max(shapes, key=lambda s: work.decompose_flops(s)))
    facts.rates = rates
    facts.transitions, facts.sft_methods = plan.transitions, tuple(plan.config.claims.sft_methods)
    out = [KINDS[u.kind].estimate(u, facts) for u in plan.units]
    return Forecast(
        out,
        rates,
        {s: f.where for s, f in facts.models.items()},
        {s: f.notes for s, f in facts.models.items() if f.notes},
    )


def _size(n: Optional[float]) -> str:
    if n is None:
        return "unknown"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def _secs(s: Optional[float]) -> str:
    return "unknown" if s is None else fmt_seconds(s)


def print_forecast(fc: Forecast, todo: set[str], out=None) -> None:
    """Per unit still to run, then the sums, the sources of the shapes and the device the times assume."""
    import sys

    out = out or sys.stdout
    rows = [u for u in fc.units if u.unit in todo]
    out.write(f"\nforecast ({len(rows)} unit(s) to run):\n")
    width = max((len(u.unit) for u in rows), default=10)
    for u in rows:
        out.write(
            f"  {u.unit:<{width}}  download {_size(u.download):>9}  write {_size(u.write):>9}  "
            f"RAM {_size(u.ram):>9}  time {_secs(u.seconds):>7}  ({u.basis})\n"
        )
    sub = Forecast(rows, fc.rates, fc.sources)

    def total(field: str, fmt) -> str:
        known, unknown = sub.total(field)
        return fmt(known) + (f" + {unknown} unit(s) unknown" if unknown else "")

    peak = max((u.ram for u in rows if u.ram is not None), default=None)
    out.write(
        f"total: download {total('download', _size)}, write {total('write', _size)}, peak RAM {_size(peak)} "
        f"(largest unit), time {total('seconds', _secs)} one unit after another\n"
    )
    work_by_kind = {k: sum(u.flops or 0.0 for u in rows if u.kind == k) for k in KINDS}
    out.write(
        "  work (any device: divide by its rate): "
        + ", ".join(
            f"{k}{' (on the CPU)' if k == 'channels' else ''} {v / 1e15:.3g} PFLOP"
            for k, v in work_by_kind.items()
            if v
        )
        + "\n"
    )
    kinds = sorted({w for w in fc.sources.values()})
    out.write(
        f"  shapes and downloads from: {', '.join(kinds) or 'nothing'}"
        + (" (built-in table: the published configs of those Hub ids)" if "built-in table" in kinds else "")
        + "\n"
    )
    out.write(f"  times assume {fc.rates.describe()}\n" if fc.rates else "  times: no matrix shape known\n")

    for line in split_lines(rows, fc.rates.target or fc.rates.device if fc.rates else "an unknown device"):
        out.write(line + "\n")
    for line in lever_lines(rows):
        out.write(line + "\n")
    if fc.downloads:
        out.write("  " + download_basis(fc.downloads) + "\n")


def print_other_devices(others: dict[str, Forecast], todo: set[str], out=None) -> None:
    """The plan's total on each other GPU of the device table (``others``: device → the plan's forecast there,
    from published figures), one line each, so that a cluster can be sized from one dry run."""
    import sys

    out = out or sys.stdout
    out.write("the same units on one GPU of each kind (published figures; docs/forecast.md):\n")
    for name, fc in others.items():
        out.write("  " + split_lines([u for u in fc.units if u.unit in todo], name)[0] + "\n")

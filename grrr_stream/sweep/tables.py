"""The sweep's tables: every finished unit's results gathered as typed rows (:class:`~.rows.Report`) and
written to the workdir's report folder as CSV files and figures. The HTML page beside them is
:mod:`grrr_stream.report`'s.

Finished units keep their tables in their own folders (some written by an earlier invocation); each kind
reads its units' tables and gives them as typed rows (its ``report`` hook: :class:`~.rows.TableRows`), written
here one way for every kind, and draws its figures (its ``write`` hook).
:func:`write_report` returns the :class:`~.rows.Report`: the CLI prints its summary from that object and
never reads the files back. Statistics are the units' own, read here and never computed here: the ones
across units (the claims over each suite's evaluated transitions, the SFT vs RL channel groups) are units too
(the ``claims`` and ``channel-groups`` kinds), so assembling the report draws no bootstrap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..columns import TRANSITIONS
from ..errors import GrrrError
from ..files import atomic_write_text, to_csv
from .forecast import estimates
from .kinds import KINDS, TRANSITIONS_TABLE
from .plan import Plan
from .rows import UNITS_TABLE, Report, Row, rectangular
from .workdir import Workdir


def write_report(plan: Plan, states: dict[str, str], records: dict[str, Optional[dict]]) -> Report:
    """Sweep-level tables and figures in the workdir's report folder from the units that are done; the report
    carries the files written and the claims summary (:func:`grrr_stream.stats.claims_sets.summarise`, one per
    evaluation suite, as its ``claims`` unit wrote it)."""
    report = read_report(plan, states, records)
    _write(report)
    return report


def read_report(plan: Plan, states: dict[str, str], records: dict[str, Optional[dict]]) -> Report:
    """The report's rows, from the finished units of every kind."""
    report = Report(Workdir(plan.workdir).report, units=_unit_rows(plan, states, records))
    done = [u for u in plan.units if states.get(u.id) == "done"]
    for name, kind in KINDS.items():
        if kind.report is None:
            continue
        mine = [u for u in done if u.kind == name]
        try:
            tables = kind.report(plan, mine, report)
        except (TypeError, AttributeError, KeyError, IndexError) as e:
            # a file its finished units wrote and the report reads back is valid JSON of another shape
            folders = ", ".join(sorted({str(Path(u.out)) for u in mine})[:3])
            raise GrrrError(
                f"the report cannot read back what the finished {name} units wrote (under {folders}): "
                f"{type(e).__name__}: {e}"[:600]
                + "; rerun those units (delete their folders, then the sweep)"
            ) from None
        for table in tables:
            if table.name not in kind.tables:
                raise ValueError(
                    f"kind {name} gave the report table {table.name}, not among its tables "
                    f"{kind.tables}: list it in its Kind's tables"
                )
            report.add(table)
    _join_kind_columns(report, done, records)
    return report


def _join_kind_columns(report: Report, done: list, records: dict[str, Optional[dict]]) -> None:
    """Each kind's per-transition columns shown in transitions.csv (its ``columns``), from its finished units'
    results, joined into the transitions' rows by transition."""
    rows = {r["transition"]: r for r in report.rows(TRANSITIONS_TABLE)}
    for kind in KINDS.values():
        cols = [c for c in kind.columns if c.shown_in(TRANSITIONS)]
        for u in (u for u in done if u.kind == kind.name) if cols else ():
            row = rows.get(getattr(u.params, "transition", None))
            result = (records.get(u.id) or {}).get("result") or {}
            if row is not None:
                row.update({c.name: result.get(c.name) for c in cols})
    if rows:
        table = report.tables[TRANSITIONS_TABLE]
        table.rows[:] = rectangular(table.rows)


def _unit_rows(plan: Plan, states: dict[str, str], records: dict[str, Optional[dict]]) -> list[Row]:
    forecast = estimates(plan.workdir)  # the forecast made when the sweep started, next to the measured time
    return [
        {
            "unit": u.id,
            "kind": u.kind,
            "state": states.get(u.id, "pending"),
            "seconds": round(float((records.get(u.id) or {}).get("seconds") or 0.0), 2),
            "forecast_seconds": None if forecast.get(u.id) is None else round(float(forecast[u.id]), 2),
            "error": (records.get(u.id) or {}).get("error", "") if states.get(u.id) == "failed" else "",
            "out": u.out,
        }
        for u in plan.units
    ]


def _write(report: Report) -> None:
    """The report's tables (those with rows) and figures: the units table, then each kind's tables and files."""
    report.folder.mkdir(parents=True, exist_ok=True)

    def put(name: str, rows: list[Row]) -> None:
        if rows:
            atomic_write_text(report.folder / name, to_csv(rows))
            report.files.append(report.folder / name)

    put(UNITS_TABLE, report.units)
    for kind in KINDS.values():
        for name in kind.tables:
            put(name, report.rows(name))
        if kind.write is not None:
            report.files += kind.write(report)

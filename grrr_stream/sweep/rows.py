"""The sweep's tables as typed rows: :class:`Report` (what every kind's finished units contribute), the one
reader of the units' CSV files (:func:`read_rows`), and the names of the tables in ``WORKDIR/report``.

A cell becomes a number only when writing that number back (``files.to_csv``) gives the very same text, so
the report's tables hold the units' cells byte for byte while their readers get numbers, with None for an
empty cell. The HTML page (:mod:`grrr_stream.report`) reads these rows; nothing here imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from ..files import read_csv

UNITS_TABLE = "units.csv"  # one row per unit (the other tables: each kind's ``tables``)


Cell = Union[None, int, float, str]
Row = dict[str, Cell]

# columns that name things: text even when a name looks like a number (a variant called "100")
_TEXT_COLUMNS = frozenset(
    {
        "transition",
        "kind",
        "from",
        "to",
        "variant",
        "label",
        "verdict",
        "metric",
        "comparison",
        "suite",
        "benchmark",
        "reference",
        "method",
        "domain",
        "chain",
        "selector",
        "set",
        "group",
        "statistic",
        "resampling",
        "sparsity_compare",
        "model",
        "component",
        "group_sft_rl",
        "transitions",
        "outlier_channels",
    }
)


def parse_cell(column: str, text: str) -> Cell:
    if text == "":
        return None
    if column in _TEXT_COLUMNS:
        return text
    for kind, written in ((int, str), (float, repr)):
        try:
            value = kind(text)
        except ValueError:
            continue
        if written(value) == text:
            return value
    return text


def read_rows(path: Path) -> list[Row]:
    """A result table as typed rows; [] when the file is not there."""
    if not path.is_file():
        return []
    return [{k: parse_cell(k, v) for k, v in r.items()} for r in read_csv(path)]


def rectangular(rows: list[Row]) -> list[Row]:
    """Every row with every column (in order of first appearance), None where a row has none: the rows
    as a reader of their CSV file sees them."""
    columns = list(dict.fromkeys(k for r in rows for k in r))
    return [{c: r.get(c) for c in columns} for r in rows]


@dataclass
class TableRows:
    """One table of the sweep's report, as a kind gives it (its ``report`` hook): its file in ``WORKDIR/report``
    and its rows. With a ``title``, the HTML page shows it in the kinds' tables, title, ``note`` and rows as they
    are (``folded``: closed); without one, the page shows it where it lays it out itself (the paper's tables:
    ``report/tables.py``)."""

    name: str
    rows: list[Row]
    title: str = ""
    note: str = ""
    folded: bool = False  # a long dump: shown closed


@dataclass
class Report:
    """The sweep's report: the units table and every kind's tables (file name → :class:`TableRows`, in the order
    the kinds give them); ``data``: what the page needs of a kind's finished units besides tables, under a
    constant of that kind's module (the claims summaries, the stores' per-matrix rows)."""

    folder: Path
    units: list[Row] = field(default_factory=list)
    tables: dict[str, TableRows] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)

    def rows(self, name: str) -> list[Row]:
        """The rows of the table written as ``name`` ([] when no kind gave it)."""
        table = self.tables.get(name)
        return table.rows if table is not None else []

    def add(self, table: TableRows) -> None:
        if table.name in self.tables:
            raise ValueError(f"report table {table.name} given twice: each kind names its own tables")
        self.tables[table.name] = table

    @property
    def titled(self) -> list[TableRows]:
        """The tables with rows that the page shows through its one generic section."""
        return [t for t in self.tables.values() if t.title and t.rows]

"""The report's table cells and the shapes its tables take (grouped, split when wide, transposed).

Every cell keeps where it comes from: the CSV file in WORKDIR/report, the row's index there and the
column (``Cell.src``, rendered as ``data-src``), and the exact text that file holds (``Cell.text``,
rendered as ``data-value``), so a reader (and the browser test) can check any number against its file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

from ..stats.claims_sets import method_group
from ..sweep.kinds import TRANSITION_COLUMNS

Row = dict


def csv_text(v) -> str:
    """The text :func:`grrr_stream.files.to_csv` writes for a cell."""
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(float(v))
    return str(v)


UNDEFINED = "—"


def shown(v) -> str:
    """A cell as people read it: 4 significant digits for floats (whole units from 1000 to 1e6), 'yes' / 'no' for
    booleans, '—' for undefined (no value, NaN: a ratio to a zero score, a statistic of no transition)."""
    if v is None or (isinstance(v, str) and v.strip().lower() in ("", "nan")):
        return UNDEFINED
    if isinstance(v, bool):
        return "yes" if v else "no"
    if not isinstance(v, float):
        return str(v)
    if v != v or v in (float("inf"), float("-inf")):
        return UNDEFINED
    if 1000 <= abs(v) < 1e6:  # whole units say enough (1150 %, 5333 %)
        return f"{v:.0f}"
    return f"{v:.4g}"


@dataclass
class Cell:
    value: object
    src: str = ""  # 'file.csv#row:column' ('' for a cell computed for display only)
    lo: Optional["Cell"] = None  # an interval's ends: shown as 'x [lo, hi]', each end naming its own source
    hi: Optional["Cell"] = None

    @property
    def text(self) -> str:
        return csv_text(self.value)

    @property
    def display(self) -> str:
        return shown(self.value)

    @property
    def number(self) -> bool:
        return isinstance(self.value, (int, float)) and not isinstance(self.value, bool)

    @property
    def has_interval(self) -> bool:
        return self.lo is not None and self.hi is not None and UNDEFINED not in (self.lo.display, self.hi.display)


@dataclass
class Table:
    id: str
    title: str
    note: str
    columns: list[str]
    groups: list[tuple[str, list[list[Cell]]]] = field(default_factory=list)
    folded: bool = False  # a dump: shown inside <details>, closed

    @property
    def n_rows(self) -> int:
        return sum(len(rows) for _, rows in self.groups)


# the keys of the report's tables (what each measure is of), as people read them; the measures' labels are their
# columns' (TRANSITION_COLUMNS: the analyses', the paper's, each kind's)
LABELS = {
    "transition": "transition",
    "kind": "kind",
    "method": "method",
    "n": "matrices",
    "variant": "variant",
    "value": "value",
    "transitions": "transitions",
}
VARIANT_LABELS = {
    "base": "Base",
    "full": "Full",
    "diag": "Diag",
    "off": "Off",
    "null": "Null",
    "offnull": "OffNull",
    "proj": "proj",
}
MAX_COLUMNS = 12  # wider tables are split into parts (the key columns repeated), never scrolled


def label(col: str) -> str:
    """A CSV column as the page names it: the paper's symbol, a declared column's label (a statistic of it
    says which: '(pooled)', '(median matrix)'), else the name with spaces (a kind's column, not declared yet:
    its mean unnamed)."""
    if col in LABELS:
        return LABELS[col]
    return TRANSITION_COLUMNS.label(col) or col.replace("_mean", "").replace("_", " ")


@dataclass
class Col:
    key: str
    label: str
    lo: str = ""  # the columns of its interval's ends ('' for none)
    hi: str = ""


def columns_of(
    rows: Sequence[Row], wanted: Sequence[str], intervals: Optional[dict[str, tuple[str, str]]] = None
) -> list[Col]:
    """The wanted columns that the rows have, each X with X_ci_lo / X_ci_hi (or the ends ``intervals`` names)
    folded into one interval column; the ends never stand alone."""
    have = set().union(*(r.keys() for r in rows)) if rows else set()
    intervals = dict(intervals or {})
    for k in wanted:
        if f"{k}_ci_lo" in have and f"{k}_ci_hi" in have:
            intervals.setdefault(k, (f"{k}_ci_lo", f"{k}_ci_hi"))
    ends = {e for pair in intervals.values() for e in pair}
    # a column no row fills (a note nobody wrote) says nothing: left out
    empty = {k for k in have if all(r.get(k) in (None, "") for r in rows)}
    out = []
    for k in wanted:
        if k in have and k not in ends and k not in empty:
            lo, hi = intervals.get(k, ("", ""))
            out.append(Col(k, label(k) + (" [95 % CI]" if lo else ""), lo, hi))
    return out


def cell(r: Row, i: Optional[int], source: str, col: Col) -> Cell:
    def one(key: str) -> Cell:
        return Cell(r.get(key), f"{source}#{i}:{key}" if i is not None and key in r else "")

    c = one(col.key)
    if col.lo:
        c.lo, c.hi = one(col.lo), one(col.hi)
    return c


def _cells(rows: Sequence[Row], source: str, cols: Sequence[Col]) -> list[tuple[int, list[Cell]]]:
    return [(i, [cell(r, i, source, c) for c in cols]) for i, r in enumerate(rows)]


def grouped(
    rows: Sequence[Row],
    source: str,
    cols: Sequence[Col],
    method_of: Callable[[Row], Optional[str]],
    sft_methods: Sequence[str],
    extra: Optional[Callable[[int, Row], list[Cell]]] = None,
) -> list[tuple[str, list[list[Cell]]]]:
    """The rows as cells, in groups SFT, RL and (rows without a method) 'no method', in that order."""
    out: dict[str, list[list[Cell]]] = {"SFT": [], "RL": [], "no method": []}
    for i, cells in _cells(rows, source, cols):
        group = method_group(method_of(rows[i]), sft_methods) or "no method"
        out[group].append(cells + (extra(i, rows[i]) if extra else []))
    return [(g, rs) for g, rs in out.items() if rs]


def split(table: Table, keys: Union[int, Sequence[str]]) -> list[Table]:
    """A table wider than :data:`MAX_COLUMNS` as parts of at most that many columns, as even as they go, each
    starting with the row's key: the columns named in ``keys`` (their labels; those the table has), or its first
    ``keys`` columns. A part without its key would be rows nobody can name."""
    if len(table.columns) <= MAX_COLUMNS:
        return [table]
    if isinstance(keys, int):
        key = list(range(min(keys, len(table.columns))))
    else:
        key = [i for i, c in enumerate(table.columns) if c in keys]
    rest = [i for i in range(len(table.columns)) if i not in key]
    if len(key) >= MAX_COLUMNS or not rest:
        return [table]
    count = -(-len(rest) // (MAX_COLUMNS - len(key)))
    step = -(-len(rest) // count)
    parts = [rest[k : k + step] for k in range(0, len(rest), step)]
    out = []
    for n, idx in enumerate(parts, 1):
        cols = key + idx
        out.append(
            Table(
                table.id if n == 1 else f"{table.id}-{n}",
                f"{table.title} (part {n} of {len(parts)})",
                table.note if n == 1 else "",
                [table.columns[c] for c in cols],
                [(g, [[row[c] for c in cols] for row in rows]) for g, rows in table.groups],
                table.folded,
            )
        )
    return out


def transposed(
    tid: str,
    title: str,
    note: str,
    rows: Sequence[Row],
    source: str,
    keys: Sequence[str],
    name: str = "transition",
    per_table: int = 6,
) -> list[Table]:
    """Many statistics of a few transitions: one row per statistic, one column per transition (at most
    ``per_table`` transitions per table)."""
    out = []
    chunks = [list(range(len(rows)))[k : k + per_table] for k in range(0, len(rows), per_table)] or [[]]
    for n, idx in enumerate(chunks, 1):
        body = [
            [Cell(label(k))] + [Cell(rows[i].get(k), f"{source}#{i}:{k}" if k in rows[i] else "") for i in idx]
            for k in keys
        ]
        out.append(
            Table(
                tid if n == 1 else f"{tid}-{n}",
                title + (f" ({n} of {len(chunks)})" if len(chunks) > 1 else ""),
                note if n == 1 else "",
                ["statistic"] + [str(rows[i].get(name)) for i in idx],
                [("", body)],
            )
        )
    return out


def ungrouped(
    rows: Sequence[Row], source: str, wanted: Sequence[str], intervals: Optional[dict[str, tuple[str, str]]] = None
) -> tuple[list[Col], list[tuple[str, list]]]:
    """The wanted columns the rows have and the rows as cells, in one group without a name."""
    cols = columns_of(rows, wanted, intervals)
    return cols, [("", [c for _, c in _cells(rows, source, cols)])]

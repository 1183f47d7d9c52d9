"""Columns as objects: what a per-matrix column is, how it aggregates over a scope of matrices, what it is called
for people and where it appears. The one place where column names are built from a stem and a statistic
(``f_diag`` → ``f_diag_mean``) and parsed back (``band64_off_principal_mean`` → the bands column at edge 64,
statistic mean): every table, page, console line and MLflow metric asks a :class:`Schema` instead.

A :class:`Column` is declared once, by the module that computes it (the paper's metrics in
:mod:`grrr_stream.geometry.metrics`, each analysis in its module of :mod:`grrr_stream.geometry.analyses`). A
column whose name holds fields (``band{edge}_diag_principal``) is a family: the settings decide which members a
store has, and :meth:`Schema.find` recognises any member by its name.

:func:`aggregate` is the one scope aggregator (summary.csv, ``grrr-stream stats``): scopes are spelled ``all``,
``module:<m>``, ``layer:<i>`` and ``expert:<e>``.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

import numpy as np

# where a column appears (Column.shown)
SUMMARY = "summary"  # summary.csv (its statistics per scope) and the statistics of `grrr-stream stats`
TRANSITIONS = "transitions"  # the sweep's transitions.csv (the aggregate's `transitions` statistics)
REPORT = "report"  # the report's table of the analyses beyond the paper
FIGURE = "figure"  # the report's figure of the analyses beyond the paper
CONSOLE = "console"  # the line `grrr-stream sweep` prints per transition
HEADLINE = "headline"  # an MLflow metric of the transition's run (the aggregate's headline statistic)
PLACES = frozenset({SUMMARY, TRANSITIONS, REPORT, FIGURE, CONSOLE, HEADLINE})


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _mean_std(name: str, rows: Sequence[Mapping]) -> dict:
    vals = np.array([float(r[name]) for r in rows if _number(r.get(name))])
    if not len(vals):
        return {}
    return {f"{name}_mean": float(vals.mean()), f"{name}_std": float(vals.std(ddof=1)) if len(vals) > 1 else 0.0}


def _pooled_by_entries(name: str, rows: Sequence[Mapping]) -> dict:
    """Σ counted / Σ entries over the matrices (a large MLP matrix weighs more than a small k_proj), and the
    per-matrix spread. Each count is recovered exactly as round(fraction · entries): a stored fraction is
    count/entries correctly rounded, off by far less than half an entry below 2^52 entries."""
    have = [r for r in rows if r.get(name) is not None]
    if not have:
        return {}
    sizes = [int(r["rows"]) * int(r["cols"]) for r in have]
    counted = sum(round(float(r[name]) * n) for r, n in zip(have, sizes))  # Python ints: exact
    fractions = [float(r[name]) for r in have]
    return {
        f"{name}_pooled": counted / sum(sizes) if sum(sizes) else 1.0,
        f"{name}_min": min(fractions),
        f"{name}_median": float(statistics.median(fractions)),
        f"{name}_max": max(fractions),
    }


def _joined(name: str, rows: Sequence[Mapping]) -> dict:
    seen = sorted({str(r[name]) for r in rows if r.get(name)})
    return {name: "; ".join(seen)} if seen else {}


@dataclass(frozen=True)
class Aggregate:
    """How a column aggregates over a scope's matrices: ``reduce(name, rows)`` → {statistic's column: value};
    ``stats``: each statistic's suffix (the column's name + suffix) and its words for people ('' for none);
    ``transitions``: the suffixes transitions.csv keeps; ``headline``: the suffix MLflow logs under the plain
    name; ``first``: summary.csv writes these columns before the others (mean ± std leads there)."""

    name: str
    reduce: Callable[[str, Sequence[Mapping]], dict]
    stats: tuple[tuple[str, str], ...]
    transitions: tuple[str, ...]
    headline: str
    first: bool = False
    spread: str = ""  # the suffix of the statistic that says how far the matrices are apart (mean's std)


MEAN = Aggregate(
    "mean ± std", _mean_std, (("_mean", ""), ("_std", " (std over matrices)")), ("_mean",), "_mean", True, "_std"
)
POOLED = Aggregate(
    "pooled Σ/Σ over entries",
    _pooled_by_entries,
    (
        ("_pooled", " (pooled)"),
        ("_min", " (least matrix)"),
        ("_median", " (median matrix)"),
        ("_max", " (largest matrix)"),
    ),
    ("_pooled", "_min", "_median", "_max"),
    "_pooled",
)
JOINED = Aggregate("the distinct texts, joined", _joined, (("", ""),), ("",), "")
# a matrix's own facts (its shape, its raw energies): in metrics.csv only
NONE = Aggregate("not aggregated", lambda name, rows: {}, (), (), "")
# one value per transition (a sweep kind's column: its unit's result for the transition), under its own name
VALUE = Aggregate(
    "one value per transition", lambda name, rows: {name: rows[0].get(name)} if rows else {}, (("", ""),), ("",), ""
)

DEFAULT_SHOWN = frozenset({SUMMARY, TRANSITIONS, REPORT})
# a share of ‖ΔW‖² against what an isotropic update of the same shapes puts there (Column.isotropic)
ISO, VS_ISO = "_iso", "_vs_iso"
ISO_STATS = ((ISO, " (isotropic value at these shapes)"), (VS_ISO, " (× its isotropic value)"))
_FIELD = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Column:
    """One per-matrix column of metrics.csv. ``name`` and ``label`` may hold fields (``{edge}``): then the
    column is a family, and :meth:`at` gives its members. ``unit``: what its numbers count ('' for a plain
    ratio); ``short``: its name on the console line (``label`` when empty); ``fmt``: its format there."""

    name: str
    label: str
    unit: str = ""
    aggregate: Aggregate = MEAN
    shown: frozenset = DEFAULT_SHOWN
    short: str = ""
    fmt: str = ".3f"
    values: Mapping[str, Any] = field(default_factory=dict)  # a member's field values
    family: str = ""  # a member's family (the name with its fields)
    # a share whose scale depends on the matrix's shape: (a metrics.csv row, the member's field values) → what an
    # isotropic update puts there (geometry/isotropic.py); its mean is then read against the mean of these
    isotropic: Optional[Callable[[Mapping, Mapping], float]] = None

    def __post_init__(self) -> None:
        unknown = set(self.shown) - PLACES
        if unknown:
            raise ValueError(f"column {self.name}: unknown places {sorted(unknown)}; known: {sorted(PLACES)}")

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(_FIELD.findall(self.name))

    def at(self, **values: Any) -> "Column":
        """The member of a family with these field values."""
        return replace(
            self,
            name=self.name.format(**values),
            label=self.label.format(**values),
            short=self.short.format(**values),
            values={**self.values, **values},
            family=self.family or self.name,
        )

    def stat(self, suffix: str) -> str:
        """The name of one of its statistics' columns ('_mean' → 'f_diag_mean')."""
        return self.name + suffix

    @property
    def headline(self) -> str:
        """The name of its headline statistic's column ('f_diag_mean', 'frac_unchanged_pooled')."""
        return self.stat(self.aggregate.headline)

    @property
    def stats(self) -> tuple[tuple[str, str], ...]:
        """(suffix, words) of each statistic it aggregates to: its aggregate's, and for a shape-dependent share
        its isotropic value and its ratio to it."""
        return self.aggregate.stats + (ISO_STATS if self.isotropic else ())

    @property
    def transition_stats(self) -> tuple[str, ...]:
        """The names of the statistics' columns transitions.csv keeps of it."""
        return tuple(self.stat(s) for s in self.aggregate.transitions + ((ISO, VS_ISO) if self.isotropic else ()))

    def against_isotropic(self, rows: Sequence[Mapping]) -> dict:
        """Its isotropic value over a scope's matrices (the mean of each matrix's) and the headline's ratio to it:
        {} for a column that has none, or for matrices without a shape."""
        if self.isotropic is None:
            return {}
        have = [r for r in rows if _number(r.get(self.name)) and all(_number(r.get(k)) for k in ("rows", "cols"))]
        if not have:
            return {}
        iso = float(np.mean([self.isotropic(r, self.values) for r in have]))
        mean = float(np.mean([float(r[self.name]) for r in have]))
        return {self.stat(ISO): iso, self.stat(VS_ISO): mean / iso if iso > 0 else None}

    @property
    def spread(self) -> str:
        """The name of its spread statistic's column ('f_diag_std')."""
        return self.stat(self.aggregate.spread)

    def of(self, family: "Column") -> bool:
        """Whether this column is ``family`` or one of its members."""
        return (self.family or self.name) == family.name

    def shown_in(self, place: str) -> bool:
        return place in self.shown

    def _pattern(self) -> re.Pattern:
        parts = re.split(r"(\{\w+\})", self.name)
        return re.compile(
            "".join(f"(?P<{p[1:-1]}>[A-Za-z0-9.+-]+?)" if p.startswith("{") else re.escape(p) for p in parts)
        )

    def member(self, name: str) -> Optional["Column"]:
        """This column (or its family's member) when ``name`` is it, else None."""
        if not self.fields:
            return self if name == self.name else None
        m = self._pattern().fullmatch(name)
        return self.at(**m.groupdict()) if m else None


@dataclass(frozen=True)
class Found:
    """What a table's column name is: a schema column and one of its statistics ('' for the column itself)."""

    column: Column
    suffix: str

    @property
    def label(self) -> str:
        words = dict(self.column.stats).get(self.suffix, "")
        return self.column.label + words


class Schema:
    """The columns of one table in groups (a group: the columns one owner declares, such as one analysis; the
    paper's metrics are a group each), in their order: lookups by name (members of families included), the
    columns shown in a place, and the statistics' names each aggregate writes."""

    def __init__(self, *groups: Iterable[Column]):
        self.groups = tuple(tuple(g) for g in groups)
        self.columns = tuple(c for g in self.groups for c in g)

    def __add__(self, other: "Schema") -> "Schema":
        return Schema(*self.groups, *other.groups)

    def index(self, name: str) -> tuple[int, int]:
        """(group, place in the group) of the column (or family) ``name`` belongs to; past the end for none."""
        for i, g in enumerate(self.groups):
            for j, c in enumerate(g):
                if c.member(name) is not None:
                    return i, j
        return len(self.groups), 0

    def ordered(self, columns: Iterable[Column]) -> list[Column]:
        """The columns by group, each group's in the order given (a table's, metrics.csv's)."""
        return sorted(columns, key=lambda c: self.index(c.name)[0])

    def sorted(self, columns: Iterable[Column]) -> list[Column]:
        """The columns in the schema's order, a family's members by their field values (numbers as numbers)."""

        def key(c: Column) -> tuple:
            values = tuple((0, int(v), "") if str(v).isdigit() else (1, 0, str(v)) for v in c.values.values())
            return (*self.index(c.name), values)

        return sorted(columns, key=key)

    def column(self, name: str) -> Optional[Column]:
        """The column called ``name`` (a family's member included), or None."""
        for c in self.columns:
            hit = c.member(name)
            if hit is not None:
                return hit
        return None

    def find(self, name: str) -> Optional[Found]:
        """A column of a table derived from this schema (``f_diag_mean``, ``frac_unchanged_pooled``,
        ``angle16_left_cos2``): its column and statistic, or None."""
        for c in self.columns:
            for suffix in ("",) + tuple(s for s, _ in c.stats if s):
                if suffix and not name.endswith(suffix):
                    continue
                hit = c.member(name[: len(name) - len(suffix)] if suffix else name)
                if hit is not None:
                    return Found(hit, suffix)
        return None

    def present(self, names: Iterable[str], place: Optional[str] = None) -> list[Column]:
        """The columns (family members resolved) among ``names``, in the order of the names, that appear in
        ``place`` (None: anywhere)."""
        out, seen = [], set()
        for n in names:
            c = self.column(n)
            if c is not None and c.name not in seen and (place is None or c.shown_in(place)):
                out.append(c)
                seen.add(c.name)
        return out

    def summarised(self, names: Iterable[str], place: Optional[str] = None) -> list[Column]:
        """The columns whose statistics are among ``names`` (a summary's or a table's columns: ``f_diag_mean``),
        in the order of the names, that appear in ``place`` (None: anywhere)."""
        out, seen = [], set()
        for n in names:
            f = self.find(n)
            if f is None or f.column.name in seen or (place is not None and not f.column.shown_in(place)):
                continue
            out.append(f.column)
            seen.add(f.column.name)
        return out

    def stats_in(self, names: Iterable[str], place: str) -> list[str]:
        """The names (a table's columns, in its order) that are statistics of a column shown in ``place``."""
        out = []
        for n in names:
            f = self.find(n)
            if f is not None and f.column.shown_in(place):
                out.append(n)
        return out

    def label(self, name: str) -> Optional[str]:
        f = self.find(name)
        return f.label if f is not None else None


def at_one_edge(columns: Sequence[Column], prefer: str = "64") -> list[Column]:
    """The columns with the members of families over principal edges (an ``edge`` field) at one edge only:
    ``prefer`` when measured, else the first: a line or a figure shows one, the tables all."""
    edges = [str(c.values["edge"]) for c in columns if "edge" in c.values]
    edge = prefer if prefer in edges else (edges[0] if edges else None)
    return [c for c in columns if str(c.values.get("edge", edge)) == edge]


def scopes(rows: Sequence[Mapping], by: Sequence[str] = ("module", "layer", "expert")) -> dict[str, list]:
    """The scopes of a transition's matrices: 'all', then per field of ``by`` in that order, ``module:<m>``
    (a module of a mixture of experts pools its experts), ``layer:<i>`` (by layer) and ``expert:<e>`` (one
    expert index over layers and modules; only matrices of experts)."""
    out: dict[str, list] = {"all": list(rows)}
    for key in by:
        have = [r for r in rows if r.get(key) is not None and r.get(key) != ""]
        if key != "module":
            have = sorted(have, key=lambda r: r[key])
        for r in have:
            out.setdefault(f"{key}:{r[key]}", []).append(r)
    return out


def undeclared(rows: Sequence[Mapping], schema: Schema) -> list[Column]:
    """Numeric columns of the rows that no column of the schema declares, as mean ± std columns (a column a
    newer or older analysis wrote is summarised, never dropped)."""
    out: list[Column] = []
    seen: set[str] = set()
    for r in rows:
        for k, v in r.items():
            if k not in seen and _number(v) and schema.column(k) is None:
                out.append(Column(k, k.replace("_", " ")))
            seen.add(k)
    return out


def held(rows: Sequence[Mapping], schema: Schema) -> list[Column]:
    """The columns the rows hold, in the rows' order: the schema's, then any it does not declare."""
    return schema.present(_ordered_names(rows)) + undeclared(rows, schema)


def aggregate(rows: Sequence[Mapping], schema: Schema, by: Sequence[str] = ("module", "expert")) -> list[dict]:
    """One row per scope (:func:`scopes`): its name, its matrix count, and each column's statistics over the
    scope's matrices that have it. Mean ± std columns first, in the order the rows hold them, then the other
    aggregates in the order the schema declares them. A column no row holds writes nothing."""
    cols = held(rows, schema)
    rest = sorted((c for c in cols if not c.aggregate.first), key=lambda c: schema.index(c.name))  # as declared
    ordered = [c for c in cols if c.aggregate.first] + rest
    out = []
    for scope, rs in scopes(rows, by).items():
        row: dict[str, Any] = {"scope": scope, "n": len(rs)}
        for c in ordered:
            row.update(c.aggregate.reduce(c.name, rs))
            row.update(c.against_isotropic(rs))
        out.append(row)
    return out


def _ordered_names(rows: Sequence[Mapping]) -> Iterator[str]:
    seen: set[str] = set()
    for r in rows:
        for k in r:
            if k not in seen:
                seen.add(k)
                yield k

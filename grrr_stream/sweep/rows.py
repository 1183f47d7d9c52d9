"""The sweep's tables as typed rows: :class:`Report` (what every kind's finished units contribute), the one
reader of the units' CSV files (:func:`read_rows`), and the names of the tables in ``WORKDIR/report``.

A cell becomes a number only when writing that number back (``files.to_csv``) gives the very same text, so
the report's tables hold the units' cells byte for byte while their readers get numbers, with None for an
empty cell. The HTML page (:mod:`grrr_stream.report`) reads these rows; nothing here imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

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
class Report:
    folder: Path
    units: list[Row] = field(default_factory=list)
    transitions: list[Row] = field(default_factory=list)
    comparisons: list[Row] = field(default_factory=list)
    stats_overall: list[Row] = field(default_factory=list)
    accuracy: list[Row] = field(default_factory=list)
    retention: list[Row] = field(default_factory=list)
    removal: list[Row] = field(default_factory=list)
    solved_lost: list[Row] = field(default_factory=list)
    differences: list[Row] = field(default_factory=list)
    informative: list[Row] = field(default_factory=list)
    claim_rows: list[Row] = field(default_factory=list)
    claims: dict = field(default_factory=dict)  # evaluation suite → stats.claims_sets.summarise(...) (kinds/claims.py)
    # pass@k, maj@k and avg@n per transition, variant and benchmark, where answers were sampled (n > 1)
    sampled: list[Row] = field(default_factory=list)
    # residual channels (kinds/channels.py, channel_stats.py, channel_groups.py): analysed models, per-transition shares, SFT vs RL, per layer
    channel_models: list[Row] = field(default_factory=list)
    channels: list[Row] = field(default_factory=list)
    channels_sft_rl: list[Row] = field(default_factory=list)
    channel_layers: list[Row] = field(default_factory=list)
    # transition id → its store's per-matrix rows (metrics.csv), for the HTML report's heatmaps
    matrices: dict[str, list[Row]] = field(default_factory=dict)
    # a kind's own tables beyond those above (file name → rows): written as they are, and shown by the HTML page
    # as extra tables
    extra: dict[str, list[Row]] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)

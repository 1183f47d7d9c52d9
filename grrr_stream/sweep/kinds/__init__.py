"""The kinds of sweep unit, one module each, and :data:`KINDS`, the registry the sweep reads them from.

Each ``kinds/<kind>.py`` holds everything about one kind: its frozen, keyed parameter model, ``plan(ctx)``,
``run(unit, ctx)``, its completion marker, ``estimate(unit, facts)`` and what it contributes to the report,
gathered in its ``KIND`` record (:class:`~.base.Kind`). Adding a kind is that module and its line below
(named in the import, listed in KINDS).
The order is the plan's: a kind is planned after, and its units listed after, the kinds it may depend on.
"""

from __future__ import annotations

from ...columns import Schema
from ...geometry.analyses import MATRIX_COLUMNS
from . import (
    channel_groups,
    channel_stats,
    channels,
    claims,
    compare,
    decompose,
    evaluate,
    generate,
    stats,
    variant,
)
from .base import Kind

KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        generate.KIND,
        decompose.KIND,
        channels.KIND,
        channel_stats.KIND,
        channel_groups.KIND,
        stats.KIND,
        compare.KIND,
        variant.KIND,
        evaluate.KIND,
        claims.KIND,
    )
}

# the tables the kinds write into WORKDIR/report, in the order they write them
TABLES: tuple[str, ...] = tuple(t for k in KINDS.values() for t in k.tables)

# every column of the sweep's tables: the matrices' (their statistics in transitions.csv), then each kind's
TRANSITIONS_TABLE = decompose.TABLE
TRANSITION_COLUMNS: Schema = MATRIX_COLUMNS + Schema(*(k.columns for k in KINDS.values() if k.columns))

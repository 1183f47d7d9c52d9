"""Sweeps: chains of models → a plan of units of work → executed, resumably, here or on a Dask cluster.

Plan, then execute. :func:`plan_sweep` expands a :class:`~grrr_stream.sweep.config.SweepConfig`
into units (generate the tiny chain, decompose a transition, summary statistics, one
comparison, one variant build, one transition's evaluation), each with a *key*: a hash of
everything that determines its result, including the keys of the units it reads from.
Outputs live under folders named by that key, so a changed setting produces new results
beside the old ones instead of mixing with them, and a setting that cannot change
results (device, progress display, tracking) leaves keys, and therefore results, alone.

A unit is done when its record under ``WORKDIR/.sweep/units/`` says so with the same key
and its output exists. The units themselves resume at a finer grain (matrix, variant,
prompt), so a kill at any moment loses at most the matrix / chunk of prompts in flight.
A failing unit is recorded with its error; units that need its output are *blocked*, the
rest go on. One sweep process per workdir (an advisory lock).

The modules, in the order data flows through them:

- :mod:`.units`: transitions, units and one typed parameter model per kind of unit (its key);
- :mod:`.plan` (with :mod:`.sources`): config → units, every problem reported at once;
- :mod:`.records`: per-unit records, the workdir lock, unit states, what is blocked;
- :mod:`.runners`: one runner per kind of unit; :mod:`.execute`: dependency order, local and
  Dask executors; :mod:`.display`: progress lines; :mod:`.run`: :func:`run_sweep`;
- :mod:`.report`: the results read once as typed rows, the report folder;
- :mod:`.status`: unit states and disk needs for the CLI.
"""

from .execute import DaskExecutor, Frontier, LocalExecutor, execute_units
from .plan import Plan, nearest_common_ancestor, plan_sweep
from .records import Records, SweepLock, blockers, output_complete, unit_state
from .report import Report, read_rows, write_report
from .run import SweepResult, run_sweep
from .runners import RunContext, run_unit
from .status import sweep_status, unit_disk_needs
from .units import (KIND_ORDER, SWEEP_FORMAT, WORKER_KINDS, CompareParams, DecomposeParams, EvaluateParams,
                    GenerateParams, StatsParams, Transition, Unit, UnitParams, VariantParams)

__all__ = [
    "KIND_ORDER", "SWEEP_FORMAT", "WORKER_KINDS", "CompareParams", "DaskExecutor", "DecomposeParams",
    "EvaluateParams", "Frontier", "GenerateParams", "LocalExecutor", "Plan", "Records", "Report",
    "RunContext", "StatsParams", "SweepLock", "SweepResult", "Transition", "Unit", "UnitParams",
    "VariantParams", "blockers", "execute_units", "nearest_common_ancestor", "output_complete", "plan_sweep",
    "read_rows", "run_sweep", "run_unit", "sweep_status", "unit_disk_needs", "unit_state", "write_report",
]

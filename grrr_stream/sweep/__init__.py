"""Sweeps: chains of models → a plan of units of work → executed, resumably, here or on a Dask cluster.

Plan, then execute. :func:`plan_sweep` expands a :class:`~grrr_stream.sweep.config.SweepConfig`
into units (generate the tiny chain, decompose a transition, summary statistics, one
comparison, one variant build, one transition's evaluation, a model's outlier channels, a
transition's energy on them), each with a *key*: a hash of everything that determines its result,
including the keys of the units it reads from. Outputs live under folders named by that key, so a
changed setting produces new results beside the old ones instead of mixing with them, and a setting
that cannot change results (device, progress display, tracking) leaves keys, and therefore results, alone.

Each kind of unit is one module, ``kinds/<kind>.py`` (its parameters and key, planning, running, completion
marker, estimate and report rows), registered in :data:`~.kinds.KINDS`. A unit is done when its record
says so with the same key and its kind's completion marker is there. The units themselves resume at a finer
grain (matrix, variant, prompt), so a kill at any moment loses at most the matrix / chunk of prompts in
flight. A failing unit is recorded with its error; units that need its output are *blocked*, the rest go on.
One sweep process per workdir (an advisory lock); :class:`~.workdir.Workdir` names every path in it.

The modules, in the order data flows through them:

- :mod:`.units` (transitions, units, the parameters' base), :mod:`.workdir` (the workdir's layout),
  :mod:`.context` (what the kinds are handed), :mod:`.kinds` (one module per kind, and the registry);
- :mod:`.plan` (with :mod:`.sources`): config → units, every problem reported at once;
- :mod:`.records`: per-unit records, the workdir lock, unit states, what is blocked;
- :mod:`.runners`: one unit run and recorded; :mod:`.execute`: dependency order, local and
  Dask executors; :mod:`.display`: progress lines; :mod:`.run`: :func:`run_sweep` (disk check, forecast,
  execution, report, tracking); :mod:`.tracker`: MLflow logging in the background;
- :mod:`.rows` and :mod:`.tables`: the results read once as typed rows, the report folder's tables;
- :mod:`.forecast` (with :mod:`.estimate`): the plan's forecast; :mod:`.status`: unit states and disk needs.
"""

from .context import PlanContext, RunContext
from .execute import DaskExecutor, Frontier, LocalExecutor, execute_units
from .kinds import KINDS, Kind
from .kinds.compare import CompareParams
from .kinds.decompose import DecomposeParams
from .kinds.evaluate import EvaluateParams
from .kinds.generate import GenerateParams
from .kinds.stats import StatsParams
from .kinds.variant import VariantParams
from .plan import Plan, nearest_common_ancestor, plan_sweep
from .records import Records, SweepLock, blockers, output_complete, unit_state
from .rows import Report, read_rows
from .run import SweepResult, run_sweep
from .runners import run_unit
from .status import sweep_status, unit_disk_needs
from .tables import write_report
from .units import SWEEP_FORMAT, Transition, Unit, UnitParams
from .workdir import Workdir

__all__ = [
    "KINDS",
    "SWEEP_FORMAT",
    "CompareParams",
    "DaskExecutor",
    "DecomposeParams",
    "EvaluateParams",
    "Frontier",
    "GenerateParams",
    "Kind",
    "LocalExecutor",
    "Plan",
    "PlanContext",
    "Records",
    "Report",
    "RunContext",
    "StatsParams",
    "SweepLock",
    "SweepResult",
    "Transition",
    "Unit",
    "UnitParams",
    "VariantParams",
    "Workdir",
    "blockers",
    "execute_units",
    "nearest_common_ancestor",
    "output_complete",
    "plan_sweep",
    "read_rows",
    "run_sweep",
    "run_unit",
    "sweep_status",
    "unit_disk_needs",
    "unit_state",
    "write_report",
]

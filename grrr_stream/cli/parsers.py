"""One argument parser per subcommand over finished stores and sweeps: its flags, help and defaults.
The commands that read checkpoints or run models have theirs in :mod:`.model_parsers`."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import renamed
from ..geometry.analyses.bands import DEFAULT_BAND_EDGES
from .domains import COUNT, DRAWS, LEVEL, Domain
from .options import add_common, add_progress, add_stats_common, add_tracking

EDGES = ",".join(map(str, DEFAULT_BAND_EDGES))  # the stats bands command's default, as typed


class RenamedFlag(argparse.Action):
    """A flag's old name (``--sequential``, now ``--stepwise``): appends to the new one's list,
    with a :class:`~grrr_stream.errors.RenamedSettingWarning`."""

    def __call__(self, parser, namespace, values, option_string=None):
        renamed(f"the flag {option_string}", f"--{self.dest}")
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or []), values])


def stats_parser(sub) -> None:
    p = sub.add_parser(
        "stats",
        help="summaries with bootstrap CIs over decomposed transitions",
        description="Mean, std, median and bootstrap 95 %% CIs of every metric, overall, per module "
        "and per layer, one row per transition (CSV files in --out).",
    )
    p.add_argument("stores", nargs="+", type=Path, help="finished transition stores")
    p.add_argument("--out", type=Path, required=True, help="folder for the CSV tables")
    add_stats_common(p)


def bands_parser(sub) -> None:
    p = sub.add_parser(
        "bands",
        help="energy of P by principal band, from finished stores (no checkpoints, no SVD)",
        description="Split the energy of the diagonal and off-diagonal parts of every stored P into "
        "blocks by principal band of W0 (top-k×top-k, mixed, tail×tail) for band edges "
        "k; per matrix, module and layer, with a figure per transition.",
    )
    p.add_argument("stores", nargs="+", type=Path, help="finished transition stores")
    p.add_argument("--out", type=Path, required=True, help="folder for the tables and figures")
    p.add_argument("--edges", default=EDGES, help=f"comma-separated band edges k (default {EDGES})")
    p.add_argument("--scheduler", help="Dask scheduler: threads (default), processes, or ADDRESS of a cluster")
    add_progress(p)
    add_common(p)


def compare_parser(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="off-diagonal cosine geometry of transitions sharing a base frame",
        description="Median over matrices of cos(P_a^off, P_b^off) with a bootstrap CI and a matched "
        "isotropic-null test; update norms. Figures and CSV/JSON in --out.",
    )
    p.add_argument(
        "--stepwise",
        nargs=2,
        action="append",
        default=[],
        metavar=("SFT_STORE", "CUM_STORE"),
        help="base→SFT and base→RL stores: compares ΔW_SFT with ΔW_incr = W_RL − W_SFT (repeatable)",
    )
    p.add_argument("--sequential", nargs=2, action=RenamedFlag, dest="stepwise", help=argparse.SUPPRESS)
    p.add_argument(
        "--independent",
        nargs="+",
        action="append",
        default=[],
        metavar="A_STORE B_STORE [ANCESTOR_STORE]",
        help="base→A and base→B of two models neither of which descends from the other, compared as "
        "their updates from their nearest common ancestor C: give the store of base→C as a third "
        "store when C is not the base (repeatable)",
    )
    p.add_argument(
        "--cumulative",
        nargs=2,
        action="append",
        default=[],
        metavar=("A_STORE", "B_STORE"),
        help="base→A and base→B compared as the cumulative updates, whatever they share (repeatable)",
    )
    p.add_argument("--out", type=Path, required=True, help="folder for tables and figures")
    p.add_argument("--null-draws", type=DRAWS, default=10_000, help="Monte Carlo draws of the null (default 10000)")
    p.add_argument("--alpha", type=LEVEL, default=0.05, help="significance level of the verdict (default 0.05)")
    add_stats_common(p)


DEMO_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "demo.yaml"


def sweep_parser(sub, *, demo: bool = False) -> None:
    if demo:
        p = sub.add_parser(
            "demo",
            help="the built-in demo: `sweep configs/demo.yaml` (tiny trained chain, no network)",
            description="Shorthand for `grrr-stream sweep configs/demo.yaml`: takes the shipped tiny chain "
            "(base → SFT → RL, plus a sibling), decomposes, compares, builds variants, "
            "evaluates them with vLLM and logs to MLflow. Rerun to resume.",
        )
        p.set_defaults(config=DEMO_CONFIG)
    else:
        p = sub.add_parser(
            "sweep",
            help="plan and run a whole study from a sweep config (resumable)",
            description="Expand a sweep config (chains of models with their lineage) into units of "
            "work — decompositions, statistics, comparisons, variant builds, evaluations "
            "— and run every unit not yet done. Rerun the same command to resume after "
            "an interruption; failed units are retried, finished ones never recomputed.",
        )
        p.add_argument("config", type=Path, help="sweep YAML (see configs/demo.yaml, configs/paper.yaml)")
    p.add_argument("--dry-run", action="store_true", help="print the plan (and what is already done), run nothing")
    p.add_argument(
        "--forecast-for",
        metavar="DEVICE",
        help="forecast times for DEVICE instead of this machine: cpu (this machine, measured; the "
        "default), a100-80g, a100-40g, h100-80g, h100-pcie, h200, l40s (published figures; "
        "docs/forecast.md)",
    )
    p.add_argument(
        "--scheduler",
        help="where units run: threads (this process, default), local:N (a Dask "
        "LocalCluster of N worker processes) or the ADDRESS of a Dask scheduler",
    )
    p.add_argument("--workdir", type=Path, help="override the config's workdir")
    p.add_argument("--device", help="override decomposition/variant device (auto, cpu, cuda, cuda:N)")
    p.add_argument(
        "--math-subset",
        type=COUNT,
        metavar="N",
        help="also evaluate on the first N problems of each of the five math benchmarks",
    )
    p.add_argument(
        "--bench-dir",
        default="bundled",
        help="with --math-subset: folder with <name>/test.jsonl, 'bundled' (default: the copies shipped "
        "with grrr_stream) or 'hub[:OWNER/REPO]' (download)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress lines")
    p.add_argument(
        "--verbose",
        action="store_true",
        help="show vLLM's, transformers' and MLflow's own output live (it always goes to WORKDIR/logs/UNIT.log)",
    )
    add_tracking(p, experiment_default=None)
    add_common(p)


def report_parser(sub) -> None:
    p = sub.add_parser(
        "report",
        help="rewrite a sweep's HTML report (WORKDIR/report/index.html), running nothing",
        description="Read the finished units of a sweep and write its report folder again: the CSV "
        "tables, the figures and the self-contained HTML page. TARGET is the sweep's "
        "WORKDIR (its report/config.json holds the config the last sweep ran with) or "
        "its config YAML. No unit runs and nothing is logged to MLflow; with a tracking "
        "URI (flag, config or $MLFLOW_TRACKING_URI) the page links the sweep's runs.",
    )
    p.add_argument("target", type=Path, help="the sweep's WORKDIR or its config YAML")
    p.add_argument("--workdir", type=Path, help="with a config: override its workdir")
    p.add_argument("--math-subset", type=COUNT, metavar="N", help="with a config: as given to `sweep`")
    p.add_argument("--bench-dir", default="bundled", help="with a config: as given to `sweep`")
    add_tracking(p, experiment_default=None)
    add_common(p)


def status_parser(sub) -> None:
    p = sub.add_parser(
        "status",
        help="what a sweep has done, what is pending and what failed",
        description="Plan the sweep and print the state of every unit: done, pending, running, "
        "interrupted (will resume), failed (with its error) or blocked (needs a failed "
        "unit). Exit status 1 when a unit failed.",
    )
    p.add_argument("config", type=Path)
    p.add_argument("--workdir", type=Path, help="override the config's workdir")
    p.add_argument("--math-subset", type=COUNT, metavar="N", help="as given to `sweep`")
    p.add_argument("--bench-dir", default="bundled", help="as given to `sweep`")
    p.add_argument("--all", action="store_true", help="list done units too (default: totals and the rest)")
    add_common(p)


def track_parser(sub) -> None:
    p = sub.add_parser(
        "track",
        help="log to MLflow what earlier commands recorded as not logged",
        description="Apply the MLflow logging that was recorded because the tracking target could "
        "not be reached: from PATH/.tracking (a store or output folder), "
        "PATH/.sweep/tracking (a sweep's workdir) and PATH/*/.tracking. Runs are found by "
        "key (no duplicates) and keep the recorded start and end. Exit status 3 when "
        "some could still not be logged.",
    )
    p.add_argument("paths", nargs="+", type=Path, metavar="WORKDIR|STORE", help="a sweep workdir or result folder")
    p.add_argument("--tracking-uri", help="log there instead of the recorded tracking URI")
    p.add_argument("--timeout", type=Domain(int, 1, 600), default=10, help="seconds per MLflow request (default 10)")
    add_common(p)

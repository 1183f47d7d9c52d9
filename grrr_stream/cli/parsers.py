"""One argument parser per subcommand: its flags, help and defaults."""

from __future__ import annotations

from pathlib import Path

from ..dtypes import COMPUTE_NAMES, FLOAT_NAMES
from ..geometry.analyses.bands import DEFAULT_BAND_EDGES
from .options import add_common, add_progress, add_stats_common, add_tracking, positive_float

EDGES = ",".join(map(str, DEFAULT_BAND_EDGES))  # the stats bands command's default, as typed


def decompose_parser(sub) -> None:
    p = sub.add_parser(
        "decompose",
        help="decompose one transition (base → post) into a Zarr store",
        description="Stream two checkpoints matrix by matrix, write the GRRR decomposition of every "
        "update into a Zarr store, log it to MLflow. Rerun the same command to resume.",
    )
    p.add_argument("--base", help="base (W0) checkpoint: local folder or Hub repo id")
    p.add_argument("--post", help="post-trained (W1) checkpoint: local folder or Hub repo id")
    p.add_argument("--store", type=Path, help="Zarr store directory for this transition")
    p.add_argument("--config", type=Path, help="YAML file with any of the options (command-line flags win)")
    p.add_argument("--device", help="auto (default: GPU if torch sees one), cpu, cuda or cuda:N")
    p.add_argument("--compute-dtype", choices=COMPUTE_NAMES, help="arithmetic dtype (default float32)")
    p.add_argument("--store-dtype", choices=FLOAT_NAMES, help="dtype of stored P and null arrays (default float32)")
    p.add_argument("--frame-cache", type=Path, help="base-frame cache shared across transitions (default STORE/frames)")
    p.add_argument(
        "--null-storage",
        choices=["array", "norms"],
        help="keep the null residual as the m×n array (default) or only its row/column norms (about "
        "half the disk; variants recompute it, increment statistics refuse such stores)",
    )
    p.add_argument(
        "--core-threshold",
        type=float,
        dest="core_rel_threshold",
        help="keep only singular values > T·σ1 in the pretrained core (default: full rank)",
    )
    p.add_argument("--modules", help="comma-separated module names (default q,k,v,o,gate,up,down _proj)")
    p.add_argument("--module-pattern", help="regex with named groups 'layer' and 'module' for custom layouts")
    p.add_argument(
        "--split-fused",
        action="store_true",
        default=None,
        help="split fused qkv_proj / gate_up_proj (Phi-3) into q/k/v and gate/up (default: as stored)",
    )
    p.add_argument("--method", help="label of the post-training method, e.g. SFT, DPO, GRPO")
    p.add_argument("--chain", help="label of the model chain this transition belongs to")
    p.add_argument(
        "--overwrite",
        action="store_true",
        default=None,
        help="discard results in STORE that came from other inputs or settings",
    )
    p.add_argument(
        "--scheduler",
        help="threads (this process, default), local:N (N Dask worker processes) or the "
        "ADDRESS of a Dask scheduler (tcp://HOST:8786): spread the matrices over "
        "its workers, which must see the same paths",
    )
    p.add_argument(
        "--profile",
        choices=["standard", "full", "paper"],
        help="standard (default): every analysis but the exact subspace angles; full: every analysis; "
        "paper: only what the paper needs (no bands, subspace angles, bf16 survival or per-channel "
        "energies). Settings given in --config win; docs/decomposition.md",
    )
    figures = p.add_mutually_exclusive_group()
    figures.add_argument(
        "--figures",
        dest="figures",
        action="store_const",
        const=True,
        default=None,
        help="draw the transition's figures (STORE/figures, logged to MLflow; ~1.5 s at the end); "
        "the default of --profile full only",
    )
    figures.add_argument(
        "--no-figures",
        dest="figures",
        action="store_const",
        const=False,
        default=None,
        help="skip them, also with --profile full",
    )
    add_tracking(p, experiment_default=None)
    p.add_argument("--no-progress", action="store_true", help="no progress line")
    add_common(p)


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
        "--sequential",
        nargs=2,
        action="append",
        default=[],
        metavar=("SFT_STORE", "CUM_STORE"),
        help="base→SFT and base→RL stores: compares ΔW_SFT with ΔW_incr = W_RL − W_SFT (repeatable)",
    )
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
    p.add_argument("--null-draws", type=int, default=10_000, help="Monte Carlo draws of the null (default 10000)")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level of the verdict (default 0.05)")
    add_stats_common(p)


def add_channels(p) -> None:
    p.add_argument(
        "--channels",
        type=Path,
        help="channels.json (written by `grrr-stream channels`) whose base.channels are the outlier "
        "residual channels; needed by the channel variants (channels-outlier, channels-rest, ...)",
    )


def variants_parser(sub) -> None:
    p = sub.add_parser(
        "variants",
        help="build ablated variant models of a decomposed transition",
        description="Write W0 + chosen GRRR components of every decomposed matrix as Hugging Face "
        "folders OUT/<variant>/, with a dtype fidelity report OUT/<variant>.fidelity.csv.",
    )
    p.add_argument("--store", type=Path, required=True, help="finished transition store")
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        help="base, full, diag, off, null, offnull, randrm-SEED, channels-outlier, channels-rest, "
        "channels-SET-COMPONENT, or NAME=diag:W,off:W,null:W[,channels:SET] "
        "(repeatable; default: base full diag off null offnull randrm-0 randrm-1 randrm-2)",
    )
    p.add_argument("--out", type=Path, required=True, help="folder receiving one sub-folder per variant")
    add_channels(p)
    p.add_argument(
        "--dtype",
        default="float32",
        choices=FLOAT_NAMES,
        help="dtype of the written weights (default float32: keeps RL-sized updates)",
    )
    p.add_argument(
        "--rest-from",
        default="base",
        choices=["base", "post", "auto"],
        help="where composed variants take the tensors that are not decomposed (embeddings, norms, "
        "lm_head, biases): base (default), post, or auto (base if it can, else post, recorded); "
        "base and full are always the two checkpoints bit for bit",
    )
    p.add_argument("--device", default="auto", help="device for the rank-r products (auto, cpu, cuda[:N])")
    p.add_argument("--shard-gb", type=positive_float, default=2.0, help="maximum shard size in GiB (default 2)")
    p.add_argument("--overwrite", action="store_true", help="rebuild variants that exist with other settings")
    add_progress(p)
    add_tracking(p)
    add_common(p)


def _evaluation_design_and_sampling(p) -> None:
    """The evaluate command's design and sampling groups
    (:class:`~grrr_stream.evaluation.settings.EvaluationOptions`)."""
    g = p.add_argument_group("design (default fixed: every variant answers every problem, as the paper)")
    g.add_argument(
        "--design",
        choices=["fixed", "sequential"],
        help="sequential: each variant answers problems in a seeded order until its anytime-valid "
        "intervals decide every claim threshold or reach --precision-points (docs/evaluation.md)",
    )
    g.add_argument("--precision-points", type=float, help="sequential: stop within ± this many points (default 2)")
    g.add_argument("--chunk", type=int, help="sequential: problems between two looks (default 64)")
    g.add_argument("--order-seed", type=int, help="sequential: seed of the order problems are answered in (default 0)")
    g = p.add_argument_group("sampling (default: greedy, one answer per problem, as the paper)")
    g.add_argument("--samples", type=int, dest="n", help="answers per problem, drawn in one request each")
    g.add_argument("--temperature", type=float, help="sampling temperature (needed > 0 with --samples > 1)")
    g.add_argument("--top-p", type=float, help="nucleus sampling mass (default 1)")
    g.add_argument("--sampling-seed", type=int, help="seed of the sampled answers (default 0)")
    g.add_argument("--pass-k", help="comma-separated k of unbiased pass@k to report (k ≤ samples)")
    g.add_argument("--maj-k", help="comma-separated k of maj@k (majority vote over equivalent answers) to report")
    g.add_argument(
        "--metric",
        default="avg",
        help="accuracy of the tables: avg (avg@n; greedy accuracy with one sample), pass@K or maj@K",
    )


def evaluate_parser(sub) -> None:
    p = sub.add_parser(
        "evaluate",
        help="evaluate variants of a transition on math benchmarks with vLLM",
        description="Greedy vLLM evaluation of variants (streamed into one running engine by default) "
        "on benchmarks laid out as BENCH_DIR/<name>/test.jsonl; tables of accuracy, "
        "retention and diagonal-vs-random removal in --out. Rerun to resume.",
    )
    p.add_argument("--store", type=Path, required=True, help="finished transition store")
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        help="variants as for `variants` (default: base full diag off null offnull randrm-0..2)",
    )
    p.add_argument(
        "--benchmark",
        action="append",
        default=[],
        help="benchmark names (default: math500 aime24 amc23 minerva_math olympiadbench)",
    )
    p.add_argument(
        "--bench-dir",
        default="bundled",
        help="folder holding <name>/test.jsonl files; 'bundled' (default): the five math benchmarks "
        "shipped with grrr_stream; 'hub' or 'hub:OWNER/REPO': download them",
    )
    p.add_argument("--out", type=Path, required=True, help="results folder (generations, scores, tables)")
    p.add_argument("--limit", type=int, help="first N problems of each benchmark (quick subsets)")
    p.add_argument(
        "--lenient-benchmarks",
        action="store_true",
        help="skip (and count) malformed benchmark lines instead of refusing the file",
    )
    p.add_argument(
        "--materialize",
        choices=["engine", "folder"],
        default="engine",
        help="engine: swap weights in one running engine (default); folder: write each variant",
    )
    p.add_argument("--keep-variants", action="store_true", help="with --materialize folder: keep the folders")
    p.add_argument(
        "--rest-from", default="base", choices=["base", "post", "auto"], help="as for `variants` (default base)"
    )
    add_channels(p)
    p.add_argument(
        "--resamples",
        type=int,
        default=10_000,
        help="paired bootstrap resamples for the differences between variants (default 10000)",
    )
    p.add_argument(
        "--informative-points",
        type=float,
        default=1.0,
        help="the transition is informative when full − base ≥ this many points (default 1, the paper's)",
    )
    _evaluation_design_and_sampling(p)
    p.add_argument(
        "--template",
        default="chat",
        help="'chat' (the model's chat template) or a format string with {problem} and {instruction}",
    )
    p.add_argument(
        "--instruction",
        help="instruction appended to each problem (default: reason step by step, "
        "put the final answer within \\boxed{})",
    )
    p.add_argument("--max-new-tokens", type=int, help="default 3000")
    p.add_argument(
        "--engine-dtype",
        help="float32 (default), bfloat16, float16, auto (bfloat16 where every evaluated "
        "part of the update keeps --auto-min-energy of its energy, else float32)",
    )
    p.add_argument(
        "--auto-min-energy",
        type=float,
        help="with --engine-dtype auto: the share of each part's energy bf16 must keep (default 0.999)",
    )
    p.add_argument(
        "--last-step",
        type=Path,
        metavar="STORE",
        help="with --engine-dtype auto, for a POST trained from an intermediate model: the store of that "
        "last step (intermediate → POST), whose parts must keep the share too",
    )
    p.add_argument("--seed", type=int)
    p.add_argument("--tensor-parallel-size", type=int)
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--enforce-eager", action="store_true", default=None)
    p.add_argument("--cpu-kv-cache-gib", type=float, help="KV cache size on the CPU backend (default 1)")
    add_progress(p)
    add_tracking(p)
    add_common(p)


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
        type=int,
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
    p.add_argument("--math-subset", type=int, metavar="N", help="with a config: as given to `sweep`")
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
    p.add_argument("--math-subset", type=int, metavar="N", help="as given to `sweep`")
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
    p.add_argument("--timeout", type=int, default=10, help="seconds per MLflow request (default 10)")
    add_common(p)

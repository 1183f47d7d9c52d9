"""The parsers of the commands that read checkpoints or write and run models: ``decompose``,
``variants`` and ``evaluate``; each long one assembled from named groups of its flags."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..dtypes import COMPUTE_NAMES, FLOAT_NAMES
from .domains import COUNT, DRAWS, FRACTION, NON_NEGATIVE, POSITIVE, SEED, SHARE, Domain
from .options import add_channels, add_common, add_progress, add_tracking


def decompose_parser(sub) -> None:
    p = sub.add_parser(
        "decompose",
        help="decompose one transition (base → post) into a Zarr store",
        description="Stream two checkpoints matrix by matrix, write the GRRR decomposition of every "
        "update into a Zarr store, log it to MLflow. Rerun the same command to resume.",
    )
    _add_transition_arguments(p)
    _add_compute_arguments(p)
    _add_matrix_selection_arguments(p)
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
    _add_profile_arguments(p)
    add_tracking(p, experiment_default=None)
    p.add_argument("--no-progress", action="store_true", help="no progress line")
    add_common(p)


def _add_transition_arguments(p: argparse.ArgumentParser) -> None:
    """The two checkpoints, the store of their transition and the config file that may name them."""
    p.add_argument("--base", help="base (W0) checkpoint: local folder or Hub repo id")
    p.add_argument("--post", help="post-trained (W1) checkpoint: local folder or Hub repo id")
    p.add_argument("--store", type=Path, help="Zarr store directory for this transition")
    p.add_argument("--config", type=Path, help="YAML file with any of the options (command-line flags win)")


def _add_compute_arguments(p: argparse.ArgumentParser) -> None:
    """Where and in which dtypes the decomposition computes, and what of it is kept."""
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
        type=FRACTION,
        dest="core_rel_threshold",
        help="keep only singular values > T·σ1 in the pretrained core (default: full rank)",
    )


def _add_matrix_selection_arguments(p: argparse.ArgumentParser) -> None:
    """Which weight matrices of the checkpoints are decomposed."""
    p.add_argument("--modules", help="comma-separated module names (default q,k,v,o,gate,up,down _proj)")
    p.add_argument("--module-pattern", help="regex with named groups 'layer' and 'module' for custom layouts")
    p.add_argument(
        "--split-fused",
        action="store_true",
        default=None,
        help="split fused qkv_proj / gate_up_proj (Phi-3) into q/k/v and gate/up (default: as stored)",
    )


def _add_profile_arguments(p: argparse.ArgumentParser) -> None:
    """Which analyses run (--profile) and whether the figures are drawn."""
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
    p.add_argument("--shard-gb", type=POSITIVE, default=2.0, help="maximum shard size in GiB (default 2)")
    p.add_argument("--overwrite", action="store_true", help="rebuild variants that exist with other settings")
    add_progress(p)
    add_tracking(p)
    add_common(p)


def evaluate_parser(sub) -> None:
    p = sub.add_parser(
        "evaluate",
        help="evaluate variants of a transition on math benchmarks with vLLM",
        description="Greedy vLLM evaluation of variants (streamed into one running engine by default) "
        "on benchmarks laid out as BENCH_DIR/<name>/test.jsonl; tables of accuracy, "
        "retention and diagonal-vs-random removal in --out. Rerun to resume.",
    )
    _add_evaluation_inputs(p)
    _add_materialization_arguments(p)
    _add_difference_arguments(p)
    _add_design_arguments(p)
    _add_sampling_arguments(p)
    _add_prompt_arguments(p)
    _add_engine_arguments(p)
    add_progress(p)
    add_tracking(p)
    add_common(p)


def _add_evaluation_inputs(p: argparse.ArgumentParser) -> None:
    """What is evaluated on what: the store, its variants, the benchmarks, and where results go."""
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
    p.add_argument("--limit", type=COUNT, help="first N problems of each benchmark (quick subsets)")
    p.add_argument(
        "--lenient-benchmarks",
        action="store_true",
        help="skip (and count) malformed benchmark lines instead of refusing the file",
    )


def _add_materialization_arguments(p: argparse.ArgumentParser) -> None:
    """How each variant's weights reach the engine, as the `variants` command composes them."""
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


def _add_difference_arguments(p: argparse.ArgumentParser) -> None:
    """The paired bootstrap of the differences between variants and the informative-transition threshold."""
    p.add_argument(
        "--resamples",
        type=DRAWS,
        default=10_000,
        help="paired bootstrap resamples for the differences between variants (default 10000)",
    )
    p.add_argument(
        "--informative-points",
        type=NON_NEGATIVE,
        default=1.0,
        help="the transition is informative when full − base ≥ this many points (default 1, the paper's)",
    )


def _add_design_arguments(p: argparse.ArgumentParser) -> None:
    """The design group (:class:`~grrr_stream.evaluation.settings.EvaluationOptions`)."""
    g = p.add_argument_group("design (default fixed: every variant answers every problem, as the paper)")
    g.add_argument(
        "--design",
        help="fixed or adaptive (evaluation/designs/; 'sequential', its old name, is deprecated). adaptive: each "
        "variant answers problems in a seeded "
        "order until its anytime-valid intervals decide every claim threshold or reach --precision-points "
        "(docs/evaluation.md)",
    )
    g.add_argument("--precision-points", type=POSITIVE, help="adaptive: stop within ± this many points (default 2)")
    g.add_argument("--chunk", type=COUNT, help="adaptive: problems between two looks (default 64)")
    g.add_argument("--order-seed", type=SEED, help="adaptive: seed of the order problems are answered in (default 0)")


def _add_sampling_arguments(p: argparse.ArgumentParser) -> None:
    """The sampling group (:class:`~grrr_stream.evaluation.settings.SamplingSettings`) and the metric of
    the tables."""
    g = p.add_argument_group("sampling (default: greedy, one answer per problem, as the paper)")
    g.add_argument(
        "--samples", type=Domain(int, 1, 1024), dest="n", help="answers per problem, drawn in one request each"
    )
    g.add_argument(
        "--temperature", type=Domain(float, 0.0, 10.0), help="sampling temperature (needed > 0 with --samples > 1)"
    )
    g.add_argument("--top-p", type=SHARE, help="nucleus sampling mass (default 1)")
    g.add_argument("--sampling-seed", type=SEED, help="seed of the sampled answers (default 0)")
    g.add_argument("--pass-k", help="comma-separated k of unbiased pass@k to report (k ≤ samples)")
    g.add_argument("--maj-k", help="comma-separated k of maj@k (majority vote over equivalent answers) to report")
    g.add_argument(
        "--metric",
        default="avg",
        help="accuracy of the tables: avg (avg@n; greedy accuracy with one sample), pass@K or maj@K",
    )


def _add_prompt_arguments(p: argparse.ArgumentParser) -> None:
    """How each problem becomes a prompt."""
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


def _add_engine_arguments(p: argparse.ArgumentParser) -> None:
    """The vLLM engine's settings (:class:`~grrr_stream.evaluation.settings.EngineSettings`)."""
    p.add_argument("--max-new-tokens", type=Domain(int, 1, 2**20), help="default 3000")
    p.add_argument(
        "--engine-dtype",
        help="float32 (default), bfloat16, float16, auto (bfloat16 where every evaluated "
        "part of the update keeps --auto-min-energy of its energy, else float32)",
    )
    p.add_argument(
        "--auto-min-energy",
        type=SHARE,
        help="with --engine-dtype auto: the share of each part's energy bf16 must keep (default 0.999)",
    )
    p.add_argument(
        "--last-step",
        type=Path,
        metavar="STORE",
        help="with --engine-dtype auto, for a POST trained from an intermediate model: the store of that "
        "last step (intermediate → POST), whose parts must keep the share too",
    )
    p.add_argument("--seed", type=SEED)
    p.add_argument("--tensor-parallel-size", type=Domain(int, 1, 1024))
    p.add_argument("--gpu-memory-utilization", type=SHARE)
    p.add_argument("--max-model-len", type=Domain(int, 16, 2**24))
    p.add_argument("--enforce-eager", action="store_true", default=None)
    p.add_argument("--cpu-kv-cache-gib", type=POSITIVE, help="KV cache size on the CPU backend (default 1)")

"""Command line: thin wrappers over library functions.

Errors a user can cause (bad paths, mismatched checkpoints, bad config) print one
paragraph and exit with status 2; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from .errors import ConfigError, GrrrError

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def _add_tracking(p: argparse.ArgumentParser, *, experiment: bool = True,
                  experiment_default: Optional[str] = "grrr_stream") -> None:
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default $MLFLOW_TRACKING_URI or sqlite:///mlflow.db)")
    if experiment:
        p.add_argument("--experiment", default=experiment_default,
                       help=f"MLflow experiment (default {experiment_default})" if experiment_default else
                       "MLflow experiment (default: the config's tracking.experiment)")
    p.add_argument("--no-track", action="store_true", help="do not log to MLflow")


def _positive_float(text: str) -> float:
    import math

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text}")
    return v


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")


def _decompose_parser(sub) -> None:
    p = sub.add_parser("decompose", help="decompose one transition (base → post) into a Zarr store",
                       description="Stream two checkpoints matrix by matrix, write the GRRR decomposition of every "
                                   "update into a Zarr store, log it to MLflow. Rerun the same command to resume.")
    p.add_argument("--base", help="base (W0) checkpoint: local folder or Hub repo id")
    p.add_argument("--post", help="post-trained (W1) checkpoint: local folder or Hub repo id")
    p.add_argument("--store", type=Path, help="Zarr store directory for this transition")
    p.add_argument("--config", type=Path, help="YAML file with any of the options (command-line flags win)")
    p.add_argument("--device", help="auto (default: GPU if torch sees one), cpu, cuda or cuda:N")
    p.add_argument("--compute-dtype", choices=["float32", "float64"], help="arithmetic dtype (default float32)")
    p.add_argument("--store-dtype", choices=["float32", "float64", "float16", "bfloat16"],
                   help="dtype of stored P and null arrays (default float32)")
    p.add_argument("--frame-cache", type=Path, help="base-frame cache shared across transitions (default STORE/frames)")
    p.add_argument("--null-storage", choices=["array", "norms"],
                   help="keep the null residual as the m×n array (default) or only its row/column norms (about "
                        "half the disk; variants recompute it, increment statistics refuse such stores)")
    p.add_argument("--core-threshold", type=float, dest="core_rel_threshold",
                   help="keep only singular values > T·σ1 in the pretrained core (default: full rank)")
    p.add_argument("--modules", help="comma-separated module names (default q,k,v,o,gate,up,down _proj)")
    p.add_argument("--module-pattern", help="regex with named groups 'layer' and 'module' for custom layouts")
    p.add_argument("--split-fused", action="store_true", default=None,
                   help="split fused qkv_proj / gate_up_proj (Phi-3) into q/k/v and gate/up (default: as stored)")
    p.add_argument("--method", help="label of the post-training method, e.g. SFT, DPO, GRPO")
    p.add_argument("--chain", help="label of the model chain this transition belongs to")
    p.add_argument("--overwrite", action="store_true", default=None,
                   help="discard results in STORE that came from other inputs or settings")
    p.add_argument("--scheduler", help="threads (this process, default), local:N (N Dask worker processes) or the "
                                       "ADDRESS of a Dask scheduler (tcp://HOST:8786): spread the matrices over "
                                       "its workers, which must see the same paths")
    _add_tracking(p, experiment_default=None)
    p.add_argument("--no-progress", action="store_true", help="no progress line")
    _add_common(p)


def _stats_parser(sub) -> None:
    p = sub.add_parser("stats", help="summaries with bootstrap CIs over decomposed transitions",
                       description="Mean, std, median and bootstrap 95 %% CIs of every metric, overall, per module "
                                   "and per layer, one row per transition (CSV files in --out).")
    p.add_argument("stores", nargs="+", type=Path, help="finished transition stores")
    p.add_argument("--out", type=Path, required=True, help="folder for the CSV tables")
    _add_stats_common(p)


def _bands_parser(sub) -> None:
    p = sub.add_parser("bands", help="energy of P by principal band, from finished stores (no checkpoints, no SVD)",
                       description="Split the energy of the diagonal and off-diagonal parts of every stored P into "
                                   "blocks by principal band of W0 (top-k×top-k, mixed, tail×tail) for band edges "
                                   "k; per matrix, module and layer, with a figure per transition.")
    p.add_argument("stores", nargs="+", type=Path, help="finished transition stores")
    p.add_argument("--out", type=Path, required=True, help="folder for the tables and figures")
    p.add_argument("--edges", default="16,64,256", help="comma-separated band edges k (default 16,64,256)")
    p.add_argument("--scheduler", help="Dask scheduler: threads (default), processes, or ADDRESS of a cluster")
    _add_common(p)


def cmd_bands(args: argparse.Namespace) -> int:
    from .cluster import compute_scheduler
    from .workflows import run_bands

    try:
        edges = sorted({int(k) for k in args.edges.split(",") if k.strip()})
    except ValueError:
        raise ConfigError(f"--edges takes comma-separated positive integers, got {args.edges!r}") from None
    if not edges or edges[0] < 1:
        raise ConfigError("--edges takes comma-separated positive integers")
    files = run_bands(args.stores, args.out, edges=edges, scheduler=compute_scheduler(args.scheduler))
    print("wrote " + ", ".join(str(f) for f in files))
    return 0


def _compare_parser(sub) -> None:
    p = sub.add_parser("compare", help="off-diagonal cosine geometry of transitions sharing a base frame",
                       description="Median over matrices of cos(P_a^off, P_b^off) with a bootstrap CI and a matched "
                                   "isotropic-null test; update norms. Figures and CSV/JSON in --out.")
    p.add_argument("--sequential", nargs=2, action="append", default=[], metavar=("SFT_STORE", "CUM_STORE"),
                   help="base→SFT and base→RL stores: compares ΔW_SFT with ΔW_incr = W_RL − W_SFT (repeatable)")
    p.add_argument("--independent", nargs="+", action="append", default=[],
                   metavar="A_STORE B_STORE [ANCESTOR_STORE]",
                   help="base→A and base→B of two models neither of which descends from the other, compared as "
                        "their updates from their nearest common ancestor C: give the store of base→C as a third "
                        "store when C is not the base (repeatable)")
    p.add_argument("--cumulative", nargs=2, action="append", default=[], metavar=("A_STORE", "B_STORE"),
                   help="base→A and base→B compared as the cumulative updates, whatever they share (repeatable)")
    p.add_argument("--out", type=Path, required=True, help="folder for tables and figures")
    p.add_argument("--null-draws", type=int, default=10_000, help="Monte Carlo draws of the null (default 10000)")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level of the verdict (default 0.05)")
    _add_stats_common(p)


def _variants_parser(sub) -> None:
    p = sub.add_parser("variants", help="build ablated variant models of a decomposed transition",
                       description="Write W0 + chosen GRRR components of every decomposed matrix as Hugging Face "
                                   "folders OUT/<variant>/, with a dtype fidelity report OUT/<variant>.fidelity.csv.")
    p.add_argument("--store", type=Path, required=True, help="finished transition store")
    p.add_argument("--variant", action="append", default=[],
                   help="base, full, diag, off, null, offnull, randrm-SEED, or NAME=diag:W,off:W,null:W "
                        "(repeatable; default: base full diag off null offnull randrm-0 randrm-1 randrm-2)")
    p.add_argument("--out", type=Path, required=True, help="folder receiving one sub-folder per variant")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16", "float16"],
                   help="dtype of the written weights (default float32: keeps RL-sized updates)")
    p.add_argument("--rest-from", default="base", choices=["base", "post", "auto"],
                   help="where composed variants take the tensors that are not decomposed (embeddings, norms, "
                        "lm_head, biases): base (default), post, or auto (base if it can, else post, recorded); "
                        "base and full are always the two checkpoints bit for bit")
    p.add_argument("--device", default="auto", help="device for the rank-r products (auto, cpu, cuda[:N])")
    p.add_argument("--shard-gb", type=_positive_float, default=2.0, help="maximum shard size in GiB (default 2)")
    p.add_argument("--overwrite", action="store_true", help="rebuild variants that exist with other settings")
    _add_tracking(p)
    _add_common(p)


def cmd_variants(args: argparse.Namespace) -> int:
    from .runtime import resolve_device
    from .variant_spec import DEFAULT_VARIANTS
    from .workflows import run_variants

    res = run_variants(args.store, args.out, args.variant or list(DEFAULT_VARIANTS), dtype=args.dtype,
                       rest_from=args.rest_from, device=str(resolve_device(args.device)), overwrite=args.overwrite,
                       max_shard_bytes=int(args.shard_gb * 2**30), tracking=_tracking_from_args(args))
    print(f"{'variant':<14} {'dtype':<9} {'fidelity err':>12} {'worst':>10} {'energy kept':>12}  folder")
    for s, folder in zip(res.summaries, res.folders):
        print(f"{s['variant']:<14} {s['dtype']:<9} {s['fidelity']:>12.3e} {s['fidelity_max']:>10.3e} "
              f"{100 * s['energy_survived']:>11.2f}%  {folder}")
    return 0


def _evaluate_parser(sub) -> None:
    p = sub.add_parser("evaluate", help="evaluate variants of a transition on math benchmarks with vLLM",
                       description="Greedy vLLM evaluation of variants (streamed into one running engine by default) "
                                   "on benchmarks laid out as BENCH_DIR/<name>/test.jsonl; tables of accuracy, "
                                   "retention and diagonal-vs-random removal in --out. Rerun to resume.")
    p.add_argument("--store", type=Path, required=True, help="finished transition store")
    p.add_argument("--variant", action="append", default=[],
                   help="variants as for `variants` (default: base full diag off null offnull randrm-0..2)")
    p.add_argument("--benchmark", action="append", default=[],
                   help="benchmark names (default: math500 aime24 amc23 minerva_math olympiadbench)")
    p.add_argument("--bench-dir", default="bundled",
                   help="folder holding <name>/test.jsonl files; 'bundled' (default): the five math benchmarks "
                        "shipped with grrr_stream; 'hub' or 'hub:OWNER/REPO': download them")
    p.add_argument("--out", type=Path, required=True, help="results folder (generations, scores, tables)")
    p.add_argument("--limit", type=int, help="first N problems of each benchmark (quick subsets)")
    p.add_argument("--lenient-benchmarks", action="store_true",
                   help="skip (and count) malformed benchmark lines instead of refusing the file")
    p.add_argument("--materialize", choices=["engine", "folder"], default="engine",
                   help="engine: swap weights in one running engine (default); folder: write each variant")
    p.add_argument("--keep-variants", action="store_true", help="with --materialize folder: keep the folders")
    p.add_argument("--rest-from", default="base", choices=["base", "post", "auto"],
                   help="as for `variants` (default base)")
    p.add_argument("--resamples", type=int, default=10_000,
                   help="paired bootstrap resamples for the differences between variants (default 10000)")
    g = p.add_argument_group("sampling (default: greedy, one answer per problem, as the paper)")
    g.add_argument("--samples", type=int, dest="n", help="answers per problem, drawn in one request each")
    g.add_argument("--temperature", type=float, help="sampling temperature (needed > 0 with --samples > 1)")
    g.add_argument("--top-p", type=float, help="nucleus sampling mass (default 1)")
    g.add_argument("--sampling-seed", type=int, help="seed of the sampled answers (default 0)")
    g.add_argument("--pass-k", help="comma-separated k of unbiased pass@k to report (k ≤ samples)")
    g.add_argument("--maj-k", help="comma-separated k of maj@k (majority vote over equivalent answers) to report")
    g.add_argument("--metric", default="avg",
                   help="accuracy of the tables: avg (avg@n; greedy accuracy with one sample), pass@K or maj@K")
    p.add_argument("--template", default="chat",
                   help="'chat' (the model's chat template) or a format string with {problem} and {instruction}")
    p.add_argument("--instruction", help="instruction appended to each problem (default: reason step by step, "
                                         "put the final answer within \\boxed{})")
    p.add_argument("--max-new-tokens", type=int, help="default 3000")
    p.add_argument("--engine-dtype", help="float32 (default), bfloat16, float16, auto")
    p.add_argument("--seed", type=int)
    p.add_argument("--tensor-parallel-size", type=int)
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--enforce-eager", action="store_true", default=None)
    p.add_argument("--cpu-kv-cache-gib", type=float, help="KV cache size on the CPU backend (default 1)")
    _add_tracking(p)
    _add_common(p)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .config import build_engine_settings, build_sampling_settings
    from .evaluation.benchmarks import FIVE
    from .evaluation.pipeline import EvaluationRequest, run_evaluation
    from .variant_spec import DEFAULT_VARIANTS

    settings = build_engine_settings({
        "dtype": args.engine_dtype, "max_new_tokens": args.max_new_tokens, "seed": args.seed,
        "tensor_parallel_size": args.tensor_parallel_size, "gpu_memory_utilization": args.gpu_memory_utilization,
        "max_model_len": args.max_model_len, "enforce_eager": args.enforce_eager,
        "cpu_kv_cache_gib": args.cpu_kv_cache_gib})
    if args.limit is not None and args.limit < 1:
        raise ConfigError("--limit must be at least 1")

    def ks(text):
        try:
            return [int(k) for k in text.split(",") if k.strip()] if text else None
        except ValueError:
            raise ConfigError(f"expected comma-separated integers, got {text!r}") from None

    sampling = build_sampling_settings({"n": args.n, "temperature": args.temperature, "top_p": args.top_p,
                                        "seed": args.sampling_seed, "pass_k": ks(args.pass_k),
                                        "maj_k": ks(args.maj_k)})
    request = EvaluationRequest(args.store, args.out, args.variant or list(DEFAULT_VARIANTS),
                                args.benchmark or list(FIVE), args.bench_dir, settings=settings, sampling=sampling,
                                metric=args.metric, materialize=args.materialize, keep_variants=args.keep_variants,
                                limit=args.limit, lenient=args.lenient_benchmarks, template=args.template,
                                instruction=args.instruction, rest_from=args.rest_from, resamples=args.resamples)
    res = run_evaluation(request, tracking=_tracking_from_args(args))
    print_evaluation(res)
    return 0


def print_evaluation(res, out=None) -> None:
    """Accuracy per variant and benchmark, the differences with their paired intervals, the gain."""
    out = out or sys.stdout
    from .evaluation.tables import accuracy_columns

    benches = accuracy_columns(res.accuracy_rows)
    diffs = {r["variant"]: r for r in res.differences}
    out.write(f"\n{'variant':<12} " + " ".join(f"{b:>13}" for b in benches)
              + f" {'average':>9} {'− full [95 % CI]':>24} {'cut off':>8}\n")
    for r in res.accuracy_rows:
        cells = " ".join(f"{r[b]:>13.1f}" for b in benches)
        d = diffs.get(r["variant"], {})
        ci = (f"{d['minus_full']:+7.2f} [{d['minus_full_ci_lo']:+6.2f}, {d['minus_full_ci_hi']:+6.2f}]"
              if "minus_full" in d else "")
        avg = f"{r['average']:>9.2f}" if r["average"] is not None else f"{'':>9}"
        out.write(f"{r['variant']:<12} {cells} {avg} {ci:>24} {r['truncated']:>8}\n")
    info = res.info
    if "gain" in info:
        out.write(f"gain full − base: {info['gain']:+.2f} points [95 % CI {info['gain_ci_lo']:+.2f}, "
                  f"{info['gain_ci_hi']:+.2f}] ({'informative' if info['informative'] else 'NOT informative: < 1 point'}"
                  + ("; by less than its interval" if info.get("informative_within_ci") else "") + ")\n")
    if "full_minus_proj" in info:
        out.write(f"full − proj (what the tensors that are not decomposed carry): {info['full_minus_proj']:+.2f} "
                  f"points [{info['full_minus_proj_ci_lo']:+.2f}, {info['full_minus_proj_ci_hi']:+.2f}]"
                  + (f"; {info['note']}" if info.get("note") else "") + "\n")
    if info.get("rest_fallback"):
        out.write(f"rest_from fell back to post: {info['rest_fallback']}\n")
    if res.solved_lost:
        from collections import Counter

        counts = Counter((r["variant"], r["change"]) for r in res.solved_lost)
        out.write("problems full solves and a variant loses / the variant solves and full does not "
                  f"(solved_lost.csv, metric {res.metric}):\n")
        for v in dict.fromkeys(r["variant"] for r in res.solved_lost):
            out.write(f"  {v:<12} lost {counts[(v, 'lost')]:>5}   gained {counts[(v, 'gained')]:>5}\n")
    for r in res.table56:
        if r["retention_pct"] is not None:
            proj = f", vs proj {r['retention_proj_pct']:6.1f} %" if r.get("retention_proj_pct") is not None else ""
            out.write(f"  retention {r['variant']:<8} vs full {r['retention_pct']:6.1f} %{proj}\n")
    out.write(f"prompt format: the post model's ({res.prompt.get('from')}), digest {res.prompt.get('digest')}\n")
    out.write("wrote " + ", ".join(str(f) for f in res.files) + "\n")


def _add_stats_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scheduler", help="Dask scheduler: threads (default), processes, or ADDRESS of a cluster")
    _add_tracking(p)
    _add_common(p)


def _tracking_flags(args) -> dict:
    """The TrackingConfig fields that --tracking-uri, --experiment and --no-track set."""
    flags: dict[str, Any] = {}
    if args.tracking_uri:
        flags["uri"] = args.tracking_uri
    if args.experiment:
        flags["experiment"] = args.experiment
    if args.no_track:
        flags["enabled"] = False
    return flags


def _tracking_from_args(args, tracking=None):
    """``tracking`` (a config's TrackingConfig; default: the defaults) with the tracking flags applied on top."""
    from .config import TrackingConfig

    return (tracking or TrackingConfig()).model_copy(update=_tracking_flags(args))


def cmd_stats(args: argparse.Namespace) -> int:
    from .cluster import compute_scheduler
    from .workflows import run_stats

    if args.resamples < 100:
        raise ConfigError("--resamples must be at least 100")
    res = run_stats(args.stores, args.out, resamples=args.resamples, seed=args.seed,
                    scheduler=compute_scheduler(args.scheduler), tracking=_tracking_from_args(args))
    overall = [r for r in res.long_rows if r["scope"] == "all" and r["metric"] in ("f_diag", "f_off", "f_null")]
    for r in overall:
        print(f"{r['transition']:<40} {r['metric']:<7} mean {r['mean']:.4f} "
              f"[{r['mean_ci_lo']:.4f}, {r['mean_ci_hi']:.4f}]  median {r['median']:.4f}")
    print("wrote " + ", ".join(str(f) for f in res.files))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from .cluster import compute_scheduler
    from .workflows import run_comparisons

    pairs: list[tuple] = [("sequential", Path(a), Path(b)) for a, b in args.sequential]
    for stores in args.independent:
        if len(stores) not in (2, 3):
            raise ConfigError(f"--independent takes A_STORE B_STORE [ANCESTOR_STORE], got {len(stores)} path(s)")
        pairs.append(("independent", *map(Path, stores)))
    pairs += [("cumulative", Path(a), Path(b)) for a, b in args.cumulative]
    if not pairs:
        raise ConfigError("give at least one --sequential SFT_STORE CUM_STORE, --independent A_STORE B_STORE "
                          "[ANCESTOR_STORE] or --cumulative A_STORE B_STORE")
    if not 0 < args.alpha < 1 or args.null_draws < 100 or args.resamples < 100:
        raise ConfigError("need 0 < --alpha < 1, --null-draws >= 100 and --resamples >= 100")
    res = run_comparisons(pairs, args.out, resamples=args.resamples, null_draws=args.null_draws, seed=args.seed,
                          alpha=args.alpha, scheduler=compute_scheduler(args.scheduler),
                          tracking=_tracking_from_args(args))
    for s in res.summaries:
        print(f"{s['label']}: median cos_off {s['median_cos_off']:+.4f} [{s['ci_lo']:+.4f}, {s['ci_hi']:+.4f}], "
              f"null ±2σ [{s['null_lo']:+.4f}, {s['null_hi']:+.4f}], p = {s['p_value']:.3g} → {s['verdict']}")
    print("wrote " + ", ".join(str(f) for f in res.files))
    return 0


def config_from_args(args: argparse.Namespace):
    from .config import build_config, load_yaml

    values: dict[str, Any] = load_yaml(args.config) if args.config else {}
    flat = {
        "base": args.base, "post": args.post, "store": args.store, "device": args.device,
        "compute_dtype": args.compute_dtype, "store_dtype": args.store_dtype, "frame_cache": args.frame_cache,
        "core_rel_threshold": args.core_rel_threshold, "module_pattern": args.module_pattern,
        "null_storage": args.null_storage,
        "split_fused": args.split_fused,
        "method": args.method, "chain": args.chain, "overwrite": args.overwrite,
        "modules": [m.strip() for m in args.modules.split(",") if m.strip()] if args.modules else None,
        "progress": False if args.no_progress else None,
        "scheduler": args.scheduler,
    }
    values.update({k: v for k, v in flat.items() if v is not None})
    flags = _tracking_flags(args)
    if values.get("tracking") or flags:  # the YAML's tracking section, which build_config validates
        values["tracking"] = {**(values.get("tracking") or {}), **flags}
    missing = [k for k in ("base", "post", "store") if k not in values]
    if missing:
        raise ConfigError("missing " + ", ".join(f"--{k}" for k in missing) + " (or set them in --config)")
    return build_config(values, source=str(args.config) if args.config else "command line")


def print_summary(result, out=None) -> None:
    out = out or sys.stdout
    cols = ("f_diag", "f_off", "f_null", "r_delta", "sv_cos", "alpha")
    out.write(f"\n{result.store}: {len(result.rows)} matrices ({result.computed} computed now, "
              f"{result.frames_reused} base frames reused)\n")
    out.write(f"{'scope':<10} {'n':>4} " + " ".join(f"{c + ' mean±std':>22}" for c in cols) + "\n")
    for r in result.summary_rows:
        cells = " ".join(f"{r[c + '_mean']:>11.4g} ± {r[c + '_std']:<8.2g}" for c in cols)
        out.write(f"{r['scope']:<10} {r['n']:>4} {cells}\n")


def cmd_decompose(args: argparse.Namespace) -> int:
    from .decompose import run_transition

    cfg = config_from_args(args)
    result = run_transition(cfg)
    print_summary(result)
    if result.workers:
        print("matrices computed per Dask worker: " + ", ".join(f"{w} {n}" for w, n in sorted(result.workers.items())))
    if result.run_id:
        print(f"MLflow run {result.run_id}")
    return 0


DEMO_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"


def _sweep_parser(sub, *, demo: bool = False) -> None:
    if demo:
        p = sub.add_parser("demo", help="the built-in demo: `sweep configs/demo.yaml` (tiny trained chain, "
                                        "no network)",
                           description="Shorthand for `grrr-stream sweep configs/demo.yaml`: trains a tiny chain "
                                       "(base → SFT → RL, plus a sibling), decomposes, compares, builds variants, "
                                       "evaluates them with vLLM and logs to MLflow. Rerun to resume.")
        p.set_defaults(config=DEMO_CONFIG)
    else:
        p = sub.add_parser("sweep", help="plan and run a whole study from a sweep config (resumable)",
                           description="Expand a sweep config (chains of models with their lineage) into units of "
                                       "work — decompositions, statistics, comparisons, variant builds, evaluations "
                                       "— and run every unit not yet done. Rerun the same command to resume after "
                                       "an interruption; failed units are retried, finished ones never recomputed.")
        p.add_argument("config", type=Path, help="sweep YAML (see configs/demo.yaml, configs/paper.yaml)")
    p.add_argument("--dry-run", action="store_true", help="print the plan (and what is already done), run nothing")
    p.add_argument("--scheduler", help="where units run: threads (this process, default), local:N (a Dask "
                                       "LocalCluster of N worker processes) or the ADDRESS of a Dask scheduler")
    p.add_argument("--workdir", type=Path, help="override the config's workdir")
    p.add_argument("--device", help="override decomposition/variant device (auto, cpu, cuda, cuda:N)")
    p.add_argument("--math-subset", type=int, metavar="N",
                   help="also evaluate on the first N problems of each of the five math benchmarks")
    p.add_argument("--bench-dir", default="bundled",
                   help="with --math-subset: folder with <name>/test.jsonl, 'bundled' (default: the copies shipped "
                        "with grrr_stream) or 'hub[:OWNER/REPO]' (download)")
    p.add_argument("--no-progress", action="store_true", help="no progress lines")
    _add_tracking(p, experiment_default=None)
    _add_common(p)


def _status_parser(sub) -> None:
    p = sub.add_parser("status", help="what a sweep has done, what is pending and what failed",
                       description="Plan the sweep and print the state of every unit: done, pending, running, "
                                   "interrupted (will resume), failed (with its error) or blocked (needs a failed "
                                   "unit). Exit status 1 when a unit failed.")
    p.add_argument("config", type=Path)
    p.add_argument("--workdir", type=Path, help="override the config's workdir")
    p.add_argument("--math-subset", type=int, metavar="N", help="as given to `sweep`")
    p.add_argument("--bench-dir", default="bundled", help="as given to `sweep`")
    p.add_argument("--all", action="store_true", help="list done units too (default: totals and the rest)")
    _add_common(p)


def _load_sweep(args: argparse.Namespace):
    from .config import SweepEvaluation, load_sweep_config
    from .evaluation.benchmarks import FIVE

    if args.config == DEMO_CONFIG and not DEMO_CONFIG.is_file():
        raise ConfigError(f"the demo config {DEMO_CONFIG} is not there (an install without the repository?); "
                          "run `grrr-stream sweep PATH/TO/configs/demo.yaml` from a checkout")
    cfg = load_sweep_config(args.config, workdir=args.workdir)
    if getattr(args, "math_subset", None) is not None:
        if args.math_subset < 1:
            raise ConfigError("--math-subset must be at least 1")
        bench_dir = str(args.bench_dir)
        extra = SweepEvaluation.model_validate({
            **cfg.evaluation.model_dump(), "suite": "math", "benchmarks": list(FIVE), "bench_dir": bench_dir,
            "limit": args.math_subset})
        cfg = cfg.model_copy(update={"extra_evaluations": [*cfg.extra_evaluations, extra]})
    return cfg


def _print_units(rows: list[dict], show_done: bool, out=None) -> None:
    out = out or sys.stdout
    width = max((len(r["unit"]) for r in rows), default=10)
    for r in rows:
        if r["state"] == "done" and not show_done:
            continue
        out.write(f"  {r['state']:<11} {r['unit']:<{width}}  {r['detail']}\n")


def _totals(rows: list[dict]) -> str:
    from collections import Counter

    c = Counter(r["state"] for r in rows)
    return ", ".join(f"{n} {s}" for s, n in sorted(c.items(), key=lambda kv: kv[0]))


def cmd_sweep(args: argparse.Namespace) -> int:
    from .diskplan import check_space, describe, gib, shortfalls
    from .sweep import plan_sweep, run_sweep, sweep_status, unit_disk_needs
    from .tracking import resolve_uri

    cfg = _load_sweep(args)
    plan = plan_sweep(cfg)
    rows = {r["unit"]: r for r in sweep_status(plan)}
    to_run = [u for u in plan.units if rows[u.id]["state"] != "done"]
    disk = unit_disk_needs(plan)
    if args.dry_run:
        print(f"sweep {cfg.name}: {len(plan.units)} units in {plan.workdir} ({_totals(list(rows.values()))})")
        for u in plan.units:
            deps = f"  (after {', '.join(u.deps)})" if u.deps else ""
            print(f"  {rows[u.id]['state']:<11} {u.id}: {u.label}{deps}")
            size = "" if u.id not in disk else \
                "  [disk: known once its checkpoints are here]" if disk[u.id] is None else f"  [disk: {describe(disk[u.id])}]"
            print(f"  {'':<11}   → {u.out}{size}")
    needs = [n for u in to_run for n in (disk.get(u.id) or [])]
    unknown = [u.id for u in to_run if u.id in disk and disk[u.id] is None]
    if args.dry_run:
        if needs:
            print(f"disk for the {len(to_run)} unit(s) to run: {gib(sum(n.bytes for n in needs))}"
                  + (f" (+ {len(unknown)} unit(s) whose size is known only once their checkpoints are here)"
                     if unknown else ""))
            for line in shortfalls(needs):
                print(f"  NOT ENOUGH SPACE: {line}")
        return 0
    check_space(needs, f"the {len(to_run)} sweep unit(s) still to run",
                "Free space, point workdir at another disk, or run fewer transitions; finished units are kept.")
    tracking = _tracking_from_args(args, cfg.tracking)
    res = run_sweep(plan, scheduler=args.scheduler or cfg.scheduler, tracking=tracking,
                    progress=cfg.progress and not args.no_progress, device=args.device)
    print_sweep_summary(res)
    if tracking.enabled:
        from .tracking import prepare, runs_page

        uri = resolve_uri(tracking.uri)
        experiment = tracking.experiment
        exp_id = prepare(uri, experiment)
        print(f"\nLogged to MLflow ({uri}, experiment {experiment}). Open the UI with:\n"
              f"  mlflow ui --backend-store-uri {uri}\nand its runs at {runs_page('http://127.0.0.1:5000', exp_id)}"
              if not uri.startswith("http") else
              f"\nLogged to MLflow at {uri} (experiment {experiment}); its runs: {runs_page(uri, exp_id)}")
    return 0 if res.ok else 1


def print_sweep_summary(res, out=None) -> None:
    """The sweep's headline tables, from the report it has just written (``res.report``: typed rows,
    numbers as numbers and None for an empty cell)."""
    out = out or sys.stdout
    rep = res.plan.workdir / "report"
    out.write(f"\nsweep {res.plan.config.name}: {_totals([{'state': s} for s in res.states.values()])}; "
              f"{len(res.ran)} unit(s) run now; report in {rep}\n")
    _print_transitions(res.report.transitions, out)
    cmps = res.report.comparisons
    if cmps:
        out.write("\nmedian off-diagonal cosine (95 % CI) vs the isotropic null:\n")
        for r in cmps:
            out.write(f"  {r['label']:<44} {r['median_cos_off']:+.4f} [{r['ci_lo']:+.4f}, "
                      f"{r['ci_hi']:+.4f}]  p = {r['p_value']:.3g} → {r['verdict']}\n")
    _print_accuracy(res.report.accuracy, res.claims, out)
    _print_claims(res, out)
    bad = [(u, res.records.get(u) or {}) for u, s in res.states.items() if s in ("failed", "blocked")]
    if bad:
        out.write("\nnot done:\n")
        for u, rec in bad:
            out.write(f"  {res.states[u]:<8} {u}: {rec.get('error', 'needs a failed unit')}\n")
        out.write("Fix the cause and rerun the same command; `grrr-stream status CONFIG` lists every unit.\n")


def _print_transitions(trs: list[dict], out) -> None:
    if trs:
        out.write(f"\n{'transition':<28} {'kind':<12} {'method':<12} {'f_diag':>8} {'f_off':>8} {'f_null':>8} "
                  f"{'r_delta':>9}\n")
        for r in trs:
            out.write(f"{r['transition']:<28} {r['kind']:<12} {r['method']:<12} {r['f_diag_mean']:>8.4f} "
                      f"{r['f_off_mean']:>8.4f} {r['f_null_mean']:>8.4f} {r['r_delta_mean']:>9.2e}\n")
    beyond = [r for r in trs if r.get("frac_unchanged_mean") is not None]
    if not beyond:
        return
    kept = next((k[:-len("_kept_diag_mean")] for k in beyond[0] if k.endswith("_kept_diag_mean")), None)
    edge = next((e for e in ("64", "16", "256") if f"band{e}_off_principal_mean" in beyond[0]), None)
    out.write("\nbeyond the paper (means over matrices): bitwise-unchanged entries, entries within one ulp"
              + (f"; share of ‖ΔW‖² in the top-{edge} block of P; largest angle between top-{edge} subspaces"
                 if edge else "") + (f"; energy of each component kept through {kept}" if kept else "") + "\n")
    for r in beyond:
        line = (f"  {r['transition']:<26} unchanged {r['frac_unchanged_mean']:6.3f}  "
                f"≤1 ulp {r['frac_within_ulp_mean']:6.3f}")
        if edge:
            top = r[f"band{edge}_diag_principal_mean"] + r[f"band{edge}_off_principal_mean"]
            line += f"  top-{edge} {top:6.3f}"
            if r.get(f"angle{edge}_left_max_deg_mean") is not None:
                line += (f"  angle L {r[f'angle{edge}_left_max_deg_mean']:5.1f}° "
                         f"R {r[f'angle{edge}_right_max_deg_mean']:5.1f}°")
        if kept:
            line += "  kept " + " ".join(f"{c} {r[f'{kept}_kept_{c}_mean']:.3f}" for c in ("diag", "off", "null"))
        out.write(line + "\n")


def _print_accuracy(acc: list[dict], claims: dict, out) -> None:
    if not acc:
        return
    from .evaluation.tables import accuracy_columns

    benches = accuracy_columns(acc)
    diffs = {(d["transition"] + (f" [{suite}]" if suite else ""), d["variant"]): d
             for suite, s in claims.items() for d in s["differences"]}
    metric = acc[0].get("metric") or "avg"
    out.write(f"\naccuracy (%, metric {metric}); − full: paired bootstrap 95 % CI over problems\n"
              f"{'transition':<28} {'kind':<12} "
              f"{'variant':<12} " + " ".join(f"{b:>12}" for b in benches)
              + f" {'average':>8} {'− full [95 % CI]':>24} {'cut off':>8}\n")
    for r in acc:
        # a suite covers some transitions only: its cells are empty for the others
        d = diffs.get((r["transition"], r["variant"]), {})
        ci = (f"{d['minus_full']:+7.2f} [{d['minus_full_ci_lo']:+6.2f}, {d['minus_full_ci_hi']:+6.2f}]"
              if "minus_full" in d else "")
        truncated = "" if r["truncated"] is None else r["truncated"]
        out.write(f"{r['transition']:<28} {r['kind']:<12} {r['variant']:<12} "
                  + " ".join(f"{r[b]:>12.1f}" if r[b] is not None else f"{'':>12}" for b in benches)
                  + (f" {r['average']:>8.2f}" if r["average"] is not None else f" {'':>8}")
                  + f" {ci:>24} {truncated:>8}\n")


def _print_claims(res, out) -> None:
    for suite, s in res.claims.items():
        name = f" ({suite})" if suite else ""
        out.write(f"\ninformative transitions{name} (full − base ≥ {res.plan.config.claims.informative_points:g} "
                  f"point): {s['counts']['informative']} of {s['counts']['transitions']}, "
                  f"{s['counts']['informative_within_ci']} of them by less than their 95 % CI\n")
        for r in s["informative"]:
            if "gain" in r:
                proj = (f"; full − proj {r['full_minus_proj']:+.2f} [{r['full_minus_proj_ci_lo']:+.2f}, "
                        f"{r['full_minus_proj_ci_hi']:+.2f}]" if "full_minus_proj" in r else "")
                out.write(f"  {r['transition']:<26} {r['kind']:<12} gain {r['gain']:+6.2f} [{r['gain_ci_lo']:+6.2f}, "
                          f"{r['gain_ci_hi']:+6.2f}]{proj}\n")
        if s["claims"]:
            from .claims import sentence

            out.write(f"claims{name}:\n")
            for r in s["claims"]:
                if r["reference"] == "full":
                    out.write(f"  {sentence(r, s['counts']['informative'])}\n")


def cmd_status(args: argparse.Namespace) -> int:
    from .sweep import Records, plan_sweep, sweep_status

    plan = plan_sweep(_load_sweep(args))
    rows = sweep_status(plan)
    print(f"sweep {plan.config.name} in {plan.workdir}: {len(rows)} units ({_totals(rows)})")
    _print_units(rows, args.all)
    failed = [r for r in rows if r["state"] == "failed"]
    for r in failed:
        rec = Records(plan.workdir).read(plan.unit(r["unit"])) or {}
        print(f"\n{r['unit']} failed on {rec.get('host')} (pid {rec.get('pid')}):\n  {rec.get('error')}")
        print(f"  full traceback in {Records(plan.workdir).path(plan.unit(r['unit']))}")
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grrr-stream", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _decompose_parser(sub)
    _stats_parser(sub)
    _compare_parser(sub)
    _bands_parser(sub)
    _variants_parser(sub)
    _evaluate_parser(sub)
    _sweep_parser(sub)
    _sweep_parser(sub, demo=True)
    _status_parser(sub)
    return parser


COMMANDS = {"decompose": cmd_decompose, "stats": cmd_stats, "compare": cmd_compare, "bands": cmd_bands,
            "variants": cmd_variants,
            "evaluate": cmd_evaluate, "demo": cmd_sweep,
            "sweep": cmd_sweep, "status": cmd_status}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except GrrrError as e:
        if args.debug:
            raise
        from .config import clip

        print(f"grrr-stream: error: {clip(str(e), 8000)}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0
    except OSError as e:  # an environment fault (disk full, read-only, permissions): one sentence
        if args.debug:
            raise
        from .files import describe_os_error

        print(f"grrr-stream: error: {describe_os_error(e)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("grrr-stream: interrupted; rerun the same command to resume where it stopped", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())

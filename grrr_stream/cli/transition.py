"""The commands over transitions: decompose one, then statistics, comparisons, bands, variants and
evaluations of decomposed ones. Each validates its flags, calls the library and prints the result."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ..config import build_config, load_yaml
from ..errors import ConfigError
from ..evaluation.benchmarks import FIVE
from ..evaluation.settings import build_engine_settings, build_evaluation_options, build_sampling_settings
from ..runtime.cluster import compute_scheduler
from ..variants.spec import DEFAULT_VARIANTS
from .options import check_draws, tracking_flags, tracking_from_args
from .printing import print_evaluation, print_summary

if TYPE_CHECKING:
    from ..evaluation.settings import EngineSettings, EvaluationOptions, SamplingSettings


def cmd_decompose(args: argparse.Namespace) -> int:
    from ..decompose.run import run_transition

    cfg = config_from_args(args)
    result = run_transition(cfg)
    print_summary(result)
    if result.workers:
        print("matrices computed per Dask worker: " + ", ".join(f"{w} {n}" for w, n in sorted(result.workers.items())))
    if result.run_id:
        print(f"MLflow run {result.run_id}")
    return 0


def config_from_args(args: argparse.Namespace):
    values: dict[str, Any] = load_yaml(args.config) if args.config else {}
    flat = {
        "base": args.base,
        "post": args.post,
        "store": args.store,
        "device": args.device,
        "compute_dtype": args.compute_dtype,
        "store_dtype": args.store_dtype,
        "frame_cache": args.frame_cache,
        "core_rel_threshold": args.core_rel_threshold,
        "module_pattern": args.module_pattern,
        "null_storage": args.null_storage,
        "split_fused": args.split_fused,
        "method": args.method,
        "chain": args.chain,
        "overwrite": args.overwrite,
        "modules": [m.strip() for m in args.modules.split(",") if m.strip()] if args.modules else None,
        "progress": False if args.no_progress else None,
        "scheduler": args.scheduler,
        "figures": args.figures,
    }
    values.update({k: v for k, v in flat.items() if v is not None})
    if getattr(args, "profile", None):  # what the profile sets is config.PROFILES's, below explicit settings
        values["profile"] = args.profile
    flags = tracking_flags(args)
    if values.get("tracking") or flags:  # the YAML's tracking section, which build_config validates
        values["tracking"] = {**(values.get("tracking") or {}), **flags}
    missing = [k for k in ("base", "post", "store") if k not in values]
    if missing:
        raise ConfigError("missing " + ", ".join(f"--{k}" for k in missing) + " (or set them in --config)")
    return build_config(values, source=str(args.config) if args.config else "command line")


def cmd_stats(args: argparse.Namespace) -> int:
    from ..stats.run import run_stats

    res = run_stats(
        args.stores,
        args.out,
        resamples=args.resamples,
        seed=args.seed,
        scheduler=compute_scheduler(args.scheduler),
        tracking=tracking_from_args(args),
        progress=not args.no_progress,
    )
    overall = [r for r in res.long_rows if r["scope"] == "all" and r["metric"] in ("f_diag", "f_off", "f_null")]
    for r in overall:
        print(
            f"{r['transition']:<40} {r['metric']:<7} mean {r['mean']:.4f} "
            f"[{r['mean_ci_lo']:.4f}, {r['mean_ci_hi']:.4f}]  median {r['median']:.4f}"
        )
    print("wrote " + ", ".join(str(f) for f in res.files))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from ..stats.run import run_comparisons

    pairs: list[tuple] = [("stepwise", Path(a), Path(b)) for a, b in args.stepwise]
    for stores in args.independent:
        if len(stores) not in (2, 3):
            raise ConfigError(f"--independent takes A_STORE B_STORE [ANCESTOR_STORE], got {len(stores)} path(s)")
        pairs.append(("independent", *map(Path, stores)))
    pairs += [("cumulative", Path(a), Path(b)) for a, b in args.cumulative]
    if not pairs:
        raise ConfigError(
            "give at least one --stepwise SFT_STORE CUM_STORE, --independent A_STORE B_STORE "
            "[ANCESTOR_STORE] or --cumulative A_STORE B_STORE"
        )
    res = run_comparisons(
        pairs,
        args.out,
        resamples=args.resamples,
        null_draws=args.null_draws,
        seed=args.seed,
        alpha=args.alpha,
        scheduler=compute_scheduler(args.scheduler),
        tracking=tracking_from_args(args),
        progress=not args.no_progress,
    )
    for s in res.summaries:
        print(
            f"{s['label']}: median cos_off {s['median_cos_off']:+.4f} [{s['ci_lo']:+.4f}, {s['ci_hi']:+.4f}], "
            f"null ±2σ [{s['null_lo']:+.4f}, {s['null_hi']:+.4f}], p = {s['p_value']:.3g} → {s['verdict']}"
        )
    print("wrote " + ", ".join(str(f) for f in res.files))
    return 0


def cmd_bands(args: argparse.Namespace) -> int:
    from ..stats.run import run_bands

    try:
        edges = sorted({int(k) for k in args.edges.split(",") if k.strip()})
    except ValueError:
        raise ConfigError(f"--edges takes comma-separated positive integers, got {args.edges!r}") from None
    if not edges or edges[0] < 1:
        raise ConfigError("--edges takes comma-separated positive integers")
    files = run_bands(
        args.stores, args.out, edges=edges, scheduler=compute_scheduler(args.scheduler), progress=not args.no_progress
    )
    print("wrote " + ", ".join(str(f) for f in files))
    return 0


def cmd_variants(args: argparse.Namespace) -> int:
    from ..runtime.device import resolve_device
    from ..variants.run import run_variants

    res = run_variants(
        args.store,
        args.out,
        args.variant or list(DEFAULT_VARIANTS),
        dtype=args.dtype,
        rest_from=args.rest_from,
        device=str(resolve_device(args.device)),
        overwrite=args.overwrite,
        channels=args.channels,
        max_shard_bytes=int(args.shard_gb * 2**30),
        tracking=tracking_from_args(args),
        progress=not args.no_progress,
    )
    w = max([14] + [len(s["variant"]) for s in res.summaries])  # channel variants' names are longer
    print(f"{'variant':<{w}} {'dtype':<9} {'fidelity err':>12} {'worst':>10} {'energy kept':>12}  folder")
    for s, folder in zip(res.summaries, res.folders):
        print(
            f"{s['variant']:<{w}} {s['dtype']:<9} {s['fidelity']:>12.3e} {s['fidelity_max']:>10.3e} "
            f"{100 * s['energy_survived']:>11.2f}%  {folder}"
        )
    for s in res.summaries:  # channel variants: how much of their unrestricted update the channel set holds
        if "channel_share" in s:
            print(
                f"{s['variant']}: its {s['kept_channels']} '{s['channels']}' channels hold "
                f"{100 * s['channel_share']:.2f}% of the energy of its update on every channel"
            )
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ..evaluation.pipeline import EvaluationRequest, run_evaluation

    settings = _engine_settings(args)
    if args.limit is not None and args.limit < 1:
        raise ConfigError("--limit must be at least 1")
    check_draws(args.resamples, "--resamples")
    options = _evaluation_options(args, settings, _sampling_settings(args))
    request = EvaluationRequest(
        args.store,
        args.out,
        args.variant or list(DEFAULT_VARIANTS),
        args.benchmark or list(FIVE),
        args.bench_dir,
        options,
        keep_variants=args.keep_variants,
        rest_from=args.rest_from,
        resamples=args.resamples,
        channels=args.channels,
        informative_points=args.informative_points,
        last_step=args.last_step,
        progress=not args.no_progress,
    )
    res = run_evaluation(request, tracking=tracking_from_args(args))
    print_evaluation(res)
    return 0


def _engine_settings(args: argparse.Namespace) -> EngineSettings:
    """The vLLM engine's settings from the evaluate command's engine flags."""
    return build_engine_settings(
        {
            "dtype": args.engine_dtype,
            "auto_min_energy": args.auto_min_energy,
            "max_new_tokens": args.max_new_tokens,
            "seed": args.seed,
            "tensor_parallel_size": args.tensor_parallel_size,
            "gpu_memory_utilization": args.gpu_memory_utilization,
            "max_model_len": args.max_model_len,
            "enforce_eager": args.enforce_eager,
            "cpu_kv_cache_gib": args.cpu_kv_cache_gib,
        }
    )


def _comma_integers(text: Optional[str]) -> Optional[list[int]]:
    try:
        return [int(k) for k in text.split(",") if k.strip()] if text else None
    except ValueError:
        raise ConfigError(f"expected comma-separated integers, got {text!r}") from None


def _sampling_settings(args: argparse.Namespace) -> SamplingSettings:
    """How answers are sampled, from the evaluate command's sampling flags."""
    return build_sampling_settings(
        {
            "n": args.n,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "seed": args.sampling_seed,
            "pass_k": _comma_integers(args.pass_k),
            "maj_k": _comma_integers(args.maj_k),
        }
    )


def _evaluation_options(
    args: argparse.Namespace, settings: EngineSettings, sampling: SamplingSettings
) -> EvaluationOptions:
    """The flags of the evaluation's options (evaluation.settings.EvaluationOptions), by their names there."""
    return build_evaluation_options(
        {
            "engine": settings,
            "sampling": sampling,
            "metric": args.metric,
            "materialize": args.materialize,
            "limit": args.limit,
            "lenient": args.lenient_benchmarks,
            "template": args.template,
            "instruction": args.instruction,
            "design": args.design,
            "adaptive": {
                k: v
                for k, v in {
                    "precision_points": args.precision_points,
                    "chunk": args.chunk,
                    "seed": args.order_seed,
                }.items()
                if v is not None
            },
        }
    )

"""``grrr-stream channels``: outlier residual channels of a model (and its post-trained child)."""

from __future__ import annotations

from pathlib import Path

from .options import add_common


def channels_parser(sub) -> None:
    from ..channels.activations import DEFAULT_MAX_MEMORY
    from ..channels.calibration import DEFAULT_SEQ_LEN, DEFAULT_SEQUENCES

    p = sub.add_parser(
        "channels",
        help="label-free outlier residual channels, their weight proxy and ablation",
        description="Per-channel activation RMS at every decoder layer's input on the packaged "
        "calibration text (accelerate-offloaded when the model exceeds --max-memory), "
        "the robust-z outlier rule, the weight-only proxy and its Jaccard overlap, "
        "and with --ablate the perplexity with the outliers zeroed against random sets.",
    )
    p.add_argument("model", type=Path, help="base model folder (config.json + safetensors)")
    p.add_argument("--post", type=Path, help="post-trained model folder, analysed the same way for comparison")
    p.add_argument(
        "--out", type=Path, default=Path("channels"), help="folder for channels.json and the CSVs (default ./channels)"
    )
    p.add_argument(
        "--sequences", type=int, default=DEFAULT_SEQUENCES, help=f"calibration sequences (default {DEFAULT_SEQUENCES})"
    )
    p.add_argument("--seq-len", type=int, default=DEFAULT_SEQ_LEN, help=f"tokens each (default {DEFAULT_SEQ_LEN})")
    p.add_argument("--threshold", type=float, default=2.5, help="robust z threshold (default 2.5)")
    p.add_argument(
        "--aggregate",
        choices=["median", "max", "mean"],
        default="median",
        help="how the per-layer z-scores are aggregated (default median)",
    )
    p.add_argument("--ablate", action="store_true", help="also measure perplexity with channels zeroed")
    p.add_argument("--batch-size", type=int, default=1, help="sequences per forward (default 1)")
    p.add_argument(
        "--max-memory",
        default=DEFAULT_MAX_MEMORY,
        help=f"resident weights; larger models are offloaded layer by layer (default {DEFAULT_MAX_MEMORY})",
    )
    p.add_argument("--dry-run", action="store_true", help="check the model folder(s) and print the forecast, then stop")
    p.add_argument("--no-progress", action="store_true", help="no forecast and no progress lines")
    add_common(p)


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.4g}"


FORECAST_WARN_S = 180.0  # a forecast above this says how to make the run shorter


def forecast_lines(
    models: list[Path], *, sequences: int, seq_len: int, batch_size: int, ablate: bool, rates=None
) -> list[str]:
    """The forecast printed before the passes: passes × tokens ≈ time on this machine, from the sweep's own
    model of a channels unit (forward flops = 2 × parameters × tokens at this CPU's measured forward rate,
    :func:`grrr_stream.sweep.kinds.channels.seconds`); beyond FORECAST_WARN_S, which flags shorten it."""
    from ..channels.ablation import SEEDS
    from ..forecast import work
    from ..forecast.calibrate import calibrate
    from ..forecast.shapes import from_checkpoint
    from ..progress import fmt_seconds
    from ..sweep.kinds.channels import seconds as channels_seconds

    seeds = SEEDS if ablate else None
    passes = work.calibration_passes(seeds)
    facts = [from_checkpoint(m) for m in models]
    params = [f.params for f in facts if f is not None and f.params]
    shapes = [s for f in facts if f is not None for s in (f.shapes or [])]
    tokens = sequences * seq_len
    head = f"{passes} pass{'es' if passes > 1 else ''} × {tokens:,} tokens" + (
        f" × {len(models)} models" if len(models) > 1 else ""
    )
    if len(params) != len(models) or not shapes:
        return [f"forecast: {head} (no estimate: the parameters or matrix shapes are not in the checkpoint headers)"]
    rates = rates or calibrate(max(shapes, key=work.decompose_flops))
    seconds = sum(
        channels_seconds(
            n, rates, sequences=sequences, seq_len=seq_len, batch_size=batch_size, ablation_seeds=seeds, first=False
        )
        for n in params
    )
    flops = sum(work.calibration_flops(n, sequences, seq_len, seeds) for n in params)
    lines = [
        f"forecast: {head} ≈ {fmt_seconds(seconds)} here ({flops / 1e12:.3g} TFLOP at "
        f"{rates.forward_flops_s / 1e9:.1f} GFLOP/s, this CPU's forward rate, {rates.device})"
    ]
    if seconds > FORECAST_WARN_S:
        fit = max(1, int(sequences * FORECAST_WARN_S / seconds))
        lines.append(
            f"forecast: that is more than {fmt_seconds(FORECAST_WARN_S)} on this machine; to shorten it: "
            f"--sequences {fit} (≈ {fmt_seconds(FORECAST_WARN_S)}; fewer tokens make the RMS and "
            f"perplexities noisier), --seq-len {max(2, seq_len // 2)} (half the tokens)"
            + (f", or without --ablate (1 pass instead of {passes})" if ablate else "")
        )
    return lines


def cmd_channels(args) -> int:
    from ..channels.analysis import CHANNELS_FILE, run_channels
    from ..channels.rule import OutlierRule
    from ..channels.validate import preflight
    from ..errors import ConfigError, GrrrError
    from ..progress import Progress

    if args.batch_size < 1:
        raise ConfigError("--batch-size must be at least 1")
    from ..channels.imports import lean_transformers

    lean_transformers()  # this process runs only the pass: ~210 MiB of unused imports left out (its docstring)
    try:
        from transformers.utils import logging as tf_logging

        tf_logging.disable_progress_bar()
        tf_logging.set_verbosity_error()  # "sequence longer than the model maximum": the text is cut into windows
    except ImportError:
        pass
    models = [m for m in (args.model, args.post) if m is not None]
    problems = []
    for m in models:  # every problem of both folders before any work
        try:
            preflight(m, sequences=args.sequences, seq_len=args.seq_len)
        except GrrrError as e:
            problems.append(e)
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise ConfigError(" ".join(map(str, problems)))
    say = Progress(0, enabled=not args.no_progress)
    for line in forecast_lines(
        models, sequences=args.sequences, seq_len=args.seq_len, batch_size=args.batch_size, ablate=args.ablate
    ):
        say.message(line)
    if args.dry_run:
        print(f"dry run: {', '.join(map(str, models))} can be analysed; nothing computed")
        return 0
    result = run_channels(
        args.model,
        args.out,
        post_dir=args.post,
        rule=OutlierRule(threshold=args.threshold, aggregate=args.aggregate),
        sequences=args.sequences,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        max_memory=args.max_memory,
        do_ablate=args.ablate,
        progress=not args.no_progress,
    )
    for role in ("base", "post"):
        r = result.get(role)
        if r is None:
            continue
        print(
            f"{role}: {len(r['channels'])}/{r['hidden_size']} channels = {100 * r['fraction']:.2f} % "
            f"(paper: ~5 %); proxy Jaccard {_fmt(r['jaccard'])}; perplexity {_fmt(r['perplexity'])}"
            + (f" ({r['proxy_note']})" if r.get("proxy_note") else "")
        )
        a = r.get("ablation")
        if a:
            rnd = ", ".join(_fmt(x["perplexity"]) for x in a["random"])
            print(
                f"  ablation: outliers zeroed {_fmt(a['perplexity_outliers_zeroed'])}; "
                f"{a['n_channels_zeroed']} random channels zeroed (seeds 0,1,2) {rnd}"
            )
    if "base_post_jaccard" in result:
        print(f"base vs post outlier sets: Jaccard {_fmt(result['base_post_jaccard'])}")
    print(f"wrote {Path(args.out) / CHANNELS_FILE}")
    return 0

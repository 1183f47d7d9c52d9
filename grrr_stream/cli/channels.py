"""``grrr-stream channels``: outlier residual channels of a model (and its post-trained child)."""

from __future__ import annotations

from pathlib import Path

from ..channels.defaults import DEFAULT_MAX_MEMORY, DEFAULT_SEQ_LEN, DEFAULT_SEQUENCES
from ..channels.imports import lean_transformers
from ..channels.preflight import channels_preflight
from ..channels.rule import OutlierRule
from ..progress import Progress, fmt_seconds
from .domains import POSITIVE, Domain
from .options import add_common


def channels_parser(sub) -> None:
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
        "--sequences",
        type=Domain(int, 1, 2**20),
        default=DEFAULT_SEQUENCES,
        help=f"calibration sequences (default {DEFAULT_SEQUENCES})",
    )
    p.add_argument(
        "--seq-len",
        type=Domain(int, 2, 2**20),
        default=DEFAULT_SEQ_LEN,
        help=f"tokens each (default {DEFAULT_SEQ_LEN})",
    )
    p.add_argument("--threshold", type=POSITIVE, default=2.5, help="robust z threshold (default 2.5)")
    p.add_argument(
        "--aggregate",
        choices=["median", "max", "mean"],
        default="median",
        help="how the per-layer z-scores are aggregated (default median)",
    )
    p.add_argument("--ablate", action="store_true", help="also measure perplexity with channels zeroed")
    p.add_argument("--batch-size", type=Domain(int, 1, 2**16), default=1, help="sequences per forward (default 1)")
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


def forecast_lines(fc, *, seq_len: int, ablate: bool) -> list[str]:
    """The forecast printed before the passes (a ChannelsForecast): passes × tokens ≈ time on this machine;
    beyond FORECAST_WARN_S, which flags shorten it."""
    from ..sweep.channels_forecast import FORECAST_WARN_S

    head = f"{fc.passes} pass{'es' if fc.passes > 1 else ''} × {fc.tokens:,} tokens" + (
        f" × {fc.models} models" if fc.models > 1 else ""
    )
    if fc.seconds is None:
        return [f"forecast: {head} (no estimate: the parameters or matrix shapes are not in the checkpoint headers)"]
    lines = [
        f"forecast: {head} ≈ {fmt_seconds(fc.seconds)} here ({fc.flops / 1e12:.3g} TFLOP at "
        f"{fc.forward_flops_s / 1e9:.1f} GFLOP/s, this CPU's forward rate, {fc.device})"
    ]
    if fc.long:
        lines.append(
            f"forecast: that is more than {fmt_seconds(FORECAST_WARN_S)} on this machine; to shorten it: "
            f"--sequences {fc.fit_sequences} (≈ {fmt_seconds(FORECAST_WARN_S)}; fewer tokens make the RMS "
            f"and perplexities noisier), --seq-len {max(2, seq_len // 2)} (half the tokens)"
            + (f", or without --ablate (1 pass instead of {fc.passes})" if ablate else "")
        )
    return lines


def cmd_channels(args) -> int:
    from ..channels.analysis import CHANNELS_FILE, run_channels
    from ..sweep.channels_forecast import forecast_channels

    lean_transformers()  # this process runs only the pass: ~210 MiB of unused imports left out (its docstring)
    try:
        from transformers.utils import logging as tf_logging

        tf_logging.disable_progress_bar()
        tf_logging.set_verbosity_error()  # "sequence longer than the model maximum": the text is cut into windows
    except ImportError:
        pass
    models = channels_preflight(
        args.model, args.post, sequences=args.sequences, seq_len=args.seq_len, batch_size=args.batch_size
    )
    say = Progress(0, enabled=not args.no_progress)
    fc = forecast_channels(
        models, sequences=args.sequences, seq_len=args.seq_len, batch_size=args.batch_size, ablate=args.ablate
    )
    for line in forecast_lines(fc, seq_len=args.seq_len, ablate=args.ablate):
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

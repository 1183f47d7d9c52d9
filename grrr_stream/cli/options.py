"""Flags several commands share, and the settings they set."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Optional

from ..config import MAX_DRAWS, TrackingConfig
from ..errors import ConfigError
from .domains import DRAWS, SEED


def add_tracking(
    p: argparse.ArgumentParser, *, experiment: bool = True, experiment_default: Optional[str] = "grrr_stream"
) -> None:
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default $MLFLOW_TRACKING_URI or sqlite:///mlflow.db)")
    if experiment:
        p.add_argument(
            "--experiment",
            default=experiment_default,
            help=f"MLflow experiment (default {experiment_default})"
            if experiment_default
            else "MLflow experiment (default: the config's tracking.experiment)",
        )
    p.add_argument("--no-track", action="store_true", help="do not log to MLflow")
    p.add_argument(
        "--tracking-required",
        action="store_true",
        help="refuse to start when the tracking target cannot be reached (default: work without it "
        "and record what to log for `grrr-stream track`)",
    )


def check_draws(n: int, flag: str) -> int:
    """A count of resamples or random draws given on the command line, within the bounds every setting has."""
    if not 100 <= n <= MAX_DRAWS:
        raise ConfigError(f"{flag} {n}: give between 100 and {MAX_DRAWS}")
    return n


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")


def add_progress(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-progress", action="store_true", help="no progress lines (done / total with an ETA)")


def add_stats_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--resamples", type=DRAWS, default=10_000, help="bootstrap resamples (default 10000)")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--scheduler", help="Dask scheduler: threads (default), processes, or ADDRESS of a cluster")
    add_progress(p)
    add_tracking(p)
    add_common(p)


def add_channels(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--channels",
        type=Path,
        help="channels.json (written by `grrr-stream channels`) whose base.channels are the outlier "
        "residual channels; needed by the channel variants (channels-outlier, channels-rest, ...)",
    )


def tracking_flags(args) -> dict:
    """The TrackingConfig fields that --tracking-uri, --experiment and --no-track set."""
    flags: dict[str, Any] = {}
    if args.tracking_uri:
        flags["uri"] = args.tracking_uri
    if args.experiment:
        flags["experiment"] = args.experiment
    if args.no_track:
        flags["enabled"] = False
    if getattr(args, "tracking_required", False):
        flags["required"] = True
    return flags


def tracking_from_args(args, tracking: Optional[TrackingConfig] = None) -> TrackingConfig:
    """``tracking`` (a config's TrackingConfig; default: the defaults) with the tracking flags applied on top."""
    return (tracking or TrackingConfig()).model_copy(update=tracking_flags(args))

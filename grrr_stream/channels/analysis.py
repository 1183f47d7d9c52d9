"""One model's outlier channels end to end, and the channels.json / CSV files of a run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from ..files import atomic_write_text, ensure_folder
from ..progress import Progress, fmt_seconds
from . import validate
from .ablation import SEEDS, ablate
from .activations import Loaded, PassResult, calibration_pass, load_model, write_rms_csv
from .defaults import DEFAULT_MAX_MEMORY, DEFAULT_SEQ_LEN, DEFAULT_SEQUENCES
from .model_config import text_config
from .proxy import proxy_inputs
from .rule import OutlierRule, channel_scores, jaccard, proxy_channels, select

CHANNELS_FILE = "channels.json"  # written last: the run's (and a sweep channels unit's) completion marker


def analyse_model(
    model_dir: Path,
    *,
    rule: OutlierRule = OutlierRule(),
    sequences: int = DEFAULT_SEQUENCES,
    seq_len: int = DEFAULT_SEQ_LEN,
    batch_size: int = 1,
    max_memory=DEFAULT_MAX_MEMORY,
    do_ablate: bool = False,
    ablation_seeds=SEEDS,
    progress: bool = False,
    label: str = "channels",
) -> tuple[dict, np.ndarray]:
    """(the channels.json record of ``model_dir``, its (layers, hidden) RMS array); ``ablation_seeds``: one
    count-matched random channel set per seed when ``do_ablate``. Refused before any forward pass when the
    folder is not a model the pass can run (:mod:`.validate`, every problem at once). ``progress``: lines
    with an ETA on the console (:class:`~grrr_stream.progress.Progress`) while the model loads, its weights
    are checked and each pass runs (one item per decoder layer of each batch)."""
    model_dir = Path(model_dir)
    t0 = time.perf_counter()
    say = Progress(0, enabled=progress)
    ckpt, _, cal = validate.preflight(model_dir, sequences=sequences, seq_len=seq_len)
    say.message(
        f"[{label}] loading {model_dir} (--max-memory {max_memory}: larger models are offloaded layer by layer)"
    )
    with load_model(model_dir, max_memory=max_memory) as loaded:
        tc = text_config(loaded.config)
        say.message(f"[{label}] loaded in {fmt_seconds(time.perf_counter() - t0)}: {_residence(loaded)}")
        _check_weights(model_dir, ckpt, progress=progress, label=label)
        seeds = tuple(ablation_seeds)
        passes = 1 + ((1 + len(seeds)) if do_ablate else 0)
        ticker = _Ticker.counting(passes, -(-sequences // batch_size), len(loaded.layers), progress, label)
        res = calibration_pass(loaded, cal.ids, batch_size=batch_size, on_layer=ticker.of("calibration"))
        scores = channel_scores(res.rms, rule)
        channels = select(scores, rule)
        record = {
            "model": str(model_dir),
            "hidden_size": int(tc.hidden_size),
            "n_layers": int(res.rms.shape[0]),
            "rule": rule.describe(),
            "channels": channels,
            "fraction": len(channels) / tc.hidden_size,
            "calibration": {"sequences": sequences, "seq_len": seq_len, "tokenizer": cal.tokenizer},
            "offloaded": loaded.offloaded,
            "perplexity": res.perplexity,
            "score_max": float(scores.max()),
        }
        if do_ablate:
            record["ablation"] = _ablation(
                loaded, cal.ids, channels, batch_size=batch_size, seeds=seeds, baseline=res, ticker=ticker
            )
    record.update(_proxy_fields(model_dir, channels, rule))
    record["seconds"] = time.perf_counter() - t0
    return record, res.rms


PROGRESS_EVERY = 10.0  # seconds between progress lines off a terminal (tests lower it)


def _residence(loaded: Loaded) -> str:
    """Where the loaded model's decoder layers are, for the line that says it is loaded."""
    n_layers = len(loaded.layers)
    if not loaded.offloaded:
        return f"{n_layers} decoder layers, in memory"
    on_disk = sum(1 for layer in loaded.layers if any(p.device.type == "meta" for p in layer.parameters()))
    return (
        f"{n_layers} decoder layers, offloaded ({n_layers - on_disk} of {n_layers} layers resident; "
        "the others read from the checkpoint for each batch)"
    )


def _ablation(
    loaded: Loaded,
    ids: torch.Tensor,
    channels: list,
    *,
    batch_size: int,
    seeds: tuple,
    baseline: PassResult,
    ticker: _Ticker,
) -> dict:
    """:func:`.ablation.ablate` of ``channels`` against the calibration pass ``baseline``, its passes ticking on
    ``ticker``."""
    if not channels:  # the outliers' pass is skipped: nothing to zero
        ticker.skip_pass()
    hidden_size = text_config(loaded.config).hidden_size
    return ablate(
        loaded,
        ids,
        channels,
        hidden_size,
        batch_size=batch_size,
        seeds=seeds,
        baseline=baseline.perplexity,
        on_layer=ticker.of,
    )


def _check_weights(model_dir: Path, ckpt, *, progress: bool, label: str) -> None:
    """Refuse a checkpoint with a non-finite weight (every such tensor named), a progress line per tensor read."""
    scan = Progress(validate.tensor_count(ckpt), enabled=progress, label=f"[{label}: weights] ", every=PROGRESS_EVERY)
    validate.raise_nonfinite(model_dir, validate.nonfinite_tensors(ckpt, on_tensor=lambda n: scan.advance(n)))


def _proxy_fields(model_dir: Path, channels: list, rule: OutlierRule) -> dict:
    """The weight-only proxy's channels and their Jaccard overlap with ``channels``, or a note saying why the
    proxy has no inputs in ``model_dir``."""
    inputs = proxy_inputs(model_dir)
    if isinstance(inputs, str):
        return {"proxy_channels": None, "jaccard": None, "proxy_note": inputs}
    prox = proxy_channels(*inputs, rule)
    return {"proxy_channels": prox, "jaccard": jaccard(prox, channels)}


class _Ticker:
    """Names the progress items: pass k/P (what), batch b/B, layer l/L."""

    def __init__(self, bar: Progress, passes: int, batches: int, n_layers: int):
        self.bar, self.passes, self.batches, self.n_layers = bar, passes, batches, n_layers
        self.index = 0

    @classmethod
    def counting(cls, passes: int, batches: int, n_layers: int, enabled: bool, label: str) -> _Ticker:
        """A ticker over a new progress bar of one item per decoder layer of each batch of each pass."""
        bar = Progress(passes * batches * n_layers, enabled=enabled, label=f"[{label}] ", every=PROGRESS_EVERY)
        return cls(bar, passes, batches, n_layers)

    def skip_pass(self) -> None:
        """One pass fewer than counted: its items leave the bar's total."""
        self.bar.total -= self.batches * self.n_layers
        self.passes -= 1

    def of(self, what: str):
        self.index += 1
        k = self.index

        def tick(batch: int, layer: int) -> None:
            self.bar.advance(
                f"pass {k}/{self.passes} ({what}) · batch {batch + 1}/{self.batches} · "
                f"layer {layer + 1}/{self.n_layers}"
            )

        return tick


def run_channels(model_dir: Path, out: Path, *, post_dir: Path | None = None, **settings) -> dict:
    """Analyse the base (and post) model; write ``channels.json`` and ``rms_<role>.csv`` under ``out``.
    ``settings``: those of :func:`analyse_model` (``progress`` included)."""
    out = ensure_folder(Path(out), "--out")
    result = {}
    for role, folder in (("base", model_dir), ("post", post_dir)):
        if folder is None:
            continue
        with torch.no_grad():  # forward passes only (not set globally: a caller may train afterwards)
            record, rms = analyse_model(Path(folder), label=f"channels {role}", **settings)
        write_rms_csv(out / f"rms_{role}.csv", rms)
        record["rms_per_layer"] = f"rms_{role}.csv"
        result[role] = record
    if "post" in result:
        result["base_post_jaccard"] = jaccard(result["base"]["channels"], result["post"]["channels"])
    atomic_write_text(out / CHANNELS_FILE, json.dumps(result, indent=2) + "\n")
    return result

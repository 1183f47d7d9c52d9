"""One model's outlier channels end to end, and the channels.json / CSV files of a run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from ..files import atomic_write_text, ensure_folder
from .ablation import SEEDS, ablate
from .activations import DEFAULT_MAX_MEMORY, calibration_pass, load_model, text_config, write_rms_csv
from .calibration import DEFAULT_SEQ_LEN, DEFAULT_SEQUENCES, calibration_ids
from .proxy import proxy_inputs
from .rule import OutlierRule, channel_scores, jaccard, proxy_channels, select


CHANNELS_FILE = "channels.json"  # written last: the run's (and a sweep channels unit's) completion marker

def analyse_model(model_dir: Path, *, rule: OutlierRule = OutlierRule(), sequences: int = DEFAULT_SEQUENCES,
                  seq_len: int = DEFAULT_SEQ_LEN, batch_size: int = 1, max_memory=DEFAULT_MAX_MEMORY,
                  do_ablate: bool = False, ablation_seeds=SEEDS) -> tuple[dict, np.ndarray]:
    """(the channels.json record of ``model_dir``, its (layers, hidden) RMS array); ``ablation_seeds``: one
    count-matched random channel set per seed when ``do_ablate``."""
    model_dir = Path(model_dir)
    t0 = time.perf_counter()
    with load_model(model_dir, max_memory=max_memory) as loaded:
        tc = text_config(loaded.config)
        cal = calibration_ids(model_dir, vocab_size=tc.vocab_size, sequences=sequences, seq_len=seq_len,
                              max_positions=getattr(tc, "max_position_embeddings", None))
        res = calibration_pass(loaded, cal.ids, batch_size=batch_size)
        scores = channel_scores(res.rms, rule)
        channels = select(scores, rule)
        record = {"model": str(model_dir), "hidden_size": int(tc.hidden_size), "n_layers": int(res.rms.shape[0]),
                  "rule": rule.describe(), "channels": channels, "fraction": len(channels) / tc.hidden_size,
                  "calibration": {"sequences": sequences, "seq_len": seq_len, "tokenizer": cal.tokenizer},
                  "offloaded": loaded.offloaded, "perplexity": res.perplexity,
                  "score_max": float(scores.max())}
        if do_ablate:
            record["ablation"] = ablate(loaded, cal.ids, channels, tc.hidden_size, batch_size=batch_size,
                                        seeds=tuple(ablation_seeds), baseline=res.perplexity)
    inputs = proxy_inputs(model_dir)
    if isinstance(inputs, str):
        record.update(proxy_channels=None, jaccard=None, proxy_note=inputs)
    else:
        prox = proxy_channels(*inputs, rule)
        record.update(proxy_channels=prox, jaccard=jaccard(prox, channels))
    record["seconds"] = time.perf_counter() - t0
    return record, res.rms


def run_channels(model_dir: Path, out: Path, *, post_dir: Path | None = None, **settings) -> dict:
    """Analyse the base (and post) model; write ``channels.json`` and ``rms_<role>.csv`` under ``out``."""
    out = ensure_folder(Path(out), "--out")
    result = {}
    for role, folder in (("base", model_dir), ("post", post_dir)):
        if folder is None:
            continue
        with torch.no_grad():  # forward passes only (not set globally: a caller may train afterwards)
            record, rms = analyse_model(Path(folder), **settings)
        write_rms_csv(out / f"rms_{role}.csv", rms)
        record["rms_per_layer"] = f"rms_{role}.csv"
        result[role] = record
    if "post" in result:
        result["base_post_jaccard"] = jaccard(result["base"]["channels"], result["post"]["channels"])
    atomic_write_text(out / CHANNELS_FILE, json.dumps(result, indent=2) + "\n")
    return result

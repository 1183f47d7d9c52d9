"""The weight-only proxy's inputs, read from the safetensors files without loading the model.

Input-norm gains: every ``…layers.<i>.input_layernorm.weight`` (Gemma-style norms, which scale
by 1 + w, are converted to the effective gain). Embedding: ``…embed_tokens.weight``, whose
column norms are accumulated over row chunks so that a 150k × 5120 table never sits in memory
whole. Families without an input norm before attention (OLMo 2 / 3 put their norms after
the sublayers) have no proxy: :func:`proxy_inputs` returns None and says why.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

GAIN_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.input_layernorm\.weight$")
EMBED_RE = re.compile(r"(?:^|\.)embed_tokens\.weight$")
ONE_PLUS_W = ("gemma", "gemma2", "gemma3", "gemma3_text")  # RMSNorm scales by (1 + weight)
ROWS_PER_CHUNK = 4096


def _tensor_files(model_dir: Path) -> dict[str, Path]:
    from safetensors import safe_open

    where = {}
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as h:
            for k in h.keys():
                where[k] = f
    return where


def proxy_inputs(model_dir: Path) -> tuple[np.ndarray, np.ndarray] | str:
    """(gains (layers, hidden) float64, column norms ‖E[:, c]‖ (hidden,) float64), or the reason there are none."""
    from safetensors import safe_open

    model_dir = Path(model_dir)
    cfg = json.loads((model_dir / "config.json").read_text())
    model_type = cfg.get("text_config", {}).get("model_type", cfg.get("model_type", ""))
    where = _tensor_files(model_dir)
    gains = {int(m.group(1)): k for k in where if (m := GAIN_RE.search(k))}
    embeds = [k for k in where if EMBED_RE.search(k)]
    if not gains:
        return f"no input_layernorm gains in {model_dir.name} ({model_type}: norms after the sublayers)"
    if len(embeds) != 1:
        return f"expected one embed_tokens.weight in {model_dir.name}, found {len(embeds)}"
    rows = []
    for i in sorted(gains):
        with safe_open(str(where[gains[i]]), framework="pt") as h:
            w = h.get_tensor(gains[i]).double().numpy()
        rows.append(1.0 + w if model_type in ONE_PLUS_W else w)
    sq = None
    with safe_open(str(where[embeds[0]]), framework="pt") as h:
        sl = h.get_slice(embeds[0])
        vocab = sl.get_shape()[0]
        for start in range(0, vocab, ROWS_PER_CHUNK):
            part = sl[start:start + ROWS_PER_CHUNK].double()
            s = part.pow(2).sum(0).numpy()
            sq = s if sq is None else sq + s
    return np.stack(rows), np.sqrt(sq)

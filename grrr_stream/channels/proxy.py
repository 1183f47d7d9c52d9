"""The weight-only proxy's inputs, read from the safetensors files without loading the model.

Input-norm gains: every ``…layers.<i>.input_layernorm.weight`` (Gemma-style norms, which scale
by 1 + w, are converted to the effective gain). Embedding: ``…embed_tokens.weight``, whose
column norms are accumulated over row chunks so that a 150k × 5120 table never sits in memory
whole. Families without an input norm before attention (OLMo 2 / 3 put their norms after
the sublayers) have no proxy: :func:`proxy_inputs` returns None and says why.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ..checkpoints.arch import ONE_PLUS_W_NORMS
from ..checkpoints.reader import Checkpoint

GAIN_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.input_layernorm\.weight$")
EMBED_RE = re.compile(r"(?:^|\.)embed_tokens\.weight$")
ROWS_PER_CHUNK = 4096


def proxy_inputs(model_dir: Path) -> tuple[np.ndarray, np.ndarray] | str:
    """(gains (layers, hidden) float64, column norms ‖E[:, c]‖ (hidden,) float64), or the reason there are none."""
    model_dir = Path(model_dir)
    ck = Checkpoint.open(model_dir)  # the checkpoint's owner: headers checked, tensors read by byte range
    cfg = ck.config or {}
    model_type = cfg.get("text_config", {}).get("model_type", cfg.get("model_type", ""))
    gains = {int(m.group(1)): k for k in ck.tensors if (m := GAIN_RE.search(k))}
    embeds = [k for k in ck.tensors if EMBED_RE.search(k)]
    if not gains:
        return f"no input_layernorm gains in {model_dir.name} ({model_type}: norms after the sublayers)"
    if len(embeds) != 1:
        return f"expected one embed_tokens.weight in {model_dir.name}, found {len(embeds)}"
    rows = []
    for i in sorted(gains):
        w = ck.read(gains[i]).double().numpy()
        rows.append(1.0 + w if model_type in ONE_PLUS_W_NORMS else w)
    sq = None
    vocab = ck.tensors[embeds[0]].shape[0]
    for start in range(0, vocab, ROWS_PER_CHUNK):
        part = ck.read_part(embeds[0], rows=(start, min(start + ROWS_PER_CHUNK, vocab)), mapped=False).double()
        s = part.pow(2).sum(0).numpy()
        sq = s if sq is None else sq + s
    return np.stack(rows), np.sqrt(sq)

"""Synthetic checkpoints in real Hugging Face layout, with planted updates.

Used by the tests, the benchmarks and the built-in demo (no downloads needed).
Weights are generated per tensor from a seed derived from (seed, tensor name), so a
child model can regenerate its parent's exact stored values without reading them.

A planted update puts chosen shares of ‖ΔW‖² into the diagonal, off-diagonal and
null parts of the *stored* parent matrix's own SVD frame (computed in float64 after
the cast to the storage dtype), so the decomposition has a known answer. When the
child is stored in a narrow dtype the cast of W1 perturbs the realised update: that
is realistic (bf16 rounding) and the tests account for it.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator, Optional

import torch

from .checkpoint import TensorSpec, write_checkpoint

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


@dataclass(frozen=True)
class ModelShape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: Optional[int] = None
    vocab: int = 512

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads


TINY = ModelShape(hidden=64, intermediate=160, layers=2, heads=4, kv_heads=2)
DEMO = ModelShape(hidden=256, intermediate=688, layers=4, heads=8, kv_heads=2)


def qwen3_14b_like(layers: int = 2) -> ModelShape:
    """Qwen3-14B layer shapes: hidden 5120, intermediate 17408, 40 query / 8 kv heads of 128."""
    return ModelShape(hidden=5120, intermediate=17408, layers=layers, heads=40, kv_heads=8, head_dim=128, vocab=1024)


@dataclass(frozen=True)
class Update:
    """A post-training update: relative size r_Δ = ‖ΔW‖/‖W0‖ and optional planted energy shares."""

    r_delta: float = 1e-2
    # (diag, off, null) shares of ‖ΔW‖²; None = isotropic Gaussian update.
    plant: Optional[tuple[float, float, float]] = None
    # relative drift of the tensors that are not decomposed (norms, embeddings)
    rest_drift: float = 1e-3
    # distinguishes updates at the same position in a chain (independent siblings)
    seed: int = 0


def projection_shapes(s: ModelShape) -> dict[str, tuple[int, int]]:
    q, kv = s.heads * s.hd, s.kv_heads * s.hd
    return {
        "q_proj": (q, s.hidden), "k_proj": (kv, s.hidden), "v_proj": (kv, s.hidden), "o_proj": (s.hidden, q),
        "gate_proj": (s.intermediate, s.hidden), "up_proj": (s.intermediate, s.hidden),
        "down_proj": (s.hidden, s.intermediate),
    }


def tensor_layout(s: ModelShape, family: str) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every tensor of a decoder-only model in HF naming."""
    out: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (s.vocab, s.hidden))]
    proj = projection_shapes(s)
    for i in range(s.layers):
        p = f"model.layers.{i}"
        out.append((f"{p}.input_layernorm.weight", (s.hidden,)))
        for mod in ("q_proj", "k_proj", "v_proj", "o_proj"):
            out.append((f"{p}.self_attn.{mod}.weight", proj[mod]))
            if family == "qwen2" and mod != "o_proj":
                out.append((f"{p}.self_attn.{mod}.bias", (proj[mod][0],)))
        if family in ("qwen3", "olmo2"):
            qn = s.hd if family == "qwen3" else s.heads * s.hd
            kn = s.hd if family == "qwen3" else s.kv_heads * s.hd
            out.append((f"{p}.self_attn.q_norm.weight", (qn,)))
            out.append((f"{p}.self_attn.k_norm.weight", (kn,)))
        out.append((f"{p}.post_attention_layernorm.weight", (s.hidden,)))
        for mod in ("gate_proj", "up_proj", "down_proj"):
            out.append((f"{p}.mlp.{mod}.weight", proj[mod]))
    out.append(("model.norm.weight", (s.hidden,)))
    out.append(("lm_head.weight", (s.vocab, s.hidden)))
    return out


def hf_config(s: ModelShape, family: str, dtype: str) -> dict:
    arch = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
            "qwen3": "Qwen3ForCausalLM", "olmo2": "Olmo2ForCausalLM"}[family]
    cfg = {
        "architectures": [arch], "model_type": family, "hidden_size": s.hidden,
        "intermediate_size": s.intermediate, "num_hidden_layers": s.layers, "num_attention_heads": s.heads,
        "num_key_value_heads": s.kv_heads, "head_dim": s.hd, "vocab_size": s.vocab,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
        "tie_word_embeddings": False, "torch_dtype": dtype, "bos_token_id": 0, "eos_token_id": 1,
    }
    if family == "qwen2":
        cfg["use_sliding_window"] = False
    return cfg


def _gen(seed: int, name: str) -> torch.Generator:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


def _is_projection(name: str) -> bool:
    return name.endswith("_proj.weight")


def base_tensor(name: str, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Deterministic float32 'pretrained' tensor: Gaussian bulk plus a few spikes for matrices."""
    g = _gen(seed, name)
    if len(shape) == 1:
        return 1.0 + 0.05 * torch.randn(shape, generator=g)
    m, n = shape
    w = torch.randn(m, n, generator=g) * (1.0 / math.sqrt(n))
    if _is_projection(name):
        # a few dominant directions, as pretrained matrices have (separated top singular values)
        k = min(4, m, n)
        a = torch.randn(m, k, generator=g) / math.sqrt(m)
        b = torch.randn(k, n, generator=g) / math.sqrt(n)
        w += (a * torch.tensor([4.0, 3.0, 2.5, 2.0][:k])) @ b
    return w


def planted_delta(W0: torch.Tensor, update: Update, gen: torch.Generator) -> tuple[torch.Tensor, tuple[float, float, float]]:
    """ΔW (float64) with r_Δ·‖W0‖ norm and the planted shares realised in W0's exact frame."""
    W0 = W0.double()
    total = update.r_delta * float(torch.linalg.matrix_norm(W0))
    m, n = W0.shape
    if update.plant is None:
        G = torch.randn(m, n, generator=gen, dtype=torch.float64)
        D = G * (total / float(torch.linalg.matrix_norm(G)))
        return D, (float("nan"),) * 3
    U, _, Vh = torch.linalg.svd(W0, full_matrices=False)
    V = Vh.mT
    r = U.shape[1]
    e_diag, e_off, e_null = update.plant
    d = torch.diag(torch.randn(r, generator=gen, dtype=torch.float64))
    o = torch.randn(r, r, generator=gen, dtype=torch.float64)
    o.fill_diagonal_(0.0)
    G = torch.randn(m, n, generator=gen, dtype=torch.float64)
    N = G - U @ (U.T @ G @ V) @ V.T
    n_norm = float(torch.linalg.matrix_norm(N))
    if n_norm < 1e-9 * float(torch.linalg.matrix_norm(G)):  # square W0: no null space
        s = e_diag + e_off
        e_diag, e_off, e_null = e_diag / s, e_off / s, 0.0
        N = torch.zeros_like(G)
    else:
        N /= n_norm
    parts = U @ (math.sqrt(e_diag) * d / torch.linalg.matrix_norm(d)
                 + math.sqrt(e_off) * o / torch.linalg.matrix_norm(o)) @ V.T
    D = total * (parts + math.sqrt(e_null) * N)
    return D, (e_diag, e_off, e_null)


def write_model(folder: Path, shape: ModelShape, *, family: str = "qwen2", dtype: str = "bfloat16",
                seed: int = 0, updates: tuple[Update, ...] = (), max_shard_bytes: int = 2 * 2**30,
                overwrite: bool = False) -> Path:
    """Write the model reached from the seed's base by applying ``updates`` in turn.

    ``updates=()`` is the base. Each update is planted in the frame of the stored
    parent (regenerated deterministically), so ``updates=(u1, u2)`` is the child of
    ``updates=(u1,)``. Planted shares are written to ``planted.json``.
    """
    tdtype = _DTYPES[dtype]
    planted: dict[str, list[float]] = {}

    def tensors() -> Iterator[tuple[str, torch.Tensor]]:
        for name, shp in tensor_layout(shape, family):
            w = base_tensor(name, shp, seed).to(tdtype)
            for step, upd in enumerate(updates):
                g = _gen(seed, f"{name}#update{step}" + (f"/{upd.seed}" if upd.seed else ""))
                if len(shp) == 2 and _is_projection(name):
                    delta, shares = planted_delta(w, upd, g)
                    planted[name] = list(shares)
                else:
                    delta = upd.rest_drift * w.double().abs().mean() * torch.randn(shp, generator=g, dtype=torch.float64)
                w = (w.double() + delta).to(tdtype)
            yield name, w

    extra = {"generation_config.json": json.dumps({"bos_token_id": 0, "eos_token_id": 1}).encode()}
    layout = [TensorSpec(name, tuple(shp), tdtype) for name, shp in tensor_layout(shape, family)]
    write_checkpoint(folder, tensors(), layout=layout, config=hf_config(shape, family, dtype),
                     max_shard_bytes=max_shard_bytes, extra_files=extra, overwrite=overwrite)
    meta = {"shape": asdict(shape), "family": family, "dtype": dtype, "seed": seed,
            "updates": [asdict(u) for u in updates], "planted_shares": planted}
    (Path(folder) / "synthetic.json").write_text(json.dumps(meta, indent=1))
    return Path(folder)


def make_transition(root: Path, shape: ModelShape = TINY, *, family: str = "qwen2", dtype: str = "bfloat16",
                    update: Update = Update(), seed: int = 0, max_shard_bytes: int = 2 * 2**30,
                    overwrite: bool = False) -> tuple[Path, Path]:
    """Base and post folders ``root/base`` and ``root/post`` for one synthetic transition."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    base = write_model(root / "base", shape, family=family, dtype=dtype, seed=seed,
                       max_shard_bytes=max_shard_bytes, overwrite=overwrite)
    post = write_model(root / "post", shape, family=family, dtype=dtype, seed=seed, updates=(update,),
                       max_shard_bytes=max_shard_bytes, overwrite=overwrite)
    return base, post

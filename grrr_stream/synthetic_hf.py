"""Tiny base/post checkpoint pairs made by transformers' own model classes.

:mod:`grrr_stream.synthetic` writes tensors by name for the dense families; the other
families (tied embeddings, Gemma's extra norms, fused projections, experts stored per
expert or as one 3-D tensor, Gemma3's multimodal prefix) are only trustworthy in the
names and shapes transformers itself saves. So here: config → model (seeded init) →
``save_pretrained`` for the base, then every floating tensor perturbed by a
deterministic relative Gaussian step → ``save_pretrained`` for the post model.
transformers is needed (the ``test`` extra); nothing is downloaded.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

import torch

_BASE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=8, vocab_size=128, max_position_embeddings=64)


def _configs() -> dict[str, Callable[[], tuple[object, type]]]:
    import transformers as tf

    def gemma3_mm():
        vision = tf.SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                       num_attention_heads=2, image_size=28, patch_size=14)
        cfg = tf.Gemma3Config(text_config=tf.Gemma3TextConfig(**_BASE), vision_config=vision, mm_tokens_per_image=4,
                              image_token_index=127, boi_token_index=125, eoi_token_index=126)
        return cfg, tf.Gemma3ForConditionalGeneration

    moe = dict(num_experts_per_tok=2)
    return {
        # tied embeddings: transformers saves no lm_head.weight for these
        "llama-tied": lambda: (tf.LlamaConfig(**_BASE, tie_word_embeddings=True), tf.LlamaForCausalLM),
        "gemma": lambda: (tf.GemmaConfig(**_BASE), tf.GemmaForCausalLM),
        "gemma2": lambda: (tf.Gemma2Config(**_BASE), tf.Gemma2ForCausalLM),
        "gemma3_text": lambda: (tf.Gemma3TextConfig(**_BASE), tf.Gemma3ForCausalLM),
        "gemma3": gemma3_mm,
        "phi3": lambda: (tf.Phi3Config(**_BASE, pad_token_id=0, bos_token_id=1, eos_token_id=2), tf.Phi3ForCausalLM),
        "qwen3_moe": lambda: (tf.Qwen3MoeConfig(**_BASE, moe_intermediate_size=16, num_experts=4, decoder_sparse_step=1,
                                                mlp_only_layers=[], **moe), tf.Qwen3MoeForCausalLM),
        "mixtral": lambda: (tf.MixtralConfig(**_BASE, num_local_experts=4, **moe), tf.MixtralForCausalLM),
        # gpt-oss keeps its own long context (its YaRN rope scaling is defined against it)
        "gpt_oss": lambda: (tf.GptOssConfig(**{**_BASE, "max_position_embeddings": 131072}, num_local_experts=4,
                                            **moe), tf.GptOssForCausalLM),
    }


def hf_families() -> list[str]:
    """Families :func:`make_hf_transition` can build (names as in the tests, not always model_type)."""
    return list(_configs())


def model_class(family: str) -> type:
    """The transformers class that built ``family``'s checkpoints (to load them back)."""
    return _configs()[family]()[1]


def _gen(seed: int, name: str) -> torch.Generator:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


def make_hf_transition(root: Path, family: str, *, seed: int = 0, r_delta: float = 1e-2) -> tuple[Path, Path]:
    """``root/base`` and ``root/post`` of a tiny float32 model of ``family``.

    The post model adds to every floating parameter a Gaussian of relative size ``r_delta``
    (of that parameter's RMS, at least 1e-3 absolute, so zero-initialised biases move too),
    seeded per (seed, parameter name): the same call writes the same files.
    """
    cls_cfg = _configs()
    if family not in cls_cfg:
        raise ValueError(f"unknown family '{family}'; one of {', '.join(cls_cfg)}")
    cfg, cls = cls_cfg[family]()
    root = Path(root)
    torch.manual_seed(seed)
    model = cls(cfg).to(torch.float32).eval()
    model.save_pretrained(root / "base", safe_serialization=True)
    with torch.no_grad():
        # named_parameters lists a tied weight once: the post model keeps it tied
        for name, p in model.named_parameters():
            if p.is_floating_point():
                scale = max(float(p.detach().double().pow(2).mean().sqrt()), 1e-3) * r_delta
                p.add_(torch.randn(p.shape, generator=_gen(seed, name), dtype=torch.float64).to(p.dtype) * scale)
    model.save_pretrained(root / "post", safe_serialization=True)
    return root / "base", root / "post"

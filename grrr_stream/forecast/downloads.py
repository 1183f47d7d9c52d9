"""Bytes to download per Hub id when the Hub cannot be asked: each id's stored dtype and size.

The Hub's own file sizes win when it answers (:func:`.shapes.from_hub`); this table is the fallback for the
ids of configs/paper.yaml (and configs/paper_extended.yaml's). Each row says how much is known:

- ``published``: the size is stated by a source named in the row (the checkpoint's files as the Hub lists
  them, quoted there); the bytes are that size;
- ``config``: the stored dtype is the ``torch_dtype`` its model card / config.json gives (recalled, not
  checked against the Hub from the machine this was written on); bytes = parameters × dtype size;
- ``assumed``: neither is known here; the dtype is the one its trainer usually writes (RL trainers built on
  veRL save float32, as DeepScaleR shows: those rows take float32, an upper bound); bytes = parameters ×
  dtype size, an **estimate**.

Parameters come from :data:`.shapes.KNOWN` (published configs), with the embedding untied where the
checkpoint stores a separate LM head (DeepSeek-R1-Distill-Qwen-1.5B and what was trained from it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class Stored:
    dtype: str  # the checkpoint's stored dtype
    basis: str  # 'published' | 'config' | 'assumed'
    note: str = ""
    published_bytes: Optional[int] = None  # the stated size (basis 'published')
    untied: bool = False  # a separate LM head is stored though the base ties it


_R1 = "R1-distill stores a separate lm_head (tie_word_embeddings false), 1.78B parameters"
_VERL = "RL with veRL, which saves float32 (as DeepScaleR): float32 assumed, an upper bound"

TABLE: dict[str, Stored] = {
    # C1: Qwen2.5-Math-1.5B chain
    "Qwen/Qwen2.5-Math-1.5B": Stored("bfloat16", "config", "Qwen2.5 releases are bf16"),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": Stored("bfloat16", "config", _R1, untied=True),
    # the Hub's file listing: DeepScaleR-1.5B is published in float32 (7.1 GB)
    "agentica-org/DeepScaleR-1.5B-Preview": Stored(
        "float32", "published", "the Hub's file listing: float32, 7.1 GB", published_bytes=7_100_000_000, untied=True
    ),
    "nvidia/Nemotron-Research-Reasoning-Qwen-1.5B": Stored("float32", "assumed", _VERL, untied=True),
    # C2/C4: Qwen3-8B
    "Qwen/Qwen3-8B-Base": Stored("bfloat16", "config", "Qwen3 releases are bf16"),
    "Kwai-Klear/Klear-Reasoner-8B-SFT": Stored("bfloat16", "assumed"),
    "Kwai-Klear/Klear-Reasoner-8B": Stored("bfloat16", "assumed"),
    # C3: Qwen3-14B
    "Qwen/Qwen3-14B-Base": Stored("bfloat16", "config", "Qwen3 releases are bf16"),
    "ReasoningTransferability/UniReason-Qwen3-14B-think-SFT": Stored("bfloat16", "assumed"),
    "ReasoningTransferability/UniReason-Qwen3-14B-no-think-SFT": Stored("bfloat16", "assumed"),
    "ReasoningTransferability/UniReason-Qwen3-14B-RL": Stored("bfloat16", "assumed"),
    # C5: Mistral-7B / Zephyr
    "mistralai/Mistral-7B-v0.1": Stored("bfloat16", "config", "two bf16 shards"),
    "HuggingFaceH4/mistral-7b-sft-beta": Stored("bfloat16", "assumed"),
    "HuggingFaceH4/zephyr-7b-beta": Stored("bfloat16", "config"),
    # C6/C10: Qwen2.5-Math-7B (RLHFlow, PRIME-RL)
    "Qwen/Qwen2.5-Math-7B": Stored("bfloat16", "config", "Qwen2.5 releases are bf16"),
    "RLHFlow/Qwen2.5-7B-SFT": Stored("bfloat16", "assumed"),
    "RLHFlow/Qwen2.5-7B-DPO": Stored("bfloat16", "assumed"),
    "RLHFlow/Qwen2.5-7B-DPO-Zero": Stored("bfloat16", "assumed"),
    "RLHFlow/Qwen2.5-7B-PPO-Zero": Stored("float32", "assumed", _VERL),
    "RLHFlow/Qwen2.5-7B-RAFT-Zero": Stored("float32", "assumed", _VERL),
    "RLHFlow/Qwen2.5-Math-7B-Zero-RAFTpp": Stored("float32", "assumed", _VERL),
    "RLHFlow/Qwen2.5-Math-7B-Zero-Reinforce-Rej": Stored("float32", "assumed", _VERL),
    "PRIME-RL/Eurus-2-7B-SFT": Stored("bfloat16", "assumed"),
    "PRIME-RL/Eurus-2-7B-PRIME": Stored("float32", "assumed", _VERL),
    "PRIME-RL/Eurus-2-7B-PRIME-Zero": Stored("float32", "assumed", _VERL),
    # C7/C9: OLMo 2 and OLMo 3
    "allenai/OLMo-2-1124-7B": Stored("float32", "assumed", "OLMo base releases have shipped float32: an upper bound"),
    "allenai/OLMo-2-1124-7B-SFT": Stored("bfloat16", "assumed"),
    "allenai/OLMo-2-1124-7B-DPO": Stored("bfloat16", "assumed"),
    "allenai/OLMo-2-1124-7B-Instruct": Stored("bfloat16", "assumed"),
    "allenai/Olmo-3-1025-7B": Stored("bfloat16", "assumed"),
    "allenai/Olmo-3-7B-Think-SFT": Stored("bfloat16", "assumed"),
    "allenai/Olmo-3-7B-Think-DPO": Stored("bfloat16", "assumed"),
    "allenai/Olmo-3-7B-Think": Stored("bfloat16", "assumed"),
    # C8: Llama-3-8B
    "meta-llama/Meta-Llama-3-8B": Stored("bfloat16", "config", "four bf16 shards"),
    "OpenRLHF/Llama-3-8b-sft-mixture": Stored("bfloat16", "assumed"),
    "OpenRLHF/Llama-3-8b-rlhf-100k": Stored("bfloat16", "assumed"),
    # C11: MiMo-7B (its MTP layers are stored too: not in the parameter count, a few % low)
    "XiaomiMiMo/MiMo-7B-Base": Stored("bfloat16", "config", "MTP layers not counted"),
    "XiaomiMiMo/MiMo-7B-SFT": Stored("bfloat16", "config", "MTP layers not counted"),
    "XiaomiMiMo/MiMo-7B-RL": Stored("bfloat16", "config", "MTP layers not counted"),
    "XiaomiMiMo/MiMo-7B-RL-Zero": Stored("bfloat16", "config", "MTP layers not counted"),
    # C12: DeepSeekMath 7B
    "deepseek-ai/deepseek-math-7b-base": Stored("bfloat16", "config"),
    "deepseek-ai/deepseek-math-7b-instruct": Stored("bfloat16", "config"),
    "deepseek-ai/deepseek-math-7b-rl": Stored("bfloat16", "config"),
}


def table_download(repo: str, params: int, vocab: int = 0, hidden: int = 0) -> Optional[tuple[int, str, str]]:
    """(bytes, stored dtype, how it is known) for ``repo`` from the table, None when it is not there.
    ``params`` counts a tied embedding once; an untied row adds vocab × hidden for its LM head."""
    row = TABLE.get(repo)
    if row is None:
        return None
    if row.published_bytes is not None:
        return row.published_bytes, row.dtype, f"published ({row.note})"
    n = params + (vocab * hidden if row.untied else 0)
    how = "dtype from its config" if row.basis == "config" else "dtype assumed"
    return n * ITEMSIZE[row.dtype], row.dtype, f"estimate: {n / 1e9:.2f}B parameters × {row.dtype} ({how})"


def download_basis(notes: dict) -> str:
    """One line over the models' download notes ({source: ['download float32: published (...)', ...]}): how
    many sizes are published, how many estimated from a known or an assumed dtype."""
    flat = [n for ns in notes.values() for n in ns if n.startswith("download")]
    published = sum("published" in n for n in flat)
    config = sum("dtype from its config" in n for n in flat)
    assumed = len(flat) - published - config
    f32 = sum(n.startswith("download float32") for n in flat)
    return (
        f"downloads of {len(flat)} Hub id(s) from the built-in table: {published} published size(s), "
        f"{config} estimate(s) from the dtype in their config, {assumed} from an assumed dtype "
        f"({f32} stored in float32); forecast/downloads.py lists each"
    )

"""What a sweep's models weigh before anything is downloaded: matrix shapes, parameters, bytes to fetch.

For each model, the first source that answers:
1. ``hub``: the Hub's file metadata (safetensors sizes, and shapes from the shards' headers), when the Hub
   answers within a short timeout (a machine without network fails fast and goes on);
2. ``local headers``: the checkpoint's own safetensors headers, for a local folder or a Hub id already in
   the Hugging Face cache (nothing then left to download);
3. ``built-in table``: :data:`KNOWN`, the published configs (hidden size, intermediate size, layers,
   heads) of the architectures in configs/paper.yaml, keyed by Hub id; bytes from :mod:`.downloads` (each
   id's stored dtype, and whether its size is published or an estimate), else parameters × 2 (bf16 assumed);
4. ``unknown``.
"""

from __future__ import annotations

import math
import os
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional
from urllib.parse import urlparse

from ..errors import GrrrError
from .downloads import table_download


@dataclass(frozen=True)
class Arch:
    """A Llama-style decoder: q, k, v, o, gate, up, down per layer (the matrices decomposed by default)."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    head_dim: Optional[int] = None
    tied: bool = False

    def matrices(self) -> list[tuple[int, int]]:
        """(out, in) of every decomposed matrix, as stored in the checkpoint."""
        hd = self.head_dim or self.hidden // self.heads
        h, i = self.hidden, self.intermediate
        layer = [
            (self.heads * hd, h),
            (self.kv_heads * hd, h),
            (self.kv_heads * hd, h),
            (h, self.heads * hd),
            (i, h),
            (i, h),
            (h, i),
        ]
        return layer * self.layers

    def kv_elems(self) -> int:
        """Elements of one token's KV cache: keys and values of every layer."""
        return 2 * self.layers * self.kv_heads * (self.head_dim or self.hidden // self.heads)

    def params(self) -> int:
        """Every parameter: the matrices, embeddings (and an untied head), norms."""
        emb = self.vocab * self.hidden * (1 if self.tied else 2)
        return sum(m * n for m, n in self.matrices()) + emb + self.layers * 2 * self.hidden + self.hidden


# Published config.json values (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
# num_key_value_heads, vocab_size, head_dim, tie_word_embeddings) of the families in configs/paper.yaml.
# Fine-tunes keep their base's shapes; a fine-tune's id maps to its base's entry below.
_QWEN25_MATH_15B = Arch(1536, 8960, 28, 12, 2, 151936, tied=True)
_QWEN25_7B = Arch(3584, 18944, 28, 28, 4, 152064)
_QWEN3_8B = Arch(4096, 12288, 36, 32, 8, 151936, head_dim=128)
_QWEN3_14B = Arch(5120, 17408, 40, 40, 8, 151936, head_dim=128)
_MISTRAL_7B = Arch(4096, 14336, 32, 32, 8, 32000)
_LLAMA3_8B = Arch(4096, 14336, 32, 32, 8, 128256)
_OLMO2_7B = Arch(4096, 11008, 32, 32, 32, 100352)
_MIMO_7B = Arch(4096, 11008, 36, 32, 8, 151680)
_DEEPSEEK_MATH_7B = Arch(4096, 11008, 30, 32, 32, 102400)

_FAMILIES: dict[Arch, tuple[str, ...]] = {
    _QWEN25_MATH_15B: (
        "Qwen/Qwen2.5-Math-1.5B",
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
        "agentica-org/DeepScaleR-1.5B-Preview",
        "nvidia/Nemotron-Research-Reasoning-Qwen-1.5B",
    ),
    _QWEN25_7B: (
        "Qwen/Qwen2.5-Math-7B",
        "RLHFlow/Qwen2.5-7B-SFT",
        "RLHFlow/Qwen2.5-7B-DPO",
        "RLHFlow/Qwen2.5-7B-DPO-Zero",
        "RLHFlow/Qwen2.5-7B-PPO-Zero",
        "RLHFlow/Qwen2.5-7B-RAFT-Zero",
        "RLHFlow/Qwen2.5-Math-7B-Zero-RAFTpp",
        "RLHFlow/Qwen2.5-Math-7B-Zero-Reinforce-Rej",
        "PRIME-RL/Eurus-2-7B-SFT",
        "PRIME-RL/Eurus-2-7B-PRIME",
        "PRIME-RL/Eurus-2-7B-PRIME-Zero",
    ),
    _QWEN3_8B: ("Qwen/Qwen3-8B-Base", "Kwai-Klear/Klear-Reasoner-8B-SFT", "Kwai-Klear/Klear-Reasoner-8B"),
    _QWEN3_14B: (
        "Qwen/Qwen3-14B-Base",
        "ReasoningTransferability/UniReason-Qwen3-14B-think-SFT",
        "ReasoningTransferability/UniReason-Qwen3-14B-no-think-SFT",
        "ReasoningTransferability/UniReason-Qwen3-14B-RL",
    ),
    _MISTRAL_7B: ("mistralai/Mistral-7B-v0.1", "HuggingFaceH4/mistral-7b-sft-beta", "HuggingFaceH4/zephyr-7b-beta"),
    _LLAMA3_8B: ("meta-llama/Meta-Llama-3-8B", "OpenRLHF/Llama-3-8b-sft-mixture", "OpenRLHF/Llama-3-8b-rlhf-100k"),
    _OLMO2_7B: (
        "allenai/OLMo-2-1124-7B",
        "allenai/OLMo-2-1124-7B-SFT",
        "allenai/OLMo-2-1124-7B-DPO",
        "allenai/OLMo-2-1124-7B-Instruct",
        "allenai/Olmo-3-1025-7B",
        "allenai/Olmo-3-7B-Think-SFT",
        "allenai/Olmo-3-7B-Think-DPO",
        "allenai/Olmo-3-7B-Think",
    ),
    _MIMO_7B: (
        "XiaomiMiMo/MiMo-7B-Base",
        "XiaomiMiMo/MiMo-7B-SFT",
        "XiaomiMiMo/MiMo-7B-RL",
        "XiaomiMiMo/MiMo-7B-RL-Zero",
    ),
    _DEEPSEEK_MATH_7B: (
        "deepseek-ai/deepseek-math-7b-base",
        "deepseek-ai/deepseek-math-7b-instruct",
        "deepseek-ai/deepseek-math-7b-rl",
    ),
}
KNOWN: dict[str, Arch] = {repo: arch for arch, repos in _FAMILIES.items() for repo in repos}
TABLE_BYTES_PER_PARAM = 2  # the table's downloads: these checkpoints ship in bf16


@dataclass
class ModelFacts:
    """One model as far as it is known: decomposable shapes, parameters and bytes still to download."""

    shapes: Optional[list[tuple[int, int]]] = None
    params: Optional[int] = None
    download: Optional[int] = None  # bytes still to fetch; 0: here already; None: unknown
    where: str = "unknown"  # hub | local headers | built-in table | generated | unknown
    notes: list[str] = field(default_factory=list)
    hidden: Optional[int] = None  # residual width (from the input embedding: vocab × hidden)
    vocab: Optional[int] = None
    largest: Optional[int] = None  # bytes of the largest tensor as stored (a channels unit's largest block)
    kv_elems: Optional[int] = None  # one token's KV cache: 2 × Σ over layers of k_proj's output size
    attn_elems: Optional[int] = None  # Σ over layers of q_proj's output size (attention's FLOP per context token / 4)


def _embedding(tensors: dict[str, tuple[int, ...]]) -> tuple[Optional[int], Optional[int]]:
    """(vocab, hidden) from the input embedding's shape (a 2-D tensor named ``*embed_tokens.weight``)."""
    emb = [s for name, s in tensors.items() if name.endswith("embed_tokens.weight") and len(s) == 2]
    return (int(emb[0][0]), int(emb[0][1])) if emb else (None, None)


def from_arch(arch: Arch, where: str, download: Optional[int]) -> ModelFacts:
    """The table's models, taken as bf16 for the largest tensor (the embedding, or a larger matrix)."""
    largest = max([arch.vocab * arch.hidden] + [m * n for m, n in arch.matrices()]) * TABLE_BYTES_PER_PARAM
    hd = arch.head_dim or arch.hidden // arch.heads
    return ModelFacts(
        arch.matrices(),
        arch.params(),
        download,
        where,
        hidden=arch.hidden,
        vocab=arch.vocab,
        largest=largest,
        kv_elems=arch.kv_elems(),
        attn_elems=arch.layers * arch.heads * hd,
    )


def _attention_sizes(tensors: dict[str, tuple[int, ...]]) -> tuple[Optional[int], Optional[int]]:
    """(KV elements per token, Σ q output sizes) from the tensors' names and shapes (None: no k_proj/q_proj)."""
    k = sum(s[0] for n, s in tensors.items() if n.endswith("k_proj.weight") and len(s) == 2)
    v = sum(s[0] for n, s in tensors.items() if n.endswith("v_proj.weight") and len(s) == 2)
    q = sum(s[0] for n, s in tensors.items() if n.endswith("q_proj.weight") and len(s) == 2)
    return (k + v or None), (q or None)


def from_checkpoint(folder: Path, download: int = 0) -> Optional[ModelFacts]:
    """Shapes and parameters from a local checkpoint's safetensors headers (None: not readable)."""
    from ..checkpoints.reader import Checkpoint
    from ..decompose.plan import default_selection

    try:
        ck = Checkpoint.open(Path(folder))
        # the decomposition's own selection: the family's pattern and modules (experts, fused tensors)
        shapes = [tuple(ck.matrix_shape(m))[-2:] for m in default_selection(ck)]
    except (GrrrError, OSError, ValueError, KeyError, TypeError):
        return None
    params = sum(math.prod(t.shape) for t in ck.tensors.values())
    every = {n: tuple(t.shape) for n, t in ck.tensors.items()}
    vocab, hidden = _embedding(every)
    kv, attn = _attention_sizes(every)
    return ModelFacts(
        [(int(a), int(b)) for a, b in shapes],
        int(params),
        download,
        "local headers",
        hidden=hidden,
        vocab=vocab,
        largest=max((t.nbytes for t in ck.tensors.values()), default=None),
        kv_elems=kv,
        attn_elems=attn,
    )


def hub_reachable(timeout: float = 2.0) -> bool:
    """One TCP connection to the Hub's endpoint within ``timeout``, name lookup included (in a thread: a
    resolver without network can block far longer than a socket timeout). HF_HUB_OFFLINE=1: no."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    answer: list[bool] = []

    def connect() -> None:
        try:
            with socket.create_connection((url.hostname, url.port or 443), timeout=timeout):
                answer.append(True)
        except OSError:
            answer.append(False)

    probe = threading.Thread(target=connect, daemon=True)
    probe.start()
    probe.join(timeout)
    return bool(answer and answer[0])


def from_hub(repo: str, revision: Optional[str], timeout: float = 10.0) -> Optional[ModelFacts]:
    """Sizes of the repo's safetensors files and shapes from their headers (None on any failure)."""
    try:
        from huggingface_hub import HfApi

        api = HfApi()
        info = api.model_info(repo, revision=revision, files_metadata=True, timeout=timeout)
        size = sum(int(s.size or 0) for s in info.siblings or [] if s.rfilename.endswith(".safetensors"))
        meta = api.get_safetensors_metadata(repo, revision=revision, timeout=timeout)
        shapes, params, every, largest = [], 0, {}, 0
        for fm in meta.files_metadata.values():
            for name, t in fm.tensors.items():
                params += math.prod(t.shape)
                every[name] = tuple(t.shape)
                largest = max(largest, math.prod(t.shape) * _ITEMSIZE.get(str(t.dtype).upper(), 2))
                if len(t.shape) == 2 and name.endswith("proj.weight"):
                    shapes.append((int(t.shape[0]), int(t.shape[1])))
    except Exception:  # noqa: BLE001 - no network, gated, renamed, an old client: the next source answers
        return None
    vocab, hidden = _embedding(every)
    kv, attn = _attention_sizes(every)
    return ModelFacts(
        shapes, params, size, "hub", hidden=hidden, vocab=vocab, largest=largest or None, kv_elems=kv, attn_elems=attn
    )


_ITEMSIZE = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1, "U8": 1}


def from_hf_cache(repo: str, revision: Optional[str]) -> Optional[ModelFacts]:
    """A Hub model already in the local Hugging Face cache: its headers, nothing to download."""
    try:
        from huggingface_hub import snapshot_download

        folder = snapshot_download(repo, revision=revision, local_files_only=True)
    except Exception:  # noqa: BLE001 - not cached (or no huggingface_hub)
        return None
    return from_checkpoint(Path(folder), download=0)


def hub_model(repo: str, revision: Optional[str], *, online: bool) -> ModelFacts:
    """A Hub id through the chain hub → local headers → built-in table → unknown."""
    facts = (from_hub(repo, revision) if online else None) or from_hf_cache(repo, revision)
    if facts is not None:
        return facts
    if repo in KNOWN:
        arch = KNOWN[repo]
        known = table_download(repo, arch.params(), arch.vocab if arch.tied else 0, arch.hidden)
        if known is None:
            facts = from_arch(arch, "built-in table", arch.params() * TABLE_BYTES_PER_PARAM)
            facts.notes.append("download: bf16 assumed (not in the downloads table)")
        else:
            facts = from_arch(arch, "built-in table", known[0])
            facts.notes.append(f"download {known[1]}: {known[2]}")
        return facts
    return ModelFacts()

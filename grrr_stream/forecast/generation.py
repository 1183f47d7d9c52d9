"""Seconds of an evaluation's generation on a device, with vLLM's batching.

vLLM decodes the running sequences together, one token each per step. A step reads every weight once and each
running sequence's KV cache (bandwidth), and does 2 × parameters FLOP per sequence plus attention over its
context (compute): its time is the larger of the two, so a small batch is bandwidth-bound and a large one
compute-bound (a roofline; the efficiencies ``Device.mbu`` and MFU of :mod:`.devices`). How many sequences run at once:
``max_num_seqs`` (vLLM's default 256 when the config does not set it), the sequences there are, and what the
KV cache holds when every answer is ``max_tokens`` long (the caller's: the expected answer length of
:mod:`.answers`, or ``max_new_tokens`` for the upper bound) — the cache being ``gpu_memory_utilization`` of the
device's memory less the weights
and an activation reserve on a GPU, ``cpu_kv_cache_gib`` on a CPU. Sequences run in waves of that batch; a
prefill of the prompts at the compute rate comes first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .devices import MFU, Device

VLLM_MAX_NUM_SEQS = 256  # vLLM's default max_num_seqs (EngineArgs) when the config sets none
PROMPT_TOKENS = 256  # a math problem in the chat template: ~100-300 tokens (MATH500 ~150): a round bound
ACTIVATION_RESERVE = 2 * 2**30  # bytes vLLM's profiling run keeps for activations and CUDA graphs: a guess


@dataclass(frozen=True)
class Generation:
    """The modelled generation of one evaluation."""

    seconds: Optional[float]  # None: the model does not fit the device
    batch: int  # sequences decoded together
    regime: str  # 'bandwidth-bound' | 'compute-bound' (of the full waves) | 'does not fit'
    tokens_per_s: float  # output tokens per second in a full wave
    weights: int  # bytes of weights on the device
    kv_cache: int  # bytes of KV cache the engine holds
    why: str = ""

    def describe(self) -> str:
        if self.seconds is None:
            return self.why
        return f"batch {self.batch}, {self.regime}, {self.tokens_per_s:,.0f} tok/s"


def kv_bytes_per_token(kv_elems: int, itemsize: int) -> int:
    """KV cache bytes of one token: keys and values of every layer (``kv_elems`` = 2 × layers × KV heads ×
    head dim), in the engine's dtype (vLLM's kv_cache_dtype 'auto')."""
    return kv_elems * itemsize


def step_seconds(
    batch: int,
    params: int,
    itemsize: int,
    kv_token: int,
    context: float,
    device: Device,
    dtype: str,
    attn_flops_token: float = 0.0,
    gpu_busy: float = 1.0,
) -> tuple[float, str]:
    """One decode step of ``batch`` sequences at mean ``context`` tokens: (seconds, the bound). ``gpu_busy``: the
    fraction of a step the device works, the rest host scheduling not overlapped with it (1: today's vLLM)."""
    memory = (params * itemsize + batch * context * kv_token) / (device.bandwidth_gbs * 1e9 * device.mbu)
    compute = batch * (2.0 * params + attn_flops_token * context) / (device.flops(dtype) * MFU)
    return max(memory, compute) / gpu_busy, ("bandwidth-bound" if memory >= compute else "compute-bound")


def generation(
    *,
    params: int,
    kv_elems: Optional[int],
    sequences: int,
    max_tokens: int,
    device: Device,
    dtype: str,
    itemsize: int,
    max_num_seqs: Optional[int] = None,
    gpu_memory_utilization: float = 0.9,
    cpu_kv_cache_gib: float = 1.0,
    prompt_tokens: int = PROMPT_TOKENS,
    attn_flops_token: float = 0.0,
) -> Generation:
    """The generation of ``sequences`` answers of ``max_tokens`` each (see the module docstring)."""
    weights = params * itemsize
    if sequences <= 0:
        return Generation(0.0, 0, "nothing to generate", 0.0, weights, 0)
    if device.kind == "gpu":
        cache = int(device.memory_gib * 2**30 * gpu_memory_utilization) - weights - ACTIVATION_RESERVE
    else:
        cache = int(cpu_kv_cache_gib * 2**30)
    # a model without known KV heads: a Llama-style guess, KV elements ≈ params / 4000 per token (7B: ~1.8e6)
    kv_token = kv_bytes_per_token(kv_elems if kv_elems else max(1, params // 4000), itemsize)
    per_seq = kv_token * (prompt_tokens + max_tokens)
    fits = cache // per_seq if cache > 0 else 0
    if fits < 1:
        why = (
            f"does not fit: {weights / 2**30:.1f} GiB of weights leave {max(cache, 0) / 2**30:.1f} GiB of KV "
            f"cache, one sequence needs {per_seq / 2**30:.2f} GiB"
        )
        return Generation(None, 0, "does not fit", 0.0, weights, max(cache, 0), why)
    batch = int(min(max_num_seqs or VLLM_MAX_NUM_SEQS, sequences, fits))
    context = prompt_tokens + max_tokens / 2.0  # mean context over a sequence's decode
    full, rest = divmod(sequences, batch)
    step, regime = step_seconds(batch, params, itemsize, kv_token, context, device, dtype, attn_flops_token)
    seconds = full * max_tokens * step
    if rest:
        seconds += (
            max_tokens * step_seconds(rest, params, itemsize, kv_token, context, device, dtype, attn_flops_token)[0]
        )
    prefill = 2.0 * params * prompt_tokens * sequences / (device.flops(dtype) * MFU)
    return Generation(seconds + prefill, batch, regime, batch / step, weights, cache)

"""Published vLLM throughput on GPUs, as data, and the generation model's steady-state decode rate for each row.

Each row: the source (address), the model (a Hub id of the same architecture in :data:`.shapes.KNOWN`), the GPU
(a row of :data:`.devices.DEVICES`), the vLLM version, the dtype, the sequences running at once, the mean
context over a decode (input + half the output), and the published output tokens per second. ``fitted`` marks
the row a constant of the model was taken from (not a check); ``note`` says why a row stays outside
:data:`BOUND`. ``tools/forecast_error.py --published`` prints forecast / published per row.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..dtypes import ITEMSIZE
from .devices import resolve
from .generation import step_seconds
from .shapes import KNOWN

BOUND = 1.5  # a row's forecast / published is within [1/BOUND, BOUND], or the row carries a note

# vLLM before 0.6 ran the HTTP server, scheduling and output processing on the host between GPU steps: "for
# Llama 3 8B running on 1 H100 GPU ... only 38% of the time was spent on the actual GPU execution" (vLLM blog,
# "vLLM v0.6.0: 2.7x Throughput Improvement and 5x Latency Reduction", 2024-09-05,
# https://blog.vllm.ai/2024/09/05/perf-update.html). 0.6 overlaps it (multi-step scheduling, asynchronous
# output processing) and V1 keeps it overlapped: 1.0 from there on.
HOST_BUSY = {"0.5": 0.38}


@dataclass(frozen=True)
class Published:
    label: str
    source: str  # address of the figure
    device: str  # a row of forecast.devices.DEVICES
    model: str  # Hub id of the same architecture in forecast.shapes.KNOWN
    vllm: str  # version the figure was measured with
    dtype: str
    running: int  # sequences decoded together
    context: float  # mean context over a decode: input + half the output
    tok_s: float  # published output tokens per second
    fitted: bool = False
    note: str = ""

    def gpu_busy(self) -> float:
        return HOST_BUSY.get(".".join(self.vllm.split(".")[:2]), 1.0)


_LLAMA31 = "meta-llama/Meta-Llama-3-8B"  # Llama-3.1-8B has Llama-3-8B's shapes
_MISTRAL = "mistralai/Mistral-7B-v0.1"  # Mistral-7B-Instruct-v0.3's shapes but a 32768 vocabulary: +0.27 %
_BENCH = "https://yobitelcomm.github.io/bench/recipes/concurrency-sweep/"
_SWEEP = "https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on"
_LAMBDA = "https://github.com/LambdaLabsML/vllm-benchmark"

ROWS: tuple[Published, ...] = (
    # InferenceBench concurrency-sweep recipe: Llama-3.1-8B-Instruct, fp16, one H100-80GB-HBM3, vLLM 0.21.0,
    # workload llm.inference.chatbot-short (short chat prompts and answers; lengths not published: context
    # ~300 assumed). conc 1: 122.2 tok/s, median TPOT 6.48 ms. MBU was taken from this row.
    Published(
        "Llama-3.1-8B fp16, concurrency 1",
        _BENCH,
        "h100-80g",
        _LLAMA31,
        "0.21.0",
        "float16",
        1,
        300,
        1 / 6.48e-3,
        fitted=True,
    ),
    # same table, conc 4: median TPOT 6.59 ms (580.3 tok/s over the run, first tokens included); each row of this
    # source as running / TPOT, the decode rate the model gives
    Published(
        "Llama-3.1-8B fp16, concurrency 4", _BENCH, "h100-80g", _LLAMA31, "0.21.0", "float16", 4, 300, 4 / 6.59e-3
    ),
    # same table, conc 16: median TPOT 10.94 ms (1,384.2 tok/s over the run; TTFT p50 42 ms)
    Published(
        "Llama-3.1-8B fp16, concurrency 16",
        _BENCH,
        "h100-80g",
        _LLAMA31,
        "0.21.0",
        "float16",
        16,
        300,
        16 / 10.94e-3,
        note="short answers: new requests' prefills run between decode steps (a served workload's "
        "TPOT 10.9 ms against 6.6 ms at concurrency 4); an offline evaluation of 3000-token "
        "answers prefills once",
    ),
    # johnmusgrave.com: Llama-3.1-8B-Instruct bf16, one A100 40GB, vLLM 0.23.0, `vllm bench serve` random
    # 1024 input + 128 output tokens, --ignore-eos: "about 75 tokens/sec" at one request, "a 6.6x gain" at 8
    Published("Llama-3.1-8B bf16, 1 request", _SWEEP, "a100-40g", _LLAMA31, "0.23.0", "bfloat16", 1, 1088, 75.0),
    Published("Llama-3.1-8B bf16, 8 requests", _SWEEP, "a100-40g", _LLAMA31, "0.23.0", "bfloat16", 8, 1088, 6.6 * 75.0),
    # LambdaLabsML/vllm-benchmark benchmark_v0.md, table 1xH100-80GB-SXM: Mistral-7B-Instruct-v0.3 bf16, ShareGPT,
    # --num-prompts 320, 3281.19 output tok/s at 27.23 ms median TPOT (vLLM 0.5.4): 3281 × 0.02723 ≈ 89 running;
    # context ~500 tokens (ShareGPT, a guess)
    Published(
        "Mistral-7B bf16, 320 prompts",
        _LAMBDA + " benchmark_v0.md",
        "h100-80g",
        _MISTRAL,
        "0.5.4",
        "bfloat16",
        89,
        500,
        3281.19,
    ),
    # same repository, results/prompt_10/1xH100-80GB-SXM/Mistral-7B-Instruct-v0.3_tp1_len2000.json: 10 prompts
    # (input 158, output 249 tokens on average), median inter-token latency 7.88 ms
    Published(
        "Mistral-7B bf16, 10 prompts",
        _LAMBDA + " results/prompt_10",
        "h100-80g",
        _MISTRAL,
        "0.5.4",
        "bfloat16",
        10,
        280,
        10 / 7.88e-3,
        note="the blog's 38 % GPU time was profiled under a full serving load; at 10 requests vLLM 0.5.4's "
        "host time per step is shorter (it grows with the running requests)",
    ),
)


def forecast_tok_s(row: Published) -> tuple[float, str]:
    """(output tokens per second the generation model gives for ``row``'s setup, the bound)."""
    arch = KNOWN[row.model]
    hd = arch.head_dim or arch.hidden // arch.heads
    item = ITEMSIZE[row.dtype]
    step, regime = step_seconds(
        row.running,
        arch.params(),
        item,
        arch.kv_elems() * item,
        row.context,
        resolve(row.device),
        row.dtype,
        4.0 * arch.layers * arch.heads * hd,
        row.gpu_busy(),
    )
    return row.running / step, regime


def within(ratio: float) -> bool:
    return 1.0 / BOUND <= ratio <= BOUND

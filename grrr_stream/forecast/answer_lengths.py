"""How long an evaluation's answers are: a mean length per benchmark and model size, from published evaluations
and the demo, so that answers which stop (EOS) before ``max_new_tokens`` are forecast at their length.

An answer costs min(its length, the limit) tokens; with only a mean known, min(mean, limit) is used. min is
concave, so by Jensen min(mean, limit) ≥ mean(min(length, limit)): the forecast stays on the long side of the
lengths it was given. A benchmark or size without a figure falls back to the limit (every answer to
``max_new_tokens``: the upper bound, always printed beside).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

# a public evaluation table of the four DeepSeek-R1-Distill-Qwen models on MATH's 5,000 test problems (mean
# response tokens, long chains of thought, no length limit reached in practice: max tokens 32768), found by
# text search of public GitHub files: "DeepSeek-R1-Distill-Qwen Models - Math Evaluation Results"
_R1_MATH = "GitHub file 'DeepSeek-R1-Distill-Qwen Models - Math Evaluation Results' (MATH, 5,000 problems)"
# the demo's own evaluation: the shipped tiny chain's variants base, full and offnull of base → sft (28.6, 47.5,
# 47.8 tokens) and sft → rl (47.5, 47.4, 47.4) on its arith benchmark, max_new_tokens 64 (tokens_mean of
# evaluation/tables.py; `python tools/answer_lengths.py`)
_DEMO = "the demo's evaluation of the tiny chain, tokens_mean (tools/answer_lengths.py)"


@dataclass(frozen=True)
class AnswerLength:
    benchmarks: tuple[str, ...]  # the benchmark names it applies to
    params_up_to: float  # the largest model size (parameters) it applies to; rows are tried in order
    tokens: float  # mean generated tokens per answer
    source: str


# MATH500 is a uniform sample of MATH's test set: MATH's mean carries over. AIME, AMC, Minerva and OlympiadBench
# are harder (longer answers) and have no published mean here: the limit. The R1-distill lengths are long-CoT
# models'; a short-CoT model (an SFT of Mistral or Llama, Qwen2.5-Math) answers in fewer tokens, so for those
# they are on the long side too.
LENGTHS: tuple[AnswerLength, ...] = (
    AnswerLength(("math500",), 2.5e9, 4315.8, _R1_MATH + ", DeepSeek-R1-Distill-Qwen-1.5B"),
    AnswerLength(("math500",), 1.0e10, 3198.8, _R1_MATH + ", DeepSeek-R1-Distill-Qwen-7B"),
    AnswerLength(("math500",), 2.0e10, 2944.8, _R1_MATH + ", DeepSeek-R1-Distill-Qwen-14B"),
    AnswerLength(("arith",), 1.0e9, 44.4, _DEMO),
)


def mean_length(benchmark: str, params: int) -> Optional[AnswerLength]:
    """The first row for ``benchmark`` whose size bound holds ``params``; None when none does."""
    return next((r for r in LENGTHS if benchmark in r.benchmarks and params <= r.params_up_to), None)


def expected_tokens(benchmarks: Sequence[tuple[str, int]], params: int, limit: int) -> tuple[float, str]:
    """(mean tokens per answer over ``benchmarks`` = (name, prompts) pairs, weighted by prompts; the basis)."""
    total = prompts = 0.0
    used: list[str] = []
    for name, n in benchmarks:
        row = mean_length(name, params)
        tokens = min(row.tokens, limit) if row else float(limit)
        total, prompts = total + tokens * n, prompts + n
        used.append(f"{name} {tokens:.0f}" + (" (limit)" if row is None else ""))
    mean = total / prompts if prompts else float(limit)
    return mean, f"answers ~{mean:.0f} tokens ({', '.join(used)}; docs/forecast.md lists the sources)"

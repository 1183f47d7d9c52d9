"""The evaluate unit's forecast: expected answer lengths (forecast/answers.py) against hand-weighted means, the
engine dtype 'auto' predicted from the transition, and host RAM apart from GPU memory. No timings."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from grrr_stream.forecast import answers, work
from grrr_stream.sweep.kinds import evaluate
from grrr_stream.sweep.units import Transition


def test_expected_tokens_weighted_by_prompts_and_capped_by_the_limit():
    """math500 at 7B: 3198.8 tokens; aime24 has no figure (the limit). 500 and 30 prompts, limit 4000:
    (500 · 3198.8 + 30 · 4000) / 530; at limit 3000 both are 3000."""
    mean, basis = answers.expected_tokens([("math500", 500), ("aime24", 30)], 7_000_000_000, 4000)
    assert mean == pytest.approx((500 * 3198.8 + 30 * 4000) / 530)
    assert "aime24 4000 (limit)" in basis
    assert answers.expected_tokens([("math500", 500), ("aime24", 30)], 7_000_000_000, 3000)[0] == 3000
    # the size picks the row: 1.5B answers longer than 14B ones
    assert answers.mean_length("math500", 1_500_000_000).tokens > answers.mean_length("math500", 14_000_000_000).tokens
    assert answers.mean_length("math500", 10**12) is None  # beyond every row: the limit


def _facts(kind, method):
    t = Transition("t", "c", "a", "b", kind, method, None)
    return SimpleNamespace(transitions={"t": t}, sft_methods=("SFT", "distillation"))


def _params(dtype):
    return SimpleNamespace(transition="t", options=SimpleNamespace(engine=SimpleNamespace(dtype=dtype)))


@pytest.mark.parametrize(
    "kind, method, want",
    [
        ("cumulative", "SFT", "bfloat16"),
        ("cumulative", "distillation", "bfloat16"),
        ("incremental", "GRPO", "float32"),
        ("cumulative", "PPO", "float32"),
        ("incremental", "SFT", "float32"),
    ],
)
def test_auto_dtype_predicted_from_the_transition(kind, method, want):
    dtype, why = evaluate.engine_dtype(_params("auto"), _facts(kind, method))
    assert dtype == want and "predicted" in why


def test_a_set_dtype_is_kept():
    assert evaluate.engine_dtype(_params("float32"), _facts("cumulative", "SFT")) == ("float32", "")


def test_host_ram_apart_from_the_gpu():
    """7e9 parameters in float32 with a 1 GiB KV cache: on a GPU the host holds the process, vLLM and one
    streamed variant (4 float32 buffers of the largest 4096 × 14336 matrix), not the weights."""
    stream = work.variant_stream_ram([(4096, 14336), (4096, 4096)], largest_tensor=None)
    assert stream == 4 * 4096 * 14336 * 4
    # an embedding larger than those buffers: it and its converted copy
    assert work.variant_stream_ram([(64, 64)], largest_tensor=10**9) == 2 * 10**9
    gpu = work.evaluate_ram(7 * 10**9, 4, 0, stream, engine_on_host=False)
    cpu = work.evaluate_ram(7 * 10**9, 4, 2**30, stream, engine_on_host=True)
    assert gpu == 2 * work.BASELINE_RAM + stream
    assert cpu - gpu == 7 * 10**9 * 4 + 2**30

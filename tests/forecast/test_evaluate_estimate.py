"""The evaluate unit's forecast: expected answer lengths (forecast/answer_lengths.py) against hand-weighted means, the
engine dtype 'auto' predicted from the transition, and host RAM apart from GPU memory. No timings."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from grrr_stream.evaluation.settings import EngineSettings
from grrr_stream.forecast import answer_lengths, work
from grrr_stream.sweep.kinds import evaluate
from grrr_stream.sweep.units import Transition


def test_expected_tokens_weighted_by_prompts_and_capped_by_the_limit():
    """math500 at 7B: 3198.8 tokens; aime24 has no figure (the limit). 500 and 30 prompts, limit 4000:
    (500 · 3198.8 + 30 · 4000) / 530; at limit 3000 both are 3000."""
    mean, basis = answer_lengths.expected_tokens([("math500", 500), ("aime24", 30)], 7_000_000_000, 4000)
    assert mean == pytest.approx((500 * 3198.8 + 30 * 4000) / 530)
    assert "aime24 4000 (limit)" in basis
    assert answer_lengths.expected_tokens([("math500", 500), ("aime24", 30)], 7_000_000_000, 3000)[0] == 3000
    # the size picks the row: 1.5B answers longer than 14B ones
    small, large = (answer_lengths.mean_length("math500", n).tokens for n in (1_500_000_000, 14_000_000_000))
    assert small > large
    assert answer_lengths.mean_length("math500", 10**12) is None  # beyond every row: the limit


def _facts(kind, method, store=None):
    t = Transition("t", "c", "a", "b", kind, method, None)
    dec = {"t": SimpleNamespace(out=str(store))} if store is not None else {}
    return SimpleNamespace(transitions={"t": t}, sft_methods=("SFT", "distillation"), dec=dec)


def _params(dtype):
    engine = EngineSettings(dtype=dtype, max_new_tokens=32)
    return SimpleNamespace(
        transition="t",
        last_step=None,
        variants=("base", "full", "diag", "offnull"),
        options=SimpleNamespace(engine=engine),
    )


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
    dtype, why, source = evaluate.engine_dtype(_params("auto"), _facts(kind, method))
    assert dtype == want and "predicted" in why and source == "predicted"


def test_a_set_dtype_is_kept():
    assert evaluate.engine_dtype(_params("float32"), _facts("cumulative", "SFT")) == ("float32", "", "set")


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Two decomposed transitions whose stores hold their bf16 survival: an RL-sized update (3e-4 of W0), which
    bf16 rounds away, and a large one (0.2 of W0), which survives it."""
    pytest.importorskip("math_verify", reason="the stand-in transition's benchmark needs the eval extra")
    from helpers.stand_in import sums_transition

    from grrr_stream.fixtures.synthetic import Update

    made = {}
    for name, r in (("small", 3e-4), ("large", 0.2)):
        made[name] = sums_transition(
            tmp_path_factory.mktemp(name), update=Update(r_delta=r, plant=(0.3, 0.5, 0.2)), dtype="bfloat16"
        )[2]
    return made


def test_once_decomposed_auto_is_read_from_the_store_not_predicted(stores):
    """An SFT row from the base is predicted bf16, an RL row float32; once the store exists the rule's own choice
    is taken: an RL-sized update float32 even on a row predicted bf16, a large one bf16 on a row predicted
    float32. An unfinished store leaves the prediction."""
    dtype, why, source = evaluate.engine_dtype(_params("auto"), _facts("cumulative", "SFT", stores["small"]))
    assert (dtype, source) == ("float32", "stored") and "diag keeps" in why
    dtype, why, source = evaluate.engine_dtype(_params("auto"), _facts("incremental", "GRPO", stores["large"]))
    assert (dtype, source) == ("bfloat16", "stored")
    unfinished = _facts("incremental", "GRPO", stores["large"].parent / "nowhere")
    assert evaluate.engine_dtype(_params("auto"), unfinished)[2] == "predicted"


def test_the_levers_and_the_bounds_of_a_predicted_dtype():
    """Two evaluations, hours by design and dtype planted: one predicted float32 under the adaptive design, one
    set to bfloat16 under the fixed one. Fixed float32 10 + 8 = 18 h; this config 3 + 4 = 7 h; the dtype takes
    8 − 4 = 4 h (the bfloat16 one; the other runs in float32), the design 10 − 3 = 7 h; the bounds move the
    predicted one only: 7 − 3 + 2 = 6 h and 7 h."""
    from grrr_stream.forecast.summary import lever_lines

    h = 3600.0
    rows = [
        SimpleNamespace(
            seconds=3 * h,
            dtype="float32 predicted",
            design="adaptive",
            alternatives={
                "fixed float32": 10 * h,
                "fixed bfloat16": 6 * h,
                "adaptive float32": 3 * h,
                "adaptive bfloat16": 2 * h,
            },
        ),
        SimpleNamespace(
            seconds=4 * h,
            dtype="bfloat16 set",
            design="fixed",
            alternatives={
                "fixed float32": 8 * h,
                "fixed bfloat16": 4 * h,
                "adaptive float32": 5 * h,
                "adaptive bfloat16": 2.5 * h,
            },
        ),
    ]
    lines = lever_lines(rows)
    assert lines[0] == "evaluations (2): 7.0 h, 0.39 of the fixed design in float32 (18.0 h)"
    assert "the engine dtype 4.0 h (36%), the evaluation design 7.0 h (64%)" in lines[1]
    assert "1 bfloat16 set, 1 float32 predicted" in lines[2] and "between 6.0 h" in lines[2]
    assert "and 7.0 h (every one float32)" in lines[2]


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

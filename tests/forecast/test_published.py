"""The generation model against published vLLM throughput (grrr_stream/forecast/published.py): each row's
forecast / published within the stated bound or explained, the one fitted row at the constant taken from it, and
one row recomputed by hand from the architecture's published sizes. No timings."""

from __future__ import annotations

import pytest

from grrr_stream.forecast import devices, published
from grrr_stream.forecast.shapes import KNOWN


@pytest.mark.parametrize("row", published.ROWS, ids=lambda r: r.label)
def test_each_row_within_the_bound_or_explained(row):
    tok_s, _ = published.forecast_tok_s(row)
    ratio = tok_s / row.tok_s
    assert published.within(ratio) or row.note, f"{row.label}: forecast / published {ratio:.2f} without a note"
    assert row.source.startswith("https://") and row.device in devices.DEVICES and row.model in KNOWN


def test_enough_independent_rows_inside_the_bound():
    inside = [r for r in published.ROWS if not r.fitted and published.within(published.forecast_tok_s(r)[0] / r.tok_s)]
    assert len(inside) >= 3


def test_the_fitted_row_gives_the_constant_back():
    """MBU came from Llama-3.1-8B at one request on an H100: the model reproduces that row's TPOT."""
    (row,) = [r for r in published.ROWS if r.fitted]
    assert published.forecast_tok_s(row)[0] / row.tok_s == pytest.approx(1.0, abs=0.01)


def test_one_row_by_hand():
    """Llama-3-8B: 4096 hidden, 14336 intermediate, 32 layers, 32 heads, 8 KV heads, 128256 vocabulary, untied:
    8,030,261,248 parameters; 2 · 32 · 8 · 128 = 65,536 KV elements a token. bf16 on an A100 40GB at 8 requests
    and 1088 tokens of context: (2 · 8.030e9 + 8 · 1088 · 65536 · 2) B / (1555 GB/s · MBU) a step."""
    params = 4096 * 128256 * 2 + 32 * (4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096) + 4096
    assert KNOWN["meta-llama/Meta-Llama-3-8B"].params() == params
    step = (2.0 * params + 8 * 1088 * 65536 * 2) / (1555e9 * devices.MBU)
    (row,) = [r for r in published.ROWS if r.label == "Llama-3.1-8B bf16, 8 requests"]
    assert published.forecast_tok_s(row)[0] == pytest.approx(8 / step, rel=1e-9)


def test_host_time_of_old_vllm_slows_a_step():
    """vLLM 0.5's published GPU share stretches the step by 1 / 0.38; today's versions by nothing."""
    old = [r for r in published.ROWS if r.vllm.startswith("0.5")][0]
    assert old.gpu_busy() == 0.38
    assert [r for r in published.ROWS if r.vllm.startswith("0.2")][0].gpu_busy() == 1.0

"""The sweep forecast: the flop model against hand-computed counts, the shape sources' fallback chain with no
network, the calibration cache, and `sweep --dry-run`'s forecast for a small local config. No test depends on
this machine's speed: rates are seeded or faked."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from helpers.common import seeded_sweep_yaml

from grrr_stream.cli import entry as cli
from grrr_stream.fixtures.synthetic import TINY, write_model
from grrr_stream.forecast import calibrate as cal
from grrr_stream.forecast import shapes, work
from grrr_stream.sweep.kinds.decompose import OVERHEAD_S


def test_flop_model_against_hand_counts():
    # m=6, n=4 (tall): svd 6·6·16 + 20·64 = 1856; svdvals 2·6·16 + 2·64 = 320;
    # projection 2·6·16 + 2·64 + 4·6·16 = 704; total 2880, 1024 with W0's frame cached
    assert work.decompose_flops((6, 4)) == 2880
    assert work.decompose_flops((4, 6)) == 2880  # orientation does not matter
    assert work.decompose_flops((6, 4), frame_cached=True) == 1024
    assert work.variant_flops((4, 6)) == 4 * 6 * 16
    assert work.generation_flops(10, prompts=3, max_tokens=5, samples=2) == 2 * 10 * 3 * 5 * 2
    # peak RAM: 6 m×n buffers of the largest matrix, plus the process
    assert work.decompose_ram([(6, 4), (2, 2)], 4) == work.BASELINE_RAM + 6 * 24 * 4


@pytest.mark.parametrize(
    "repo, published",
    [
        ("Qwen/Qwen3-14B-Base", 14.8e9),
        ("Qwen/Qwen3-8B-Base", 8.2e9),
        ("meta-llama/Meta-Llama-3-8B", 8.03e9),
        ("mistralai/Mistral-7B-v0.1", 7.24e9),
        ("Qwen/Qwen2.5-Math-1.5B", 1.54e9),
        ("Qwen/Qwen2.5-Math-7B", 7.62e9),
    ],
)
def test_builtin_table_matches_published_parameter_counts(repo, published):
    """The table's shapes against the parameter counts the model cards state (an independent number)."""
    assert shapes.KNOWN[repo].params() == pytest.approx(published, rel=0.01)


def test_builtin_table_matrices_qwen3_14b():
    mats = shapes.KNOWN["Qwen/Qwen3-14B-Base"].matrices()
    assert len(mats) == 40 * 7
    assert set(mats) == {(5120, 5120), (1024, 5120), (17408, 5120), (5120, 17408)}


def test_fallback_chain_without_network(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))  # nothing cached
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # a closed port: refused at once
    t = time.perf_counter()
    assert not shapes.hub_reachable(timeout=2)
    assert shapes.from_hub("Qwen/Qwen3-14B-Base", None, timeout=2) is None
    known = shapes.hub_model("Qwen/Qwen3-14B-Base", None, online=True)  # the Hub fails: the built-in table
    unknown = shapes.hub_model("someone/not-in-the-table", None, online=True)
    assert time.perf_counter() - t < 15
    assert known.where == "built-in table" and known.download == known.params * 2
    assert unknown.where == "unknown" and unknown.shapes is None and unknown.download is None
    # local headers: a checkpoint on disk gives its own shapes and nothing to download
    folder = write_model(tmp_path / "m", TINY, family="qwen2", dtype="float32", seed=0)
    local = shapes.from_checkpoint(folder)
    expected = shapes.Arch(TINY.hidden, TINY.intermediate, TINY.layers, TINY.heads, TINY.kv_heads, TINY.vocab)
    assert local.where == "local headers" and local.download == 0
    assert sorted(local.shapes) == sorted(expected.matrices())


def _fake_timers(calls: list, seconds_per_gflop: float = 1.0):
    def decompose(shape):
        calls.append(("decompose", shape))
        return work.decompose_flops(shape) / 1e9 * seconds_per_gflop

    def gemm(shape):
        calls.append(("gemm", shape))
        return 2.0 * shape[0] * shape[1] ** 2 / 1e9 * seconds_per_gflop

    return {"decompose": decompose, "gemm": gemm, "device": lambda: "fake"}


def test_calibration_is_cached(tmp_path):
    calls: list = []
    cache = tmp_path / "calibration.json"
    first = cal.calibrate((300, 200), timers=_fake_timers(calls), cache=cache)
    assert not first.cached and first.shape == (300, 200)  # fits the budget at 1 GFLOP/s: measured there
    assert first.decompose_flops_s == pytest.approx(1e9) and first.gemm_flops_s == pytest.approx(1e9)
    n = len(calls)
    again = cal.calibrate((300, 200), timers=_fake_timers(calls), cache=cache)
    assert again.cached and len(calls) == n and again.decompose_flops_s == first.decompose_flops_s
    assert cal.calibrate((30, 20), timers=_fake_timers(calls), cache=cache).cached is False  # another shape
    assert len(json.loads(cache.read_text())) == 2


def test_calibration_scales_a_shape_too_large_for_the_budget(tmp_path):
    calls: list = []
    big = (17408, 5120)  # ~4.6 TFLOP: hours at 1 GFLOP/s, so a scaled copy is measured
    rates = cal.calibrate(big, timers=_fake_timers(calls), cache=tmp_path / "c.json")
    m, n = rates.shape
    assert m < big[0] and work.decompose_flops(rates.shape) <= cal.BUDGET_S * 1e9
    assert m / n == pytest.approx(big[0] / big[1], rel=0.02)  # the same aspect ratio


def test_dry_run_prints_the_forecast(tmp_path, monkeypatch, capsys):
    """A local pair of TINY models: per-unit and total time from the seeded rate, by hand."""
    for name, seed in (("base", 0), ("post", 1)):
        write_model(tmp_path / name, TINY, family="qwen2", dtype="float32", seed=seed)
    seeded_sweep_yaml(tmp_path, tmp_path, monkeypatch)
    assert cli.main(["sweep", str(tmp_path / "s.yaml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    # per layer (m, n tall): q, o (64, 64); k, v (64, 32); gate, up, down (160, 64); each 14mn² + 24n³
    per_layer = (
        2 * (14 * 64 * 64**2 + 24 * 64**3) + 2 * (14 * 64 * 32**2 + 24 * 32**3) + 3 * (14 * 160 * 64**2 + 24 * 64**3)
    )
    seconds = 2 * per_layer / 1e6 + OVERHEAD_S  # two layers at the seeded 1 MFLOP/s, plus the per-transition constant
    line = next(x for x in out.splitlines() if x.strip().startswith("decompose/base-to-post"))
    from grrr_stream.progress import fmt_seconds

    assert f"time {fmt_seconds(seconds):>7}" in line and "14 matrices (local headers)" in line
    assert "download       0 B" in line
    assert "times assume seeded" in out and "(cached)" in out
    assert "shapes and downloads from: local headers" in out
    assert not (tmp_path / "w").exists()


def test_calibration_keeps_the_best_rate_when_a_step_stalls(tmp_path):
    """A step slowed by other work (here the largest, 10× slower) does not set the rate."""
    calls: list = []
    timers = _fake_timers(calls, seconds_per_gflop=0.01)  # 100 GFLOP/s: both ladder steps fit the budget
    plain = timers["decompose"]
    timers["decompose"] = lambda shape: plain(shape) * (10.0 if shape == (1200, 800) else 1.0)
    rates = cal.calibrate((1200, 800), timers=timers, cache=tmp_path / "c.json")
    assert rates.shape == (600, 400) and rates.decompose_flops_s == pytest.approx(1e11)


def test_channel_work_model_against_hand_counts():
    # 1 intact pass + outliers zeroed + 3 random seeds = 5 passes of 2 × 10 parameters × 3 × 4 tokens
    assert work.calibration_passes(None) == 1 and work.calibration_passes((0, 1, 2)) == 5
    assert work.calibration_flops(10, 3, 4, (0, 1, 2)) == 5 * 2 * 10 * 12
    assert work.calibration_flops(10, 3, 4, None) == 2 * 10 * 12
    logits = 3 * 2 * 4 * 100 * 4  # batch 2 × 4 tokens × vocab 100, float32, about three arrays
    assert (
        work.calibration_ram(1000, 400, 100, batch_size=2, seq_len=4, budget=None) == work.BASELINE_RAM + 4000 + logits
    )  # in memory
    assert (
        work.calibration_ram(1000, 400, 100, batch_size=2, seq_len=4, budget=1000)
        == work.BASELINE_RAM + 1000 + 400 + 64 * 2**20 + logits
    )  # offloaded: budget + largest block
    # the embedding (100 × 5 × 4 B = 2000) is over the budget: no block stays resident
    assert (
        work.calibration_ram(1000, 400, 100, batch_size=2, seq_len=4, budget=1000, hidden=5)
        == work.BASELINE_RAM + 400 + 64 * 2**20 + logits
    )


def _seeded_rates():
    from grrr_stream.forecast.calibrate import Rates

    return Rates("seeded", (160, 64), 1e6, 1e6, 1.0, forward_flops_s=1e9, null_cells_s=1e7)


def test_channel_units_get_a_time_and_memory(tmp_path, monkeypatch):
    """A local pair of TINY models with channels on: the channels unit's passes at the seeded CPU forward rate
    and the channel-stats unit's null at the seeded cell rate, counted by hand from the checkpoint's tensors."""
    from safetensors import safe_open

    from grrr_stream.sweep import forecast as sf
    from grrr_stream.sweep import plan_sweep
    from grrr_stream.sweep.config import SweepConfig
    from grrr_stream.sweep.kinds import channel_stats as channel_stats_kind
    from grrr_stream.sweep.kinds import channels as channels_kind

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name, seed in (("base", 0), ("post", 1)):
        write_model(tmp_path / name, TINY, family="qwen2", dtype="float32", seed=seed)
    params = 0
    for f in (tmp_path / "base").glob("*.safetensors"):
        with safe_open(str(f), "np") as st:
            params += sum(int(np.prod(st.get_slice(k).get_shape())) for k in st.keys())
    cfg = {
        "name": "t",
        "workdir": str(tmp_path / "w"),
        "chains": [
            {
                "name": "c",
                "base": {"id": "base", "source": str(tmp_path / "base")},
                "models": [{"id": "post", "source": str(tmp_path / "post")}],
            }
        ],
        "decomposition": {"device": "cpu"},
        "evaluation": {"enabled": False},
        "tracking": {"enabled": False},
        "channels": {
            "enabled": True,
            "sequences": 8,
            "seq_len": 16,
            "batch_size": 2,
            "ablation": True,
            "resamples": 100,
        },
    }
    fc = sf.forecast_plan(plan_sweep(SweepConfig.model_validate(cfg)), online=False, rates=_seeded_rates())
    by = {u.unit: u for u in fc.units}
    ch = by["channels/base"]
    flops = 5 * 2 * params * 8 * 16
    assert ch.flops == flops
    assert ch.seconds == pytest.approx(
        channels_kind.START_S + channels_kind.IMPORT_S + flops / 1e9 + 5 * 4 * channels_kind.FORWARD_CALL_S
    )  # 5 passes × 4 batches of 2
    assert ch.ram == work.BASELINE_RAM + params * 4 + 3 * 2 * 16 * TINY.vocab * 4  # fits 1 GiB: in memory
    st = by["channel-stats/base-to-post"]
    cells = 2 * 100 * TINY.hidden * 10 + 100 * 2 * 7  # null: draws × channels × 10 groups, twice; bootstrap
    assert st.seconds == pytest.approx(channel_stats_kind.START_S + cells / 1e7)
    assert st.ram > work.BASELINE_RAM


def test_the_demo_forecasts_its_channel_units(tmp_path, monkeypatch):
    """configs/demo.yaml (channels on, the tiny chain not trained yet: its settings' shapes): every channels
    and channel-stats unit gets a finite time and memory."""
    import math
    from pathlib import Path

    from grrr_stream.sweep import forecast as sf
    from grrr_stream.sweep import plan_sweep
    from grrr_stream.sweep.config import load_sweep_config

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = load_sweep_config(Path(__file__).resolve().parents[2] / "configs" / "demo.yaml", workdir=tmp_path / "w")
    fc = sf.forecast_plan(plan_sweep(cfg), online=False, rates=_seeded_rates())
    kinds = [u for u in fc.units if u.kind in ("channels", "channel-stats")]
    # per chain (3): 4 models (base, sft, and the post models rl, sibling) and 4 transitions
    assert {u.kind for u in kinds} == {"channels", "channel-stats"} and len(kinds) == 3 * (4 + 4)
    for u in kinds:
        assert u.seconds is not None and math.isfinite(u.seconds) and u.seconds > 0, u
        assert u.ram is not None and u.ram > work.BASELINE_RAM


def test_forward_rate_is_measured_near_the_largest_matrix(tmp_path):
    """The CPU forward product: the sweep's largest matrix by 256 token rows, halved only while one product
    exceeds the cap; the timed shape reaches the rate (a seeded timer: 1 GFLOP/s)."""
    assert cal.forward_shape((1536, 576)) == (1536, 576)  # 0.45 GFLOP: as it is
    m, n = cal.forward_shape((17408, 5120))  # 45.6 GFLOP: halved
    assert 2 * 256 * m * n <= cal.FORWARD_MAX_FLOPS < 2 * 256 * (2 * m) * (2 * n)
    assert m / n == pytest.approx(17408 / 5120, rel=0.01)
    calls: list = []
    timers = _fake_timers(calls)
    timers["forward"] = lambda shape: (calls.append(("forward", shape)), 2 * 256 * shape[0] * shape[1] / 1e9)[1]
    rates = cal.calibrate((1536, 576), timers=timers, cache=tmp_path / "c.json")
    assert ("forward", (1536, 576)) in calls and rates.forward_flops_s == pytest.approx(1e9)
    assert rates.null_cells_s > 0


def test_decompose_ram_counts_the_lanes():
    """Several lanes hold LANE_BUFFERS of the largest matrix each; one lane 6 (the model before lanes). Shapes
    whose lanes would pass LANES_RAM run one lane, so a 14B forecast is unchanged on any core count."""
    from grrr_stream.decompose.streaming import LANE_BUFFERS

    small = [(1536, 576), (576, 576)]
    assert work.decompose_ram(small, 4, cores=1) == work.BASELINE_RAM + 6 * 1536 * 576 * 4
    assert work.decompose_ram(small, 4, cores=2) == work.BASELINE_RAM + 2 * LANE_BUFFERS * 1536 * 576 * 4
    big = [(17408, 5120)]
    assert work.decompose_ram(big, 4, cores=16) == work.decompose_ram(big, 4, cores=1)

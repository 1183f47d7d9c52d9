"""Issue 34's forecast for a device: the generation model against hand-computed cases, the CPU's nominal
peak from a stubbed /proc/cpuinfo, the calibration's refusals and load handling with stubbed timers and load
averages, the downloads table when the Hub cannot be asked (an offline stub), and `sweep configs/paper.yaml
--dry-run --forecast-for h100-80g`. Nothing here depends on this machine's speed."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from grrr_stream.cli import entry as cli
from grrr_stream.forecast import calibrate as cal
from grrr_stream.forecast import devices, downloads, shapes, target, work
from grrr_stream.forecast.generation import generation

ROOT = Path(__file__).resolve().parents[2]
TOY = devices.Device(
    "toy",
    "gpu",
    bf16_tflops=100.0,
    fp32_tflops=10.0,
    bandwidth_gbs=1000.0,
    memory_gib=80.0,
    svd_tflops=0.1,
    svd_basis="guess",
    source="test",
    mbu=0.55,
)


def test_generation_bandwidth_bound_by_hand():
    """1e9 float32 parameters (4e9 B), 1000 B of KV per token, 10 sequences of 100 tokens, max_num_seqs 4.
    Step at batch 4, mean context 50: memory (4e9 + 4·50·1000) B / (1000 GB/s · 0.55) = 7.273091 ms; compute
    4 · 2e9 / (10 TFLOP/s · 0.5) = 1.6 ms: bandwidth-bound. Two full waves of 100 steps, then 2 sequences
    (7.272909 ms a step): 200 · 7.273091 + 100 · 7.272909 ms = 2.181909 s."""
    g = generation(
        params=10**9,
        kv_elems=250,
        sequences=10,
        max_tokens=100,
        device=TOY,
        dtype="float32",
        itemsize=4,
        max_num_seqs=4,
        prompt_tokens=0,
    )
    assert g.batch == 4 and g.regime == "bandwidth-bound"
    assert g.seconds == pytest.approx(2.181909, rel=1e-6)
    assert g.tokens_per_s == pytest.approx(4 / 7.273091e-3, rel=1e-6)


def test_generation_compute_bound_by_hand():
    """The same model, 1000 sequences at once: compute 1000 · 2e9 / 5e12 = 0.4 s a step against memory
    (4e9 + 1000·50·1000) / 5.5e11 = 7.36 ms: compute-bound, 100 steps = 40 s, 2500 tokens/s."""
    g = generation(
        params=10**9,
        kv_elems=250,
        sequences=1000,
        max_tokens=100,
        device=TOY,
        dtype="float32",
        itemsize=4,
        max_num_seqs=1000,
        prompt_tokens=0,
    )
    assert g.regime == "compute-bound" and g.seconds == pytest.approx(40.0) and g.tokens_per_s == pytest.approx(2500)
    # bf16: ten times the compute rate and half the bytes: 1000 · 2e9 / 5e13 = 40 ms against (2e9 + 1000·50·500)
    # / 5.5e11 = 3.68 ms
    g16 = generation(
        params=10**9,
        kv_elems=250,
        sequences=1000,
        max_tokens=100,
        device=TOY,
        dtype="bfloat16",
        itemsize=2,
        max_num_seqs=1000,
        prompt_tokens=0,
    )
    assert g16.seconds == pytest.approx(4.0)


def test_generation_batch_limited_by_the_kv_cache_and_refused_when_nothing_fits():
    """8 GiB × 0.9 − 4e9 B of weights − 2 GiB reserve = 1.431e9 B of cache; a sequence of 1000 tokens at
    1e6 B a token takes 1e9 B: one sequence at a time. With 4 GiB nothing fits."""
    small = devices.Device("s", "gpu", 100.0, 10.0, 1000.0, 8.0, 0.1, "guess", "test")
    g = generation(
        params=10**9,
        kv_elems=250_000,
        sequences=10,
        max_tokens=1000,
        device=small,
        dtype="float32",
        itemsize=4,
        prompt_tokens=0,
    )
    assert g.batch == 1 and g.kv_cache == int(8 * 2**30 * 0.9) - 4 * 10**9 - 2 * 2**30
    tiny = devices.Device("t", "gpu", 100.0, 10.0, 1000.0, 4.0, 0.1, "guess", "test")
    none = generation(
        params=10**9, kv_elems=250, sequences=10, max_tokens=100, device=tiny, dtype="float32", itemsize=4
    )
    assert none.seconds is None and "does not fit" in none.why


def test_device_table_against_datasheets():
    """A few datasheet figures written out here (dense, per GPU), and the names the flag accepts."""
    h100 = devices.resolve("H100-80G")
    assert (h100.bf16_tflops, h100.fp32_tflops, h100.bandwidth_gbs, h100.memory_gib) == (989.5, 67.0, 3350.0, 80.0)
    assert devices.resolve("h200").bandwidth_gbs == 4800.0 and devices.resolve("h200").memory_gib == 141.0
    assert devices.resolve("a100-80g").fp32_tflops == 19.5
    assert "guess" in h100.svd_basis
    with pytest.raises(ValueError, match="choose one of"):
        devices.resolve("tpu-v5")


def test_cpu_peak_from_a_stubbed_cpuinfo():
    info = "processor\t: 0\ncpu MHz\t\t: 2500.000\nflags\t\t: fpu sse2 avx2 fma\n"
    peak, how = devices.cpu_peak_flops(info, cores=4)
    assert peak == pytest.approx(4 * 2.5e9 * 32) and "32 FLOP/cycle" in how  # AVX2: two 256-bit FMA units
    peak512, _ = devices.cpu_peak_flops(info.replace("avx2", "avx2 avx512f"), cores=1)
    assert peak512 == pytest.approx(2.5e9 * 64)


def test_target_decomposition_splits_svd_and_products():
    """On a target, the SVD part at the SVD rate and the products at the product rate: (6,4) tall has
    SVD + singular values 1856 + 320 = 2176 flops, products 704 (test_forecast's hand counts)."""
    rates = cal.Rates("t", (0, 0), 1.0, 2.0, 0.0, svd_flops_s=1.0, target="h100-80g")
    assert work.decompose_split((6, 4)) == (2176, 704)
    assert target.decompose_seconds([(6, 4)], rates) == pytest.approx(2176 + 704 / 2)
    assert target.decompose_seconds([(6, 4)], rates, frame_cached=True) == pytest.approx(320 + 704 / 2)


def _stub_timers(rate: float, slow=lambda: 1.0, expected=None) -> dict:
    """Timers that run at ``rate`` FLOP/s, each call slowed by ``slow()`` (other work on the machine)."""
    return {
        "decompose": lambda s: work.decompose_flops(s) / rate * slow(),
        "gemm": lambda s: 2.0 * s[0] * s[1] ** 2 / rate * slow(),
        "forward": lambda s: 2.0 * 256 * s[0] * s[1] / rate * slow(),
        "null": lambda: 0.01,
        "copy": lambda: (2**27 / (rate / 10) * slow(), 2**27),
        "device": lambda: "stub",
        "load": lambda: (0.0, 0.0, 0.0),
        "expected": lambda d: expected,
    }


def test_calibration_refuses_a_rate_off_by_more_than_10x(tmp_path):
    """A stubbed machine measuring 1 GFLOP/s where the device's figures give 100: refused, the figure used,
    and the reason in the notes; a rate 20× above is refused too; one 5× below on a quiet machine is kept."""
    exp = {"gemm": 1e11, "forward": 1e11, "decompose": 1e11, "bandwidth": 1e10}
    low = cal.calibrate((512, 256), timers=_stub_timers(1e9, expected=exp), cache=tmp_path / "a.json")
    assert low.gemm_flops_s == 1e11 and low.decompose_flops_s == 1e11
    assert any("product rate 1 GFLOP/s refused" in n and "more than 10×" in n for n in low.notes)
    high = cal.calibrate((512, 256), timers=_stub_timers(2e12, expected=exp), cache=tmp_path / "b.json")
    assert high.gemm_flops_s == 1e11 and any("refused" in n for n in high.notes)
    kept = cal.calibrate((512, 256), timers=_stub_timers(2e10, expected=exp), cache=tmp_path / "c.json")
    assert kept.gemm_flops_s == pytest.approx(2e10) and not any("product" in n for n in kept.notes)


def test_load_detection_with_a_stubbed_loadavg():
    assert cal.load_state(lambda: (3.0, 2.0, 1.0), cores=2) == (3.0, 2, True)
    assert cal.load_state(lambda: (0.4, 2.0, 1.0), cores=2) == (0.4, 2, False)
    assert cal.load_state(lambda: (5.0, 2.0, 1.0), cores=16)[2] is False


def _paper_like_unit_seconds(rates) -> float:
    """A 1.5B transition's decomposition and its evaluation (12 variants × 1517 prompts × 3000 tokens) on
    the rates' device, as the sweep's forecast computes them."""
    arch = shapes.KNOWN["Qwen/Qwen2.5-Math-1.5B"]
    engine = type("E", (), {"dtype": "float32", "gpu_memory_utilization": 0.9, "cpu_kv_cache_gib": 1.0})()
    gen, build = target.evaluate_parts(
        params=arch.params(),
        kv_elems=arch.kv_elems(),
        attn_elems=None,
        shapes=arch.matrices(),
        variants=12,
        sequences=1517,
        max_tokens=3000,
        engine=engine,
        rates=rates,
    )
    return target.decompose_seconds(arch.matrices(), rates) + 12 * gen.seconds + build


def test_a_loaded_machine_forecasts_within_3x_of_a_quiet_one(tmp_path):
    """The same stubbed machine (250 GFLOP/s; its figures give 166 for products, 83 for decompositions)
    measured quiet, then loaded (load 12 on 2 cores, each timed call 3-40× slower at random, as OpenMP
    threads waiting for busy cores make it): the loaded forecast stays within 3× of the quiet one."""
    exp = {"gemm": 1.66e11, "forward": 1.66e11, "decompose": 8.3e10, "bandwidth": 2e10}
    quiet = _stub_timers(2.5e11, expected=exp)
    quiet["load"] = lambda: (0.1, 0.1, 0.1)
    rng = random.Random(0)
    loaded = _stub_timers(2.5e11, slow=lambda: rng.uniform(3.0, 40.0), expected=exp)
    loaded["load"] = lambda: (12.0, 10.0, 8.0)
    q = cal.calibrate((8960, 1536), timers=quiet, cache=tmp_path / "q.json")
    lo = cal.calibrate((8960, 1536), timers=loaded, cache=tmp_path / "l.json")
    assert lo.load == 12.0 and any("under load" in n or "refused" in n for n in lo.notes)
    for r in (q, lo):  # the stub's 'stub' device has no table row: a CPU's cores for the KV-less generation
        object.__setattr__(r, "cores", 2)
    ratio = _paper_like_unit_seconds(lo) / _paper_like_unit_seconds(q)
    assert 1.0 / 3.0 <= ratio <= 3.0
    # without the load rules (the raw best of the loaded repeats), the forecast would be off by more than 3×
    raw = cal.calibrate((8960, 1536), timers={**loaded, "expected": lambda d: None}, cache=tmp_path / "r.json")
    object.__setattr__(raw, "cores", 2)
    assert _paper_like_unit_seconds(raw) / _paper_like_unit_seconds(q) > 3.0


def test_downloads_table_covers_the_paper_ids():
    """Every Hub id of configs/paper.yaml (and PRIME-Zero, which issue 34 adds) has a stored dtype; the one
    published size (DeepScaleR, float32, 7.1 GB) agrees with parameters × 4 B of its untied architecture."""
    cfg = yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())
    ids = {m["source"] for c in cfg["chains"] for m in [c["base"], *c["models"]]}
    ids.add("PRIME-RL/Eurus-2-7B-PRIME-Zero")
    assert not ids - set(downloads.TABLE) and not ids - set(shapes.KNOWN)
    arch = shapes.KNOWN["agentica-org/DeepScaleR-1.5B-Preview"]
    untied = arch.params() + arch.vocab * arch.hidden
    assert untied * 4 == pytest.approx(7.1e9, rel=0.01)
    assert [r for r, s in downloads.TABLE.items() if s.basis == "published"] == ["agentica-org/DeepScaleR-1.5B-Preview"]


class _OfflineHfApi:
    """huggingface_hub.HfApi on a machine without network: every call fails as the real one does."""

    def model_info(self, *a, **k):
        raise ConnectionError("offline stub: the Hub is unreachable")

    get_safetensors_metadata = model_info


def test_downloads_table_used_when_the_hub_is_unreachable(monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", _OfflineHfApi)
    monkeypatch.setattr(shapes, "from_hf_cache", lambda repo, rev: None)
    facts = shapes.hub_model("agentica-org/DeepScaleR-1.5B-Preview", None, online=True)
    assert facts.where == "built-in table" and facts.download == 7_100_000_000
    assert any("published" in n for n in facts.notes)
    r1 = shapes.hub_model("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", None, online=True)
    arch = shapes.KNOWN["deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"]
    assert r1.download == (arch.params() + arch.vocab * arch.hidden) * 2  # untied, bf16: an estimate
    assert any("estimate" in n for n in r1.notes)


def test_hub_sizes_win_when_the_hub_answers(monkeypatch):
    """A stub Hub answering with two shards and one header: its sizes, not the table's."""
    import huggingface_hub

    class Sibling:
        def __init__(self, name, size):
            self.rfilename, self.size = name, size

    class Tensor:
        def __init__(self, shape, dtype="F32"):
            self.shape, self.dtype = shape, dtype

    class Answering:
        def model_info(self, *a, **k):
            return type(
                "I",
                (),
                {"siblings": [Sibling("a.safetensors", 5), Sibling("b.safetensors", 7), Sibling("README.md", 100)]},
            )()

        def get_safetensors_metadata(self, *a, **k):
            fm = type(
                "F",
                (),
                {
                    "tensors": {
                        "model.layers.0.self_attn.k_proj.weight": Tensor((4, 8)),
                        "model.embed_tokens.weight": Tensor((10, 8)),
                    }
                },
            )()
            return type("M", (), {"files_metadata": {"a.safetensors": fm}})()

    monkeypatch.setattr(huggingface_hub, "HfApi", Answering)
    facts = shapes.hub_model("agentica-org/DeepScaleR-1.5B-Preview", None, online=True)
    assert facts.where == "hub" and facts.download == 12 and facts.kv_elems == 4


def test_dry_run_forecast_for_h100_on_paper_yaml(tmp_path, monkeypatch, capsys):
    """The paper's sweep forecast for one H100: a total in hours and its parts, no calibration here."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("GRRR_STREAM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(shapes, "from_hf_cache", lambda repo, rev: None)
    from grrr_stream.sweep import forecast as sweep_forecast

    monkeypatch.setattr(sweep_forecast, "calibrate", lambda *a, **k: pytest.fail("a target needs no calibration"))
    # the other GPUs' line: one of them is enough here (each is a whole forecast of the 123 units)
    monkeypatch.setattr(devices, "DEVICES", {k: devices.DEVICES[k] for k in ("h100-80g", "h200")})
    assert (
        cli.main(
            [
                "sweep",
                str(ROOT / "configs" / "paper.yaml"),
                "--workdir",
                str(tmp_path / "w"),
                "--dry-run",
                "--forecast-for",
                "h100-80g",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("on h100-80g:"))
    hours = float(line.split(":")[1].split(" h ")[0].replace(",", ""))
    assert 50 < hours < 5000  # one GPU, every answer to 3000 tokens: hundreds of hours, not millions
    assert "decompositions" in line and "evaluations" in line
    assert "largest GPU memory" in out and "downloads of" in out and "published size" in out
    assert "batch 256, compute-bound" in out  # a 1.5B model in float32 fills vLLM's default batch
    assert "upper bound every answer to 3000" in out and "math500 2945" in out  # 14B: R1-distill-14B's MATH mean
    # on a GPU the host holds no weights: the largest host RAM is a streamed variant and the process (14B: < 8 GiB)
    ram = next(x for x in out.splitlines() if "largest RAM" in x).split("largest RAM")[1].split(",")[0].split()
    assert float(ram[0]) < 8 and ram[1] == "GiB"
    assert next(x for x in out.splitlines() if x.strip().startswith("on h200:"))
    assert not (tmp_path / "w").exists()
    # both designs: each evaluate unit's line gives the adaptive design's time beside the fixed one's, less
    units = [x for x in out.splitlines() if x.strip().startswith("evaluate/")]
    assert len(units) == 28 and all("the adaptive design instead:" in x and "adaptive ±2 points" in x for x in units)
    for x in units:
        fixed = x.split(" time ")[1].split("(")[0].strip()
        other = x.split("the adaptive design instead: ")[1].split(")")[0]
        hours = lambda t: float(t.split()[0]) if t.endswith(" h") else _clock(t)  # noqa: E731
        assert hours(other) < hours(fixed)


def _clock(text: str) -> float:
    """'4h50m' or '22m41s' in hours."""
    import re

    h, m, s = (re.search(rf"(\d+){u}", text) for u in ("h", "m", "s"))
    return sum(int(g.group(1)) / d for g, d in ((h, 1), (m, 60), (s, 3600)) if g)


def test_forecast_for_an_unknown_device_exits_2(tmp_path, capsys):
    assert cli.main(["sweep", str(ROOT / "configs" / "paper.yaml"), "--dry-run", "--forecast-for", "tpu"]) == 2
    assert "choose one of" in capsys.readouterr().err


def test_a_calibration_on_that_gpu_replaces_the_svd_guess():
    """A cache entry measured on an H100 node (any dry run there writes one): its decomposition rate is the
    H100's SVD rate, and the notes say measured, not guess; an A100 entry does not count for an H100."""
    cache = {
        "v7|cuda (NVIDIA H100 80GB HBM3)|torch 2.5|8960x1536": {
            "device": "cuda (NVIDIA H100 80GB HBM3)",
            "decompose_flops_s": 2.0e12,
        },
        "v7|cuda (NVIDIA A100-SXM4-80GB)|torch 2.5|8960x1536": {
            "device": "cuda (NVIDIA A100-SXM4-80GB)",
            "decompose_flops_s": 9.0e12,
        },
    }
    r = target.rates_for("h100-80g", cache)
    assert r.svd_flops_s == pytest.approx(2.0e12) and "measured" in r.notes[0] and "guess" not in r.notes[0]
    guess = target.rates_for("h100-80g", {})
    assert guess.svd_flops_s == pytest.approx(0.67e12) and "guess" in guess.notes[0]


def test_tensor_parallel_engines_add_the_gpus_up():
    """A 14B float32 model does not fit one 40 GB A100; with tensor_parallel_size 2 it does."""
    arch = shapes.KNOWN["Qwen/Qwen3-14B-Base"]
    rates = target.rates_for("a100-40g", {})

    def gen(tp):
        engine = type("E", (), {"dtype": "float32", "tensor_parallel_size": tp})()
        return target.evaluate_parts(
            params=arch.params(),
            kv_elems=arch.kv_elems(),
            attn_elems=None,
            shapes=arch.matrices()[:7],
            variants=1,
            sequences=100,
            max_tokens=3000,
            engine=engine,
            rates=rates,
        )[0]

    assert gen(1).seconds is None and gen(2).seconds is not None and gen(2).batch >= 1

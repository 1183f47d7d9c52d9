"""A sweep that reads two tiny chains: ``tinychain:NAME`` is the ``tinychain`` section's chain, ``tinychain:seedN/NAME``
seed N's, each made by a generate unit of its own; every chain is evaluated on the section's benchmark."""

from __future__ import annotations

from pathlib import Path

import pytest

from grrr_stream.errors import ConfigError
from grrr_stream.sweep import plan_sweep
from grrr_stream.sweep.config import SweepConfig
from grrr_stream.sweep.kinds.generate import chain_of

pytestmark = pytest.mark.timeout(120)


def _config(tmp_path: Path, sources: dict[str, str], *, seed: int = 0, bench: bool = True) -> SweepConfig:
    return SweepConfig.model_validate(
        {
            "name": "two-chains",
            "workdir": str(tmp_path / "w"),
            "tinychain": {"seed": seed},
            "chains": [
                {
                    "name": "a",
                    "base": {"id": "a0", "source": sources["a0"]},
                    "models": [{"id": "a1", "source": sources["a1"], "method": "SFT"}],
                },
                {
                    "name": "b",
                    "base": {"id": "b0", "source": sources["b0"]},
                    "models": [{"id": "b1", "source": sources["b1"], "method": "SFT"}],
                },
            ],
            "variants": {"transitions": "all", "names": ["full", "offnull"]},
            "evaluation": {"enabled": bench, "benchmarks": ["arith"], "bench_dir": "tinychain"},
            "tracking": {"enabled": False},
        }
    )


TWO = {"a0": "tinychain:base", "a1": "tinychain:sft", "b0": "tinychain:seed1/base", "b1": "tinychain:seed1/sft"}


def test_a_source_names_its_chain_by_seed():
    assert chain_of("sft", 0) == (0, "sft")
    assert chain_of("sft", 3) == (3, "sft")  # the section's seed
    assert chain_of("seed1/rl", 0) == (1, "rl")
    assert chain_of("seed12/base", 1) == (12, "base")
    for bad in ("seedx/sft", "1/sft", "seed1/x/sft", "seed-1/sft", "/sft"):
        with pytest.raises(ValueError, match="tinychain:seedN/NAME"):
            chain_of(bad, 0)


def test_each_chain_has_its_unit_and_the_benchmark_is_the_sections(tmp_path):
    plan = plan_sweep(_config(tmp_path, TWO))
    units = {u.id: u for u in plan.units}
    gen0, gen1 = units["generate/tinychain"], units["generate/tinychain-seed1"]
    assert (gen0.params.seed, gen1.params.seed) == (0, 1)
    assert Path(gen0.out).name == "seed0" and Path(gen1.out).name == "seed1"
    assert "copy the shipped" in gen1.label  # the package ships seed 1 too
    dec_a, dec_b = units["decompose/a0-to-a1"], units["decompose/b0-to-b1"]
    assert dec_a.deps == ("generate/tinychain",) and dec_b.deps == ("generate/tinychain-seed1",)
    assert dec_b.params.base == str(Path(gen1.out) / "base") and dec_b.params.post == str(Path(gen1.out) / "sft")
    assert dec_b.params.base_id == {"generated": gen1.key, "model": "base"}
    # both chains' folders are named base, sft: the runs in MLflow are named by the model ids
    assert (dec_a.params.label, dec_b.params.label) == ("a0 → a1", "b0 → b1")
    assert dec_b.params.config(dec_b.out).label == "b0 → b1"
    from grrr_stream.tracking.runs import transition_name

    manifest = {"base": dec_b.params.base, "post": dec_b.params.post}
    assert transition_name(manifest) == "base → sft"  # a store written without a label: its folders' names
    assert transition_name({**manifest, "label": "b0 → b1"}) == "b0 → b1"
    # both chains' evaluations read seed 0's benchmark (its problems are held out from every seed's training)
    for tid in ("a0-to-a1", "b0-to-b1"):
        ev = units[f"evaluate/{tid}"]
        assert "generate/tinychain" in ev.deps and ev.params.bench_dir == str(Path(gen0.out) / "benchmarks")
    # the section's chain keeps its unit id and key whatever other chains the sweep reads
    alone = plan_sweep(_config(tmp_path, {**TWO, "b0": "tinychain:base", "b1": "tinychain:sibling"}))
    assert {u.id: u.key for u in alone.units}["generate/tinychain"] == gen0.key
    assert not any(u.id == "generate/tinychain-seed1" for u in alone.units)
    # seedN/ naming the section's own seed is that chain, not a second unit
    same = plan_sweep(_config(tmp_path, {**TWO, "b0": "tinychain:seed0/base", "b1": "tinychain:seed0/sft"}))
    assert [u.id for u in same.units if u.kind == "generate"] == ["generate/tinychain"]


def test_a_chain_read_only_for_its_benchmark_still_has_its_unit(tmp_path):
    only1 = {m: s.replace("tinychain:", "tinychain:seed1/") for m, s in TWO.items() if m.startswith("a")}
    only1 |= {"b0": "tinychain:seed1/sibling", "b1": "tinychain:seed1/rl"}
    plan = plan_sweep(_config(tmp_path, only1))
    made = sorted(u.id for u in plan.units if u.kind == "generate")
    assert made == ["generate/tinychain", "generate/tinychain-seed1"]
    no_bench = plan_sweep(_config(tmp_path, only1, bench=False))
    assert [u.id for u in no_bench.units if u.kind == "generate"] == ["generate/tinychain-seed1"]


def test_a_bad_tinychain_source_names_its_model(tmp_path):
    with pytest.raises(ConfigError) as e:
        plan_sweep(_config(tmp_path, {**TWO, "b1": "tinychain:seed1/dpo", "a1": "tinychain:seedone/sft"}))
    msg = str(e.value)
    assert "model b1" in msg and "'dpo'" in msg and "model a1" in msg and "tinychain:seedN/NAME" in msg

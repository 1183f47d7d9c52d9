"""Every shipped config validates (a sweep config also plans, offline), and its first line says how to run it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grrr_stream.config import load_config
from grrr_stream.sweep.config import load_sweep_config
from grrr_stream.sweep import plan_sweep

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


def _is_sweep(path: Path) -> bool:
    return "chains" in (yaml.safe_load(path.read_text()) or {})


def test_there_are_configs():
    assert CONFIGS
    assert {"demo.yaml", "paper.yaml"} <= {p.name for p in CONFIGS if _is_sweep(p)}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_config_validates(path, tmp_path):
    assert path.read_text().startswith("# Run:")
    if not _is_sweep(path):
        cfg = load_config(path)
        assert cfg.base and cfg.post and cfg.store
        return
    plan = plan_sweep(load_sweep_config(path, workdir=tmp_path / "w"))  # no network, no model needed
    kinds = {u.kind for u in plan.units}
    assert {"decompose", "evaluate"} <= kinds
    if path.name in ("demo.yaml", "paper.yaml"):
        assert {"stats", "compare"} <= kinds
    assert not (tmp_path / "w").exists()  # planning writes nothing


def test_paper_config_chains_follow_the_papers_lineage():
    plan = plan_sweep(load_sweep_config(CONFIGS[0].parent / "paper.yaml"))
    t = plan.transitions
    # RL on top of distillation/SFT: incremental and cumulative transitions, and a sequential comparison
    assert t["r1-distill-1.5b-to-deepscaler-1.5b"].kind == "incremental"
    assert t["qwen25-math-1.5b-to-deepscaler-1.5b"].kind == "cumulative"
    assert t["klear-8b-sft-to-klear-8b"].kind == "incremental"
    ids = {u.id for u in plan.units}
    assert "compare/sequential/qwen3-8b-base-to-klear-8b-sft--qwen3-8b-base-to-klear-8b" in ids
    # UniReason SFT and RL both start from the base: an independent pair, not a sequence
    assert t["qwen3-14b-base-to-unireason-14b-rl"].kind == "cumulative"
    assert ("compare/independent/qwen3-14b-base-to-unireason-14b-rl--qwen3-14b-base-to-unireason-14b-think-sft"
            in ids)
    unconfirmed = [m for m, spec in plan.models.items() if not spec.confirmed]
    assert unconfirmed == ["nv-prorl-1.5b", "nv-prorl-v2-1.5b", "llama3-8b-sft", "llama3-8b-ppo", "olmo3-7b-think-sft",
                           "olmo3-7b-think-dpo", "olmo3-7b-think", "deepseek-math-7b", "deepseek-math-7b-instruct",
                           "deepseek-math-7b-rl"]


def test_paper_config_evaluates_the_papers_set_of_steps():
    """The paper evaluates every training step (base → SFT, SFT → RL, base → RL from the base), never the
    cumulative base → RL of an RL model that follows an SFT (decomposed only). Written out by hand from the
    paper's chains as paper.yaml holds them (C4 is left out: no public id)."""
    plan = plan_sweep(load_sweep_config(CONFIGS[0].parent / "paper.yaml"))
    evaluated = {u.id.removeprefix("evaluate/") for u in plan.units if u.kind == "evaluate"}
    steps = {
        "qwen25-math-1.5b-to-r1-distill-1.5b", "r1-distill-1.5b-to-deepscaler-1.5b", "r1-distill-1.5b-to-nv-prorl-1.5b",
        "r1-distill-1.5b-to-nv-prorl-v2-1.5b", "qwen3-8b-base-to-klear-8b-sft", "klear-8b-sft-to-klear-8b",
        "qwen3-14b-base-to-unireason-14b-think-sft", "qwen3-14b-base-to-unireason-14b-nothink-sft",
        "qwen3-14b-base-to-unireason-14b-rl", "mistral-7b-to-mistral-7b-sft-beta", "mistral-7b-sft-beta-to-zephyr-7b-beta",
        "qwen25-math-7b-to-rlhflow-7b-sft", "rlhflow-7b-sft-to-rlhflow-7b-dpo", "qwen25-math-7b-to-rlhflow-7b-dpo-zero",
        "qwen25-math-7b-to-rlhflow-7b-ppo-zero", "qwen25-math-7b-to-rlhflow-7b-raft-zero",
        "qwen25-math-7b-to-rlhflow-7b-raftpp-zero", "qwen25-math-7b-to-rlhflow-7b-reinforce-rej-zero",
        "olmo2-7b-to-olmo2-7b-sft", "olmo2-7b-sft-to-olmo2-7b-dpo", "olmo2-7b-dpo-to-olmo2-7b-instruct",
        "llama3-8b-to-llama3-8b-sft", "llama3-8b-sft-to-llama3-8b-ppo", "olmo3-7b-to-olmo3-7b-think-sft",
        "olmo3-7b-think-sft-to-olmo3-7b-think-dpo", "olmo3-7b-think-dpo-to-olmo3-7b-think",
        "qwen25-math-7b-eurus-to-eurus-2-7b-sft", "eurus-2-7b-sft-to-eurus-2-7b-prime", "mimo-7b-to-mimo-7b-sft",
        "mimo-7b-sft-to-mimo-7b-rl", "mimo-7b-to-mimo-7b-rl-zero", "deepseek-math-7b-to-deepseek-math-7b-instruct",
        "deepseek-math-7b-instruct-to-deepseek-math-7b-rl"}
    assert evaluated == steps
    # the cumulative rows of RL after SFT: decomposed, not evaluated
    for t in ("qwen25-math-1.5b-to-deepscaler-1.5b", "qwen3-8b-base-to-klear-8b", "mistral-7b-to-zephyr-7b-beta",
              "qwen25-math-7b-to-rlhflow-7b-dpo", "olmo2-7b-to-olmo2-7b-instruct", "mimo-7b-to-mimo-7b-rl"):
        assert plan.transitions[t].kind == "cumulative" and t not in evaluated
    assert len(plan.transitions) == len(steps) + 14


def test_profile_paper_turns_the_analyses_beyond_the_paper_off(tmp_path):
    """`decompose --profile paper` drops exactly the analyses beyond the paper; without it they are on, and a
    flag the user gives beside it still wins over nothing else (the profile only sets those four keys)."""
    from grrr_stream.cli.entry import build_parser
    from grrr_stream.cli.transition import config_from_args

    argv = ["decompose", "--base", "b", "--post", "p", "--store", str(tmp_path / "s")]
    parser = build_parser()
    full = config_from_args(parser.parse_args(argv))
    paper = config_from_args(parser.parse_args(argv + ["--profile", "paper"]))
    assert full.band_edges and full.angle_edges and full.survival_dtype and full.channel_energy
    assert (paper.band_edges, paper.angle_edges, paper.survival_dtype, paper.channel_energy) == ((), (), None, False)
    same = {k for k in type(full).model_fields if getattr(full, k) == getattr(paper, k)}
    assert set(type(full).model_fields) - same == {"band_edges", "angle_edges", "survival_dtype", "channel_energy"}

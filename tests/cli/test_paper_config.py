"""configs/paper.yaml plans exactly the paper's 28 evaluated transitions, and configs/paper_extended.yaml
plans those and the models beside them that the paper does not evaluate.

The 28 rows are written out here by hand from the paper's Tables 5 (SFT) and 6 (RL), chain by chain as its
Table 1 and text give them (the team's summary of the paper's facts), in the config's model ids; not derived from the
config, so a config change that adds or loses a row fails here."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from grrr_stream.cli.printing import transition_counts
from grrr_stream.stats.claims_sets import method_group
from grrr_stream.sweep import plan_sweep
from grrr_stream.sweep.config import load_sweep_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

# (paper chain, parent → child as model ids, Table 5 = SFT / Table 6 = RL)
SFT_ROWS = [
    ("C1", "qwen25-math-1.5b", "r1-distill-1.5b"),
    ("C2", "qwen3-8b-base", "klear-8b-sft"),
    ("C3", "qwen3-14b-base", "unireason-14b-think-sft"),
    ("C5", "mistral-7b", "mistral-7b-sft-beta"),
    ("C6", "qwen25-math-7b", "rlhflow-7b-sft"),
    ("C7", "olmo2-7b", "olmo2-7b-sft"),
    ("C8", "llama3-8b", "llama3-8b-sft"),
    ("C9", "olmo3-7b", "olmo3-7b-think-sft"),
    ("C10", "qwen25-math-7b", "eurus-2-7b-sft"),
    ("C11", "mimo-7b", "mimo-7b-sft"),
    ("C12", "deepseek-math-7b", "deepseek-math-7b-instruct"),
]
RL_ROWS = [
    ("C1", "r1-distill-1.5b", "deepscaler-1.5b"),  # DeepScaleR (GRPO)
    ("C1", "r1-distill-1.5b", "nv-prorl-1.5b"),  # Nemotron (GRPO, ProRL v1)
    ("C2", "klear-8b-sft", "klear-8b"),  # KlearReasoner (GPPO)
    ("C3", "unireason-14b-think-sft", "unireason-14b-rl"),  # UniReason (GRPO): Base 49.1 = the SFT's Full
    ("C5", "mistral-7b-sft-beta", "zephyr-7b-beta"),  # zephyr-beta (DPO)
    ("C6", "rlhflow-7b-sft", "rlhflow-7b-dpo"),  # DPO
    ("C6", "qwen25-math-7b", "rlhflow-7b-ppo-zero"),  # PPO-Zero, from the base (†)
    ("C6", "qwen25-math-7b", "rlhflow-7b-raft-zero"),  # RAFT-Zero, from the base (†)
    ("C7", "olmo2-7b-sft", "olmo2-7b-dpo"),
    ("C7", "olmo2-7b-dpo", "olmo2-7b-instruct"),
    ("C8", "llama3-8b-sft", "llama3-8b-ppo"),
    ("C9", "olmo3-7b-think-sft", "olmo3-7b-think-dpo"),
    ("C10", "eurus-2-7b-sft", "eurus-2-7b-prime"),
    ("C10", "qwen25-math-7b", "eurus-2-7b-prime-zero"),  # PRIME-Zero, from the base
    ("C11", "mimo-7b-sft", "mimo-7b-rl"),
    ("C11", "mimo-7b", "mimo-7b-rl-zero"),  # RL-Zero, from the base
    ("C12", "deepseek-math-7b-instruct", "deepseek-math-7b-rl"),
]
# the config's chain of each paper chain: C6 and C10 share one (one Qwen2.5-Math-7B base entry); no C4
CHAIN = {
    "C1": "qwen25-math-1.5b",
    "C2": "qwen3-8b",
    "C3": "qwen3-14b",
    "C5": "mistral-7b",
    "C6": "qwen25-math-7b",
    "C7": "olmo2-7b",
    "C8": "llama3-8b",
    "C9": "olmo3-7b",
    "C10": "qwen25-math-7b",
    "C11": "mimo-7b",
    "C12": "deepseek-math-7b",
}
# paper_extended.yaml's additions: (config chain, parent, child)
EXTENDED = [
    ("qwen25-math-1.5b", "r1-distill-1.5b", "nv-prorl-v2-1.5b"),
    ("qwen3-14b", "qwen3-14b-base", "unireason-14b-nothink-sft"),
    ("qwen25-math-7b", "qwen25-math-7b", "rlhflow-7b-dpo-zero"),
    ("qwen25-math-7b", "qwen25-math-7b", "rlhflow-7b-raftpp-zero"),
    ("qwen25-math-7b", "qwen25-math-7b", "rlhflow-7b-reinforce-rej-zero"),
    ("olmo3-7b", "olmo3-7b-think-dpo", "olmo3-7b-think"),
]


@pytest.fixture(scope="module")
def paper():
    return plan_sweep(load_sweep_config(CONFIGS / "paper.yaml"))


@pytest.fixture(scope="module")
def extended():
    return plan_sweep(load_sweep_config(CONFIGS / "paper_extended.yaml"))


def _evaluated(plan) -> dict[tuple[str, str], str]:
    """(parent, child) → transition id of every transition of the main evaluation."""
    trs = [plan.transitions[u.params.transition] for u in plan.units if u.kind == "evaluate" and u.params.suite is None]
    return {(tr.parent, tr.child): tr.id for tr in trs}


def test_the_rows_written_here_are_the_papers_counts():
    assert (len(SFT_ROWS), len(RL_ROWS)) == (11, 17)  # Tables 5 and 6: Table 2's 29 rows less C4
    assert {c for c, _, _ in SFT_ROWS + RL_ROWS} == {f"C{i}" for i in range(1, 13)} - {"C4"}


def test_paper_yaml_evaluates_exactly_the_papers_28_rows(paper):
    evaluated = _evaluated(paper)
    expected = {(p, c): group for group, rows in (("SFT", SFT_ROWS), ("RL", RL_ROWS)) for _, p, c in rows}
    assert set(evaluated) == set(expected), (
        sorted(set(evaluated) - set(expected)),
        sorted(set(expected) - set(evaluated)),
    )
    sft = paper.config.claims.sft_methods
    for (p, c), tid in evaluated.items():
        tr = paper.transitions[tid]
        assert method_group(tr.method, sft) == expected[(p, c)], tid  # the report's SFT / RL split agrees
    for chain, p, c in SFT_ROWS + RL_ROWS:
        assert paper.transitions[evaluated[(p, c)]].chain == CHAIN[chain], (chain, c)
    # the dry run says so, with the decomposed count: the paper's 42 less C4's one
    assert transition_counts(paper) == (
        "transitions: 41 decomposed (28 cumulative from the base, 13 incremental "
        "from a parent); 28 evaluated (11 SFT, 17 RL)"
    )


def test_paper_yaml_holds_the_papers_lineage(paper):
    t, ids = paper.transitions, {u.id for u in paper.units}
    # RL on top of SFT: incremental (evaluated) and cumulative (decomposed only), and a sequential comparison
    for base, sft, rl in (
        ("qwen25-math-1.5b", "r1-distill-1.5b", "deepscaler-1.5b"),
        ("qwen3-8b-base", "klear-8b-sft", "klear-8b"),
        ("qwen3-14b-base", "unireason-14b-think-sft", "unireason-14b-rl"),
        ("mistral-7b", "mistral-7b-sft-beta", "zephyr-7b-beta"),
        ("qwen25-math-7b", "rlhflow-7b-sft", "rlhflow-7b-dpo"),
        ("qwen25-math-7b", "eurus-2-7b-sft", "eurus-2-7b-prime"),
        ("mimo-7b", "mimo-7b-sft", "mimo-7b-rl"),
    ):
        assert t[f"{sft}-to-{rl}"].kind == "incremental" and t[f"{base}-to-{rl}"].kind == "cumulative"
        assert f"compare/sequential/{base}-to-{sft}--{base}-to-{rl}" in ids
        assert f"evaluate/{base}-to-{rl}" not in ids
    # C6 and C10 share one base entry: the paper's one SFT–SFT independent pair is planned, and it is the only one
    independent = [paper.unit(i).params for i in ids if i.startswith("compare/independent/")]
    sft = paper.config.claims.sft_methods
    both_sft = [
        (p.a, p.b)
        for p in independent
        if {method_group(t[p.a].method, sft), method_group(t[p.b].method, sft)} == {"SFT"}
    ]
    assert both_sft == [("qwen25-math-7b-to-eurus-2-7b-sft", "qwen25-math-7b-to-rlhflow-7b-sft")]
    assert "compare/independent/qwen25-math-7b-to-rlhflow-7b-ppo-zero--qwen25-math-7b-to-rlhflow-7b-raft-zero" in ids
    assert len(independent) == 22  # the pairs paper.yaml's header lists: C1 1, C6 + C10 19, C11 2
    assert len({m.source for m in paper.models.values() if m.source == "Qwen/Qwen2.5-Math-7B"}) == 1
    assert [mid for mid, m in paper.models.items() if m.source == "Qwen/Qwen2.5-Math-7B"] == ["qwen25-math-7b"]
    unconfirmed = [m for m, spec in paper.models.items() if not spec.confirmed]
    assert unconfirmed == [
        "nv-prorl-1.5b",
        "llama3-8b-sft",
        "llama3-8b-ppo",
        "olmo3-7b-think-sft",
        "olmo3-7b-think-dpo",
        "deepseek-math-7b",
        "deepseek-math-7b-instruct",
        "deepseek-math-7b-rl",
    ]


def test_paper_extended_plans_the_paper_and_the_models_beside_it(paper, extended):
    ours, theirs = _evaluated(paper), _evaluated(extended)
    added = {(p, c) for _, p, c in EXTENDED}
    assert set(theirs) == set(ours) | added and not set(ours) & added
    for chain, p, c in EXTENDED:
        assert extended.transitions[theirs[(p, c)]].chain == chain
    # every unit the two share has the same key (one workdir: the paper's results are reused), except the
    # summary over all transitions and the claims over all evaluated ones, which cover the added ones too
    keys = {u.id: u.key for u in extended.units}
    assert extended.workdir == paper.workdir
    assert [u.id for u in paper.units if keys.get(u.id) != u.key] == ["stats/summary", "claims/main"]
    assert Counter(e.kind for e in extended.units) - Counter(u.kind for u in paper.units) == Counter(
        {"decompose": 8, "compare": 30, "evaluate": 6}
    )


def test_every_model_of_both_configs_is_in_the_forecasts_built_in_table(extended):
    """Without the Hub, the dry run's shapes and downloads come from the built-in table: no model is unknown."""
    from grrr_stream.forecast.shapes import KNOWN

    assert sorted({m.source for m in extended.models.values()} - set(KNOWN)) == []

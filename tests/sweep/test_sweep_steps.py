"""The `steps` transition selector: every parent → child edge of a lineage (the paper's evaluated set), never
the cumulative base → grandchild. Planned offline: the sources are Hub-like ids that planning never fetches."""

from __future__ import annotations

import pytest

from grrr_stream.errors import ConfigError
from grrr_stream.sweep import plan_sweep
from grrr_stream.sweep.config import SweepConfig


def _config(tmp_path, **decomposition) -> SweepConfig:
    # chain 1: b → sft → dpo → rlvr (OLMo-like), b → zero (RL from the base), b → sft → grpo (a sibling RL);
    # chain 2: c → only (one SFT)
    def m(i, parent=None):
        return {"id": i, "source": f"org/{i}", **({"parent": parent} if parent else {})}

    return SweepConfig.model_validate(
        {
            "name": "steps",
            "workdir": str(tmp_path / "w"),
            "chains": [
                {
                    "name": "one",
                    "base": m("b"),
                    "models": [m("sft"), m("dpo", "sft"), m("rlvr", "dpo"), m("zero"), m("grpo", "sft")],
                },
                {"name": "two", "base": m("c"), "models": [m("only")]},
            ],
            "decomposition": {"device": "cpu", **decomposition},
            "statistics": {"enabled": False},
            "variants": {"transitions": "steps", "names": ["base", "full", "diag"]},
            "evaluation": {"transitions": "steps", "variants": ["base", "full"]},
            "tracking": {"enabled": False},
        }
    )


def test_steps_select_every_parent_to_child_edge_and_no_cumulative_grandchild(tmp_path):
    plan = plan_sweep(_config(tmp_path))
    # written by hand from the lineage above
    steps = {"b-to-sft", "sft-to-dpo", "dpo-to-rlvr", "b-to-zero", "sft-to-grpo", "c-to-only"}
    cumulative_only = {"b-to-dpo", "b-to-rlvr", "b-to-grpo"}
    decomposed = {u.id.split("/", 1)[1] for u in plan.units if u.kind == "decompose"}
    assert decomposed == steps | cumulative_only  # everything is still decomposed
    evaluated = {u.id.split("/", 1)[1] for u in plan.units if u.kind == "evaluate"}
    assert evaluated == steps
    built = {u.id.split("/")[1] for u in plan.units if u.kind == "variant"}
    assert built == steps
    assert len([u for u in plan.units if u.kind == "variant"]) == 3 * len(steps)


def test_steps_without_incremental_decompositions_is_a_plan_problem(tmp_path):
    with pytest.raises(ConfigError) as e:
        plan_sweep(_config(tmp_path, incremental=False))
    msg = str(e.value)
    assert "steps needs decomposition.incremental: true" in msg
    for t in ("sft-to-dpo", "dpo-to-rlvr", "sft-to-grpo"):
        assert t in msg

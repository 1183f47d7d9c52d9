"""The paper's side of the verdict box against configs/paper.yaml's lineage: its sets' independent units (the
bases its evaluated transitions descend from) and the W0 of each RL row, whose shapes set the isotropic f_diag
the paper's bound is read against."""

from __future__ import annotations

from pathlib import Path

from grrr_stream.report.build import chains_of
from grrr_stream.report.paper_claims import CLAIMS, PAPER_UNITS, RL_W0
from grrr_stream.stats.claims_sets import method_group
from grrr_stream.sweep import plan_sweep
from grrr_stream.sweep.config import load_sweep_config

PAPER = Path(__file__).resolve().parents[2] / "configs" / "paper.yaml"


def _plan():
    cfg = load_sweep_config(PAPER)
    plan = plan_sweep(cfg)
    evaluated = [u.params.transition for u in plan.units if u.kind == "evaluate" and u.params.suite is None]
    return cfg, plan, evaluated


def test_each_of_the_papers_sets_spans_its_ten_bases():
    cfg, plan, evaluated = _plan()
    chains = chains_of(plan)
    group = {t: method_group(plan.transitions[t].method, cfg.claims.sft_methods) for t in evaluated}
    assert len(evaluated) == 28
    for g in ("SFT", "RL", None):
        members = [t for t in evaluated if g is None or group[t] == g]
        assert len({chains[t] for t in members}) == PAPER_UNITS, g
    # C6 and C10 descend from one base (Qwen2.5-Math-7B): one unit
    assert chains["qwen25-math-7b-to-rlhflow-7b-sft"] == chains["qwen25-math-7b-to-eurus-2-7b-sft"]
    assert {c.paper_units for c in CLAIMS if c.source in ("claims", "energy") and c.test != "above_other"} == {10}


def test_the_rl_rows_w0_are_the_configs():
    cfg, plan, evaluated = _plan()
    rl = [t for t in evaluated if method_group(plan.transitions[t].method, cfg.claims.sft_methods) == "RL"]
    sources = sorted(plan.models[plan.transitions[t].parent].source for t in rl)
    assert sources == sorted(RL_W0) and len(RL_W0) == 17

"""tools/simulate_rounds.py: a replay of a fixed evaluation's records runs the adaptive design's schedule on the
answers problem for problem (records in any order in their files), and its summary and time model count what the
schedule did."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.common import tool

from grrr_stream.evaluation.designs.schedule import PlantedSchedule
from grrr_stream.evaluation.settings import AdaptiveSettings
from grrr_stream.stats.order import problem_order


@pytest.fixture(scope="module")
def rounds():
    return tool("simulate_rounds")


def _fixed_evaluation(folder, answers: dict[str, np.ndarray], rng):
    """An evaluation folder of the fixed design: one benchmark 'b', each variant's records in a shuffled order."""
    n = len(next(iter(answers.values())))
    record = {"sampling": {"n": 1}, "metric": "avg", "variants": list(answers), "benchmarks": {"b": {"n": n}}}
    folder.mkdir(parents=True)
    (folder / "evaluation.json").write_text(json.dumps(record))
    for v, correct in answers.items():
        (folder / v).mkdir()
        lines = [json.dumps({"idx": int(i), "correct": bool(correct[i])}) for i in rng.permutation(n)]
        (folder / v / "b.jsonl").write_text("\n".join(lines) + "\n")


def test_a_replay_is_the_schedule_on_the_records_answers(rounds, tmp_path):
    rng = np.random.default_rng(5)
    full = rng.random(300) < 0.6
    answers = {"full": full, "near": np.where(rng.random(300) < 0.05, ~full, full), "far": rng.random(300) < 0.3}
    _fixed_evaluation(tmp_path / "e", answers, rng)
    settings = AdaptiveSettings(chunk=40, precision_points=6.0, variant_precision_points={})
    out = rounds.summary(rounds.replay([tmp_path / "e"], settings))
    order = problem_order({"b": 300}, settings.seed, settings.max_weight, settings.allocation)
    along = {v: a[[pos for _, pos in order.items]].astype(float) for v, a in answers.items()}
    run = PlantedSchedule(order, along, settings)
    decisions = run.rounds()
    for v in ("near", "far"):
        assert out["variants"][v]["decided"] == pytest.approx(decisions[v].problems / 300)
        assert out["variants"][v]["answered"] == pytest.approx(run.answered[v] / 300)
        assert out["variants"][v]["calls"] == len(run.calls[v])
    assert out["calls"] == sum(map(len, run.calls.values())) and out["problems"] == 900
    # the time model: one call a variant and every problem for the fixed design
    cost = 50.0
    expected = (out["calls"] * cost + sum(run.answered.values())) / (3 * cost + 900)
    assert rounds.time_ratio(out, cost) == pytest.approx(expected)


def test_a_replay_refuses_an_evaluation_that_did_not_answer_every_problem(rounds, tmp_path):
    rng = np.random.default_rng(1)
    _fixed_evaluation(tmp_path / "e", {"full": rng.random(100) < 0.5, "diag": rng.random(100) < 0.2}, rng)
    lines = (tmp_path / "e" / "diag" / "b.jsonl").read_text().splitlines()
    (tmp_path / "e" / "diag" / "b.jsonl").write_text("\n".join(lines[:60]) + "\n")
    with pytest.raises(SystemExit, match="diag did not answer every problem of b"):
        rounds.replay([tmp_path / "e"], AdaptiveSettings())

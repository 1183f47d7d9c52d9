"""The adaptive design's schedule over planted answers at the paper's size (28 transitions × 12 variants × 1,517
problems, tools/simulate.py's studies): answering ahead changes no decision, every call answers a contiguous
stretch of the order, and the answers generated past the stops stay few, in about two calls a variant."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.common import tool

from grrr_stream.evaluation.designs.schedule import REFERENCE, PlantedSchedule
from grrr_stream.evaluation.settings import AdaptiveSettings
from grrr_stream.stats.order import problem_order


@pytest.fixture(scope="module")
def sim():
    return tool("simulate")


@pytest.fixture(scope="module")
def study(sim):
    """One planted study at ρ = 0.9 (seed 0): the order and correctness, transitions × variants × problems."""
    settings = AdaptiveSettings()
    order = problem_order(sim.SIZES, settings.seed, settings.max_weight, settings.allocation)
    rng = np.random.default_rng(0)
    return order, sim.draw_correct(rng, sim.accuracies(rng)[None], order, 0.9)[0]


def _run(sim, order, correct, settings):
    run = PlantedSchedule(order, {v: correct[i] for i, v in enumerate(sim.VARIANTS)}, settings)
    return run, run.rounds()


def test_answering_ahead_changes_no_decision_and_each_call_continues_the_prefix(sim, study):
    order, correct = study
    for t in (0, 7, 20):  # an SFT and two RL transitions
        ahead, decided = _run(sim, order, correct[t], AdaptiveSettings())
        chunked, by_chunk = _run(sim, order, correct[t], AdaptiveSettings(lookahead=0.0))
        assert decided == by_chunk
        for run in (ahead, chunked):
            for name, sizes in run.calls.items():
                assert sum(sizes) == run.answered[name] and all(s > 0 for s in sizes)
            for name, d in decided.items():
                assert d.stopped and d.problems <= run.answered[name]
            assert run.answered[REFERENCE] >= max(d.problems for d in decided.values())
        assert sum(map(len, ahead.calls.values())) < sum(map(len, chunked.calls.values()))


def test_at_the_paper_size_the_schedule_answers_little_past_the_stops_in_about_two_calls(sim, study):
    """Each call runs to where the rule stops on the projection of what was answered (stats/lookahead.py). Read as
    1/√n from the first chunk, the interval's width foresees several times too many problems, and full then
    answers nearly every one (3.8 × the problems decided on over these transitions); read as 1/n, 1.11 ×."""
    order, correct = study
    answered = decided = calls = 0
    full = []
    for t in range(correct.shape[0]):
        run, decisions = _run(sim, order, correct[t], AdaptiveSettings())
        needed = {n: d.problems for n, d in decisions.items()} | {
            REFERENCE: max(d.problems for d in decisions.values())
        }
        answered += sum(run.answered.values())
        decided += sum(needed.values())
        calls += sum(map(len, run.calls.values())) / len(run.calls)
        full.append(run.answered[REFERENCE] / order.total)
    assert answered <= 1.08 * decided
    assert calls / correct.shape[0] <= 2.4
    assert np.median(full) <= 0.5

"""The adaptive design's forecast: the simulation's shares as data, interpolated between precision targets, and
how often each variant is streamed in."""

import pytest

from grrr_stream.evaluation.settings import AdaptiveSettings
from grrr_stream.forecast import adaptive_shares

PAPER = {"math500": 500, "aime24": 30, "amc23": 40, "minerva_math": 272, "olympiadbench": 675}


def test_shares_interpolate_between_simulated_targets_and_clamp_outside():
    at2, at3 = adaptive_shares.SIMULATED[2.0]["offnull"], adaptive_shares.SIMULATED[3.0]["offnull"]
    assert adaptive_shares.share("offnull", 2.0) == pytest.approx(adaptive_shares.AHEAD * at2)
    assert adaptive_shares.share("offnull", 2.5) == pytest.approx(adaptive_shares.AHEAD * (at2 + at3) / 2)
    assert adaptive_shares.share("offnull", 0.5) == adaptive_shares.share("offnull", 2.0)
    assert adaptive_shares.share("randrm-2", 4.0) == pytest.approx(
        adaptive_shares.AHEAD * adaptive_shares.SIMULATED[4.0]["randrm"]
    )
    unknown = adaptive_shares.share("channels-rest", 2.0)  # not simulated: as the variants without a threshold
    assert adaptive_shares.share("diag", 2.0) < unknown < adaptive_shares.share("full", 2.0)


def test_loads_one_for_a_first_round_stop_about_two_otherwise_and_per_doubling_without_lookahead():
    shares, loads, basis = adaptive_shares.expected(["full", "diag", "off"], PAPER, AdaptiveSettings())
    assert loads[1] <= loads[0] and loads[0] == 2.25 and "adaptive ±2 points" in basis
    _, loads0, _ = adaptive_shares.expected(["full", "diag", "off"], PAPER, AdaptiveSettings(lookahead=0.0))
    # rounds end at 134, 198, 326, 582, 1094, 1517: full at ~33 % of 1,517 (507, answers ahead included) in the
    # fourth, diag (~17 %, 264) in the third, off (~22 %, 334) in the fourth
    assert loads0 == [4.0, 3.0, 4.0]


def test_calls_of_at_least_min_batch_answer_to_their_rounds_end():
    """At ``min_batch`` 256 the rounds end at 262, 518, 774, 1030, 1286, 1517: without answering ahead diag's stop
    (~264, answers ahead included) and full's (~507) are answered to 518 in two calls, and a variant past 518 (full
    at a share of 0.4) to 774 in three; answering ahead, a variant past the first round answers at least 262 + 256
    problems."""
    shares1, _, _ = adaptive_shares.expected(["full", "diag"], PAPER, AdaptiveSettings(lookahead=0.0, min_batch=1))
    shares, loads, basis = adaptive_shares.expected(
        ["full", "diag"], PAPER, AdaptiveSettings(lookahead=0.0, min_batch=256)
    )
    assert loads == [2.0, 2.0] and shares == [518 / 1517, 518 / 1517] and "calls of ≥ 256" in basis
    assert all(a > b for a, b in zip(shares, shares1))
    ahead, loads, _ = adaptive_shares.expected(["full", "diag"], PAPER, AdaptiveSettings(min_batch=256))
    assert loads == [2.25, 2.25] and ahead == [pytest.approx(518 / 1517)] * 2
    table = {**adaptive_shares.SIMULATED[2.0], "full": 0.4 / adaptive_shares.AHEAD}
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(adaptive_shares.SIMULATED, 2.0, table)
        shares, loads, _ = adaptive_shares.expected(["full"], PAPER, AdaptiveSettings(lookahead=0.0, min_batch=256))
    assert loads == [3.0] and shares == [774 / 1517]

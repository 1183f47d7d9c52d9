"""The adaptive design's forecast: the schedule simulation's calls as data, interpolated between precision
targets, floored at ``min_batch``, and a chunk a call without answering ahead."""

import numpy as np
import pytest

from grrr_stream.evaluation.settings import AdaptiveSettings
from grrr_stream.forecast import adaptive_shares

PAPER = {"math500": 500, "aime24": 30, "amc23": 40, "minerva_math": 272, "olympiadbench": 675}


def _answered(calls):
    return sum(k * s for k, s in calls)


def test_calls_interpolate_between_simulated_targets_and_clamp_outside():
    points = sorted(adaptive_shares.SIMULATED)
    lo, hi = points[0], points[1]
    a, b = (np.array(adaptive_shares.SIMULATED[p]["offnull"][1]) for p in (lo, hi))
    most = max(len(a), len(b))
    a, b = (np.vstack([c, np.zeros((most - len(c), 2))]) for c in (a, b))
    mid = adaptive_shares.at_precision("offnull", (lo + hi) / 2)[1]
    assert mid == pytest.approx((a + b) / 2)
    below = adaptive_shares.at_precision("offnull", lo / 4)
    assert below[0] == adaptive_shares.SIMULATED[lo]["offnull"][0]
    assert below[1] == pytest.approx(a[: len(adaptive_shares.SIMULATED[lo]["offnull"][1])])
    top = points[-1]
    assert adaptive_shares.at_precision("diag", top + 5)[0] == adaptive_shares.SIMULATED[top]["diag"][0]
    # a random removal is read as 'randrm'; a variant the study did not simulate as the mean of those without
    # thresholds of their own
    assert adaptive_shares.at_precision("randrm-7", lo)[0] == adaptive_shares.SIMULATED[lo]["randrm"][0]
    like = np.mean([adaptive_shares.SIMULATED[lo][k][0] for k in adaptive_shares.LIKE])
    assert adaptive_shares.at_precision("channels-rest", lo)[0] == pytest.approx(like)


def test_the_table_is_what_the_schedule_answers_full_longest_and_answering_ahead_kept_small():
    for table in adaptive_shares.SIMULATED.values():
        for variant, (decided, calls) in table.items():
            answered = _answered(calls)
            assert calls[0][0] == 1.0  # every variant answers the first round
            assert all(0 <= k <= 1 and 0 < s <= 1 for k, s in calls)
            assert decided <= answered + 0.01 and answered <= 1.35 * decided, variant
        assert table["full"][0] == max(d for d, _ in table.values())


def test_expected_reads_the_table_and_floors_calls_at_min_batch():
    names = ["full", "diag", "offnull"]
    shares, calls, basis = adaptive_shares.expected(names, PAPER, AdaptiveSettings())
    table = adaptive_shares.SIMULATED[2.0]
    assert [len(c) for c in calls] == [len(table[n][1]) for n in names]
    assert shares == pytest.approx([_answered(table[n][1]) for n in names])
    assert "adaptive ±2 points" in basis and "calls a variant" in basis
    floored, calls256, basis256 = adaptive_shares.expected(names, PAPER, AdaptiveSettings(min_batch=256))
    assert all(s >= 256 / 1517 for c in calls256 for _, s in c) and "calls of ≥ 256" in basis256
    assert all(f >= s for f, s in zip(floored, shares))
    assert all(s <= 1.0 for s in adaptive_shares.expected(names, PAPER, AdaptiveSettings(min_batch=5000))[0])


def test_without_answering_ahead_the_first_round_then_a_chunk_a_call():
    shares, calls, _ = adaptive_shares.expected(["offnull"], PAPER, AdaptiveSettings(lookahead=0.0))
    (first, rest) = calls[0]
    assert first == (1.0, 134 / 1517)  # the census (AIME 30, AMC 40) and one chunk of 64
    decided = adaptive_shares.SIMULATED[2.0]["offnull"][0]
    assert rest[1] == pytest.approx(64 / 1517) and first[1] + rest[0] * rest[1] == pytest.approx(decided)
    assert shares[0] == pytest.approx(decided)

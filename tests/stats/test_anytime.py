"""The adaptive design's order and confidence sequences, against planted populations with known means and an
independent evaluation of the supermartingale the closed form inverts."""

import math

import numpy as np
import pytest

from grrr_stream.stats.anytime import Thresholds, decide, retention_interval, score_path
from grrr_stream.stats.betting import betting_wor_cs
from grrr_stream.stats.bootstrap import interval
from grrr_stream.stats.empirical_bernstein import eb_wor_cs
from grrr_stream.stats.order import benchmark_mean, problem_order

PAPER_SIZES = {"math500": 500, "aime24": 30, "amc23": 40, "minerva_math": 272, "olympiadbench": 675}


def test_order_answers_small_heavy_benchmarks_first_then_interleaves():
    o = problem_order(PAPER_SIZES, seed=3)
    assert o.census == ("aime24", "amc23")  # a fifth of the score each on 2-3 % of the problems
    assert o.census_end == 70 and o.total == 1517
    assert sorted(o.items) == sorted((b, i) for b, n in PAPER_SIZES.items() for i in range(n))
    assert {b for b, _ in o.items[:70]} == {"aime24", "amc23"}
    # the pooled weights make the mean of c_b·u the mean over the pooled benchmarks: Σ_b N_b c_b / N' = B'
    pooled = 500 + 272 + 675
    assert sum(PAPER_SIZES[b] * c for b, c in o.weight.items()) / pooled == pytest.approx(1.0)
    assert max(o.weight.values()) <= 2.0
    head = [b for b, _ in o.items[70:370]]  # interleaved, roughly in proportion to size
    assert 0.25 < head.count("math500") / 300 < 0.45 and 0.05 < head.count("minerva_math") / 300 < 0.3
    assert problem_order(PAPER_SIZES, seed=3) == o and problem_order(PAPER_SIZES, seed=4).items != o.items


def test_one_benchmark_is_all_pooled():
    o = problem_order({"arith": 200}, seed=0)
    assert o.census == () and o.weight == {"arith": 1.0} and o.boundaries(64) == [64, 128, 192, 200]


@pytest.mark.parametrize("p", [0.05, 0.3, 0.5])
def test_coverage_on_planted_bernoulli_populations(p):
    """Over S random orders of a population of N planted 0/1 values, the sequence excludes the population's own
    mean at some time in at most α of the paths, up to the binomial spread of S paths (3 standard errors)."""
    rng = np.random.default_rng(int(p * 1000))
    N, S, alpha = 400, 1500, 0.05
    pop = (rng.random(N) < p).astype(float)
    lo, hi = eb_wor_cs(np.stack([pop[rng.permutation(N)] for _ in range(S)]), N, alpha)
    missed = np.mean(((lo > pop.mean()) | (hi < pop.mean())).any(axis=-1))
    assert missed <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / S)
    # and it is no trivial interval: without replacement it closes on the exact mean as the population runs out
    assert np.all(hi[:, -1] - lo[:, -1] < 0.05) and np.mean(hi[:, N // 2] - lo[:, N // 2]) < 0.25


def test_endpoints_are_where_the_supermartingale_reaches_two_over_alpha():
    """At the lower end m of the interval at time t (before the running intersection and clipping), the one-sided
    empirical-Bernstein process for sampling without replacement, computed term by term from its definition, equals
    2/α."""
    rng = np.random.default_rng(7)
    N, n, alpha = 300, 120, 0.05
    x = rng.random(n) ** 2
    lo, hi = eb_wor_cs(x, N, alpha)
    t_end = n - 1

    # the closed form, undone: search the m at which log K⁺(m) = log(2/α), by bisection on the definition
    def log_k(m, sign):
        total, s, mean, sq = 0.0, 0.0, 0.5, 0.0
        for i, xi in enumerate(x, start=1):
            var = (0.25 + sq) / i
            lam = min(math.sqrt(2 * math.log(2 / alpha) / (var * i * math.log1p(i))), 0.5)
            mu_wor = (N * m - s) / (N - i + 1)
            total += sign * lam * (xi - mu_wor) - (xi - mean) ** 2 * (-math.log1p(-lam) - lam)
            s += xi
            mean = (0.5 + s) / (i + 1)
            sq += (xi - mean) ** 2
        return total

    a, b = 0.0, float(x.mean())
    for _ in range(60):
        mid = (a + b) / 2
        a, b = (mid, b) if log_k(mid, +1) > math.log(2 / alpha) else (a, mid)
    assert lo[t_end] == pytest.approx(a, abs=1e-9) or lo[t_end] > a  # running intersection can only raise it
    assert lo[t_end] < x.mean() < hi[t_end]


@pytest.mark.parametrize("p", [0.05, 0.3, 0.5])
def test_betting_coverage_on_planted_bernoulli_populations(p):
    """As above for the betting sequence, looked at every 8 draws: it misses the population's mean in at most α of
    S orders, up to 3 binomial standard errors; and it is narrower than the empirical-Bernstein one."""
    rng = np.random.default_rng(int(p * 1000) + 1)
    N, S, alpha = 300, 800, 0.05
    pop = (rng.random(N) < p).astype(float)
    draws = np.stack([pop[rng.permutation(N)] for _ in range(S)])
    looks = np.r_[np.arange(8, N, 8), N]
    lo, hi = betting_wor_cs(draws, N, alpha, looks)
    miss = ((lo > pop.mean()) | (hi < pop.mean())).any(axis=-1)
    assert miss.mean() <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / S)
    # exact at the end, but on a path it missed (the running intersection keeps a miss)
    assert np.allclose(lo[~miss, -1], pop.mean()) and np.allclose(hi[~miss, -1], pop.mean())
    eb_lo, eb_hi = eb_wor_cs(draws, N, alpha)
    half = looks[len(looks) // 2]
    assert np.mean(hi[:, len(looks) // 2] - lo[:, len(looks) // 2]) < np.mean(eb_hi[:, half - 1] - eb_lo[:, half - 1])


def _close_pair_population(rng, n, flips):
    """A paired difference's [0, 1] values of a close variant: 1/2 where variant and full agree, 0 or 1 (evenly)
    on a share ``flips`` of the problems."""
    x = np.full(n, 0.5)
    flipped = rng.permutation(n)[: round(flips * n)]
    x[flipped] = rng.integers(0, 2, len(flipped))
    return x


@pytest.mark.parametrize("kind", ["bernoulli-0.3", "bernoulli-0.05", "close-0.05", "close-0.25"])
def test_tuned_betting_coverage_on_planted_populations(kind):
    """The bets tuned to a target half-width (λ = h/σ̂², truncated at TUNED_CAP) keep the sequence valid: over S
    orders of a planted population it misses the population's mean at some look in at most α of them, up to 3
    binomial standard errors, whatever the target (a target far off the population's spread included)."""
    rng = np.random.default_rng(sum(map(ord, kind)))
    N, S, alpha = 300, 800, 0.05
    family, value = kind.split("-")
    pop = (
        (rng.random(N) < float(value)).astype(float)
        if family == "bernoulli"
        else _close_pair_population(rng, N, float(value))
    )
    draws = np.stack([pop[rng.permutation(N)] for _ in range(S)])
    looks = np.r_[np.arange(8, N, 8), N]
    for target in (0.005, 0.02, 0.1):
        lo, hi = betting_wor_cs(draws, N, alpha, looks, target=target)
        miss = ((lo > pop.mean() + 1e-12) | (hi < pop.mean() - 1e-12)).any(axis=-1)
        assert miss.mean() <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / S), (target, miss.mean())
        assert np.allclose(lo[~miss, -1], pop.mean()) and np.allclose(hi[~miss, -1], pop.mean())


def test_tuned_bets_reach_their_target_on_fewer_draws_than_the_plugin():
    """On close pairs (5 % of problems flipped: a proj or offnull against full), the sequence tuned to ±h is within
    ±h after fewer draws than the plug-in one, in the median over orders: the reason the design tunes them."""
    rng = np.random.default_rng(21)
    N, S, alpha, h = 1200, 200, 0.05, 0.0125
    pop = _close_pair_population(rng, N, 0.05)
    draws = np.stack([pop[rng.permutation(N)] for _ in range(S)])
    looks = np.r_[np.arange(32, N, 32), N]

    def first_within(target):
        lo, hi = betting_wor_cs(draws, N, alpha, looks, target=target)
        return np.median(looks[np.argmax((hi - lo) / 2 <= h, axis=-1)])

    tuned, plugin = first_within(h), first_within(None)
    assert tuned < plugin < N, (tuned, plugin)


def _hand_log_capital(x, N, m, sign, bet, cap):
    """log K^± at mean m after the draws x, term by term in plain floats (the definition, not the vectorised code):
    the bet λ_i = bet(σ̂²_{i−1}, i), capped at ``cap`` of what keeps the capital positive."""
    total, s, sq, mean = 0.0, 0.0, 0.0, 0.5
    for i, xi in enumerate(x, start=1):
        lam = bet((0.25 + sq) / i, i)
        mu = (N * m - s) / (N - i + 1)
        room = mu if sign > 0 else 1 - mu
        total += math.log(1 + sign * min(lam, cap / room) * (xi - mu))
        s += xi
        mean = (0.5 + s) / (i + 1)
        sq += (xi - mean) ** 2
    return total


@pytest.mark.parametrize("h", [0.03, 0.3])  # 0.3: a wide target, where the bets reach their cap
def test_tuned_betting_ends_are_where_the_capital_reaches_two_over_alpha(h):
    """As the plug-in's check below, with the tuned bets λ_i = h/σ̂²_{i−1} written out in plain floats."""
    rng = np.random.default_rng(9)
    N, n, alpha = 300, 90, 0.05
    x = rng.random(n) ** 2
    lo, hi = betting_wor_cs(x, N, alpha, looks=[n], target=h)

    def log_k(m, sign):
        return _hand_log_capital(x, N, m, sign, lambda var, i: h / var, 0.7)

    step, target = 2.0**-15, math.log(2 / alpha)
    assert log_k(lo[0], +1) >= target > log_k(lo[0] + step, +1)
    assert log_k(hi[0], -1) >= target > log_k(hi[0] - step, -1)
    assert lo[0] < x.mean() < hi[0]


def test_decide_tunes_to_the_variants_precision_and_refuses_unknown_bets():
    rng = np.random.default_rng(14)
    o = problem_order(PAPER_SIZES, seed=0)
    full = (rng.random(o.total) < 0.5).astype(float)
    close = np.where(rng.random(o.total) < 0.05, 1 - full, full)
    kw = dict(chunk=64, precision_points=2.0)
    tuned, plugin = (decide(o, close, full, Thresholds(), bets=b, **kw) for b in ("tuned", "plugin"))
    assert tuned.reason == plugin.reason == "precision" and tuned.problems <= plugin.problems
    truth = 100 * benchmark_mean(o, close - full)  # the fixed design's difference, every problem answered
    assert tuned.lo <= truth <= tuned.hi and (tuned.hi - tuned.lo) / 2 <= 2.0
    with pytest.raises(ValueError, match="tuned, plugin"):
        decide(o, close, full, Thresholds(), bets="kelly", **kw)


def test_betting_ends_are_where_the_capital_reaches_two_over_alpha():
    """At one look, the capital K⁺ computed term by term from its definition (plain floats) has reached 2/α at the
    reported lower end and not a resolution step above it; likewise K⁻ at the upper end."""
    rng = np.random.default_rng(8)
    N, n, alpha = 300, 90, 0.05
    x = rng.random(n) ** 2
    lo, hi = betting_wor_cs(x, N, alpha, looks=[n])  # one look: no intersection, the first look's bisection

    def log_k(m, sign):
        def plug_in(var, i):
            return math.sqrt(2 * math.log(2 / alpha) / (var * i * math.log1p(i)))

        return _hand_log_capital(x, N, m, sign, plug_in, 0.5)

    step = 2.0**-15  # twice the first look's resolution over a bracket at most 1 wide
    target = math.log(2 / alpha)
    assert log_k(lo[0], +1) >= target > log_k(lo[0] + step, +1)
    assert log_k(hi[0], -1) >= target > log_k(hi[0] - step, -1)
    assert lo[0] < x.mean() < hi[0] and hi[0] - lo[0] < 0.5


def test_both_sequences_decide_and_the_setting_picks_one():
    rng = np.random.default_rng(12)
    o = problem_order(PAPER_SIZES, seed=0)
    far, full = _planted_pair(rng, o.total, 0.5, -0.5)
    for sequence in ("betting", "eb"):
        d = decide(o, far, full, Thresholds((-4.3,), (95.0,)), chunk=64, precision_points=2.0, sequence=sequence)
        assert d.reason == "thresholds" and set(d.sides.values()) == {"below"}
    with pytest.raises(ValueError, match="betting, eb"):
        score_path(o, far, 0.0, 1.0, sequence="bootstrap")


def _planted_pair(rng, n, p_full, shift):
    """Per-problem correctness of full and a variant that answers like full but flips a share of problems."""
    full = (rng.random(n) < p_full).astype(float)
    variant = full.copy()
    flips = rng.random(n) < abs(shift)
    variant[flips] = 0.0 if shift < 0 else 1.0
    return variant, full


def test_score_path_is_the_benchmark_average_and_exact_at_the_end():
    rng = np.random.default_rng(0)
    o = problem_order(PAPER_SIZES, seed=1)
    values = rng.random(o.total)
    by_bench = {b: [] for b in PAPER_SIZES}
    for (b, _), v in zip(o.items, values):
        by_bench[b].append(v)
    target = np.mean([np.mean(v) for v in by_bench.values()])  # the fixed design's score
    path = score_path(o, values, 0.0, 1.0, looks=o.boundaries(64))  # looked at where decide looks
    assert np.isnan(path.lo[: o.census_end]).all()
    assert path.estimate[-1] == pytest.approx(target)
    # this order's early pooled draws run about 3 standard errors high: an order the sequence misses (at most α of
    # them do), and its running intersection then stays off; the sequence's own arithmetic is exact at the end
    assert np.nanmax(path.lo) > target + 1e-9
    path = score_path(o, values, 0.0, 1.0, sequence="eb")
    assert path.lo[-1] == pytest.approx(target) and path.hi[-1] == pytest.approx(target)
    assert path.lo[800] < target < path.hi[800]


def test_decide_stops_on_thresholds_far_from_full_and_runs_on_near_ones():
    rng = np.random.default_rng(11)
    o = problem_order(PAPER_SIZES, seed=0)
    th = Thresholds((-4.3,), (95.0,))
    far, full = _planted_pair(rng, o.total, 0.5, -0.5)  # ~25 points below full
    d = decide(o, far, full, th, chunk=64, precision_points=2.0)
    assert d.reason == "thresholds" and d.problems < 400 and set(d.sides.values()) == {"below"}
    one = problem_order({"bench": 1000}, seed=0)
    full = np.zeros(1000)
    full[:600] = 1.0
    near = full.copy()
    near[:43] = 0.0  # exactly 4.3 points below full: no sequence can put it on either side before the end
    idx = np.array([i for _, i in one.items])
    d = decide(one, near[idx], full[idx], th, chunk=64, precision_points=0.5)
    assert d.reason == "exhausted" and d.problems == 1000
    assert d.minus_full == pytest.approx(-4.3) and d.lo == pytest.approx(-4.3) and d.hi == pytest.approx(-4.3)


def test_a_retention_target_keeps_a_decided_variant_running_until_its_ratio_is_narrow():
    rng = np.random.default_rng(11)
    o = problem_order(PAPER_SIZES, seed=0)
    far, full = _planted_pair(rng, o.total, 0.5, -0.5)
    th = Thresholds((), (25.0,))
    early = decide(o, far, full, th, chunk=64, precision_points=2.0)
    late = decide(o, far, full, th, chunk=64, precision_points=2.0, retention_points=5.0)
    assert early.reason == "thresholds" and late.problems > early.problems
    lo, hi = retention_interval(o, far[: late.problems], full[: late.problems])
    lo_e, hi_e = retention_interval(o, far[: early.problems], full[: early.problems])
    assert hi - lo < hi_e - lo_e and hi - lo < 2 * 2.5 * 5.0  # about ±5 %, well within a factor 2.5


def test_an_early_bootstrap_look_stops_wrong_where_the_sequence_does_not():
    """A variant 6.5 points below full (outside "within 4.3"), looked at after every chunk of 25: in some orders a
    paired bootstrap interval at an early look lies wholly above −4.3 and would stop with the wrong verdict; the
    sequence never decides 'above' in those orders."""
    rng = np.random.default_rng(5)
    problem_order({"bench": 600}, seed=0)
    variant, full = _planted_pair(rng, 600, 0.55, -0.09)
    truth = 100 * (variant.mean() - full.mean())
    assert truth < -4.3
    wrong_by_bootstrap = 0
    for seed in range(60):
        order = problem_order({"bench": 600}, seed=seed)
        idx = np.array([i for _, i in order.items])
        v, f = variant[idx], full[idx]
        for k in range(25, 600, 25):
            boot = np.random.default_rng(seed).integers(0, k, size=(2000, k))
            lo, _ = interval(100 * (v[:k][boot].mean(axis=1) - f[:k][boot].mean(axis=1)))
            if lo > -4.3:
                wrong_by_bootstrap += 1
                d = decide(order, v, f, Thresholds((-4.3,)), chunk=25, precision_points=0.0)
                assert d.sides["minus_full -4.3"] != "above"
                break
    assert wrong_by_bootstrap >= 1


def test_retention_interval_holds_the_ratio_and_closes_at_the_end():
    rng = np.random.default_rng(2)
    o = problem_order({"a": 300, "b": 200}, seed=0)
    variant, full = _planted_pair(rng, o.total, 0.6, -0.2)
    names = [b for b, _ in o.items]
    score = lambda x: np.mean([np.mean([x[i] for i in range(o.total) if names[i] == b]) for b in ("a", "b")])  # noqa: E731
    ratio = 100 * score(variant) / score(full)
    lo, hi = retention_interval(o, variant, full)
    assert lo == pytest.approx(ratio, abs=0.02) and hi == pytest.approx(ratio, abs=0.02)  # exact at the end
    lo_half, hi_half = retention_interval(o, variant[:250], full[:250])
    assert lo_half < ratio < hi_half and hi_half - lo_half < 40


def test_a_coarser_precision_stops_a_control_sooner_and_none_leaves_only_the_census():
    rng = np.random.default_rng(5)
    o = problem_order(PAPER_SIZES, seed=0)
    near, full = _planted_pair(rng, o.total, 0.5, -0.02)  # a control about 1 point below full, no threshold
    at = {p: decide(o, near, full, Thresholds(), chunk=64, precision_points=p) for p in (2.0, 4.0, None)}
    assert at[4.0].reason == at[2.0].reason == "precision"
    assert at[4.0].problems < at[2.0].problems < o.total
    for p in (2.0, 4.0):  # stopped at the first look whose half-width is within the target
        assert (at[p].hi - at[p].lo) / 2 <= p
    assert at[None].reason == "exhausted" and at[None].problems == o.total


def test_the_controls_off_null_and_diag_default_to_four_points_and_the_rest_to_precision_points():
    from grrr_stream.errors import ConfigError
    from grrr_stream.evaluation.settings import AdaptiveSettings, EvaluationOptions, build_evaluation_options

    s = AdaptiveSettings()
    assert [s.precision(v) for v in ("randrm-0", "randrm-17", "proj", "off-principal-64", "no-off-principal-8")] == [
        4.0
    ] * 5
    assert s.precision("diag") == 4.0 and len(s.thresholds("diag").labels) == 3  # diag: its thresholds, or ±4
    assert [s.precision(v) for v in ("off", "null")] == [4.0] * 2  # they feed no claim finer than null > diag
    assert [s.precision(v) for v in ("offnull", "base", "off-null-mix")] == [2.0] * 3
    mine = AdaptiveSettings(precision_points=3.0, variant_precision_points={"randrm-*": 5.0})
    assert (mine.precision("randrm-2"), mine.precision("proj"), mine.precision("diag")) == (5.0, 3.0, 3.0)
    assert AdaptiveSettings(variant_precision_points={"diag": None}).precision("diag") is None
    with pytest.raises(ConfigError, match="precision points must be > 0"):
        build_evaluation_options({"design": "adaptive", "adaptive": {"variant_precision_points": {"proj": 0}}})
    # keys hold the adaptive design by its old name (evaluation/settings.py, RECORDED_NAMES)
    keys = EvaluationOptions(design="adaptive").key_fields()["sequential"]
    assert keys["variant_precision_points"]["proj"] == 4 and keys["bets"] == "tuned"
    assert AdaptiveSettings(bets="plugin").key_fields() != AdaptiveSettings().key_fields()


def test_rounds_and_batches_answer_at_least_min_batch_problems_where_as_many_are_left():
    """The paper's benchmarks: with a chunk of 64 the rounds end at 134, 198, 326, ... (census of AIME and AMC, 70,
    then a chunk, doubling); at ``min_batch`` 256 each round is ≥ 256 problems past the last (the first too) except
    the last one, and a running variant's next batch reaches at least 256 past what it answered."""
    from grrr_stream.stats.lookahead import batch_end
    from grrr_stream.stats.order import round_ends

    order = problem_order({"math500": 500, "aime24": 30, "amc23": 40, "minerva_math": 272, "olympiadbench": 675})
    assert round_ends(order, 64, 2.0)[:3] == [134, 198, 326]
    ends = round_ends(order, 64, 2.0, min_batch=256)
    steps = np.diff([0, *ends])
    assert ends[-1] == order.total and (steps[:-1] >= 256).all() and ends[0] >= 256
    assert set(ends) <= set(order.boundaries(64)) | {order.total}
    assert round_ends(order, 64, 2.0, min_batch=10_000) == [order.total]
    ones = np.ones(134)
    rule = dict(chunk=64, precision_points=2.0)
    free = batch_end(order, ones, ones, Thresholds(), end=order.total, slack=0, **rule)
    floored = batch_end(order, ones, ones, Thresholds(), end=order.total, slack=0, min_batch=256, **rule)
    assert free == 198 and floored == next(k for k in order.boundaries(64) if k >= 134 + 256)
    near_end = batch_end(order, ones, ones, Thresholds(), end=400, slack=1.0, min_batch=256, **rule)
    assert near_end == 390  # the round's end caps it: the last boundary before 400

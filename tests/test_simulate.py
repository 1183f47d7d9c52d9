"""tools/simulate.py: its vectorised stopping rule and retention interval are the package's scalar ones
path by path, its fixed design is the plain per-benchmark mean, coverage is counted against planted
finite-population values, its table of the paper's rows is the paper's, and its betting prototype covers."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers.common import ROOT, tool

from grrr_stream.config import ClaimSettings
from grrr_stream.evaluation.settings import AdaptiveSettings
from grrr_stream.stats.anytime import Thresholds, decide, retention_interval
from grrr_stream.stats.order import problem_order

FACTS = ROOT.parent / "shared" / "PAPER_FACTS.md"  # the team's copy beside the checkouts


@pytest.fixture(scope="module")
def sim():
    return tool("simulate")


def _pairs(sim, studies, seed=1, allocation="proportional"):
    rng = np.random.default_rng(seed)
    order = problem_order(sim.SIZES, seed=0, allocation=allocation)
    acc = np.stack([sim.accuracies(rng) for _ in range(studies)])
    return order, acc, sim.draw_correct(rng, acc, order, 0.9)


@pytest.mark.parametrize("allocation", ["proportional", "weighted"])
def test_vectorised_decide_and_retention_are_the_scalar_ones(sim, allocation):
    order, _, correct = _pairs(sim, 1, allocation=allocation)
    full = correct[0, :, 1].astype(float)
    th = Thresholds((-4.3,), (95.0, 92.0))
    for v, bets in (("offnull", "plugin"), ("diag", "plugin"), ("null", "plugin"), ("offnull", "tuned")):
        x = correct[0, :, sim.VARIANTS.index(v)].astype(float)
        # None: thresholds only; tuned bets: one sequence per target
        many = sim.decide_many(order, x, full, th, chunk=64, precisions=(2.0, 5.0, None), bets=bets)
        for p, d in many.items():
            for row in range(0, 28, 3):
                one = decide(order, x[row], full[row], th, chunk=64, precision_points=p, bets=bets)
                assert (one.problems, one.reason) == (d["problems"][row], list(sim.REASON_CODES)[d["reason"][row]])
                assert (one.minus_full, one.lo, one.hi) == (d["minus_full"][row], d["lo"][row], d["hi"][row])
                assert list(one.sides.values()) == [sim.SIDE_NAMES[s] for s in d["sides"][row]]
    x = correct[0, :, sim.VARIANTS.index("diag")].astype(float)
    many = sim.decide_many(order, x, full, Thresholds((), (25.0,)), chunk=64, precisions=(2.0,), retention_points=10.0)
    for row in range(0, 28, 4):  # with a retention target: the same stops
        one = decide(
            order, x[row], full[row], Thresholds((), (25.0,)), chunk=64, precision_points=2.0, retention_points=10.0
        )
        got = many[2.0]
        assert (one.problems, one.reason) == (got["problems"][row], list(sim.REASON_CODES)[got["reason"][row]])
    x = correct[0, :4, sim.VARIANTS.index("diag")].astype(float)
    stops = np.array([134, 262, 1517, 134])
    lo, hi = sim.retention_many(order, x, full[:4], stops, tolerance=1e-3)
    for row, k in enumerate(stops):
        assert (lo[row], hi[row]) == retention_interval(order, x[row, :k], full[row, :k], tolerance=1e-3)
    lo, hi = sim.retention_many(order, x, full[:4], stops, tolerance=1e-3, target=0.02)
    for row, k in enumerate(stops[:2]):  # tuned to ±2 points
        assert (lo[row], hi[row]) == retention_interval(order, x[row, :k], full[row, :k], tolerance=1e-3, target=0.02)


def test_fixed_scores_are_benchmark_means_and_abilities_hit_the_accuracies(sim):
    order, acc, correct = _pairs(sim, 2)
    names = np.array([b for b, _ in order.items])
    x = correct[1, 5, 3]
    plain = 100 * np.mean([x[names == b].mean() for b in sim.SIZES])
    counts = correct.reshape(-1, order.total).astype(np.float32) @ sim.bench_matrix(order)
    fixed = 100 * (counts.astype(float) / np.array(list(sim.SIZES.values()))).mean(-1).reshape(correct.shape[:3])
    assert fixed[1, 5, 3] == pytest.approx(plain, abs=1e-12)
    delta = np.array(list(sim.DIFFICULTY.values()))
    from scipy.special import ndtr

    assert np.allclose(ndtr(sim.ability(acc)[..., None] - delta).mean(-1), acc, atol=1e-9)
    # the draws follow the model: 2 studies × 28 × 12 rows of 1,517 problems land near their planted accuracies
    assert abs((fixed / 100 - acc).mean()) < 0.01 and np.abs(fixed / 100 - acc).max() < 0.2


def test_a_tiny_run_counts_what_it_says(sim):
    out = sim.simulate(2, precisions=(2.0, 30.0), batch=2, resamples=100, retention_studies=2, uniform=True)
    out = out["results"]
    exact, loose = out["2.0"], out["30.0"]
    for r in (exact, loose):
        assert 0.0 < r["ratio_total"] <= 1.0 and sum(r["stop_reasons"].values()) == pytest.approx(1.0)
        assert set(r["claims"]) == set(sim.CLAIM_IDS) and r["studies"] == 2
    # full answers what its longest variant answered: never less than any variant
    assert exact["ratio_per_variant"]["full"] >= max(exact["ratio_per_variant"].values()) - 1e-12
    # a precision of ±30 points is met at the first look: every variant without thresholds stops at the census
    # (aime24 + amc23, 70 problems) plus one chunk of 64
    no_threshold = [v for v, th in sim.design(sim.UNIFORM).items() if not th.labels]
    assert len(no_threshold) == 8
    assert all(loose["ratio_per_variant"][v] == pytest.approx(134 / 1517) for v in no_threshold)
    assert exact["difference_coverage"] >= 0.9 and loose["stop_reasons"]["precision"] >= 8 / 11


def test_coverage_is_counted_against_the_planted_values(sim):
    """A batch whose adaptive intervals are replaced by the exact finite-population values covers them all;
    moved off by a point, none."""
    rng = np.random.default_rng(0)
    settings = sim.make_settings(sim.UNIFORM, precisions=(2.0,), resamples=100)
    res = sim.run_batch(rng, 1, problem_order(sim.SIZES), settings, retention=False)
    f = res["fixed"]
    for shift, want in ((0.0, 1.0), (1.0, 0.0)):
        for v, d in res["seq"][2.0].items():
            truth = f[..., sim.VARIANTS.index(v)] - f[..., 1]
            d["lo"], d["hi"] = truth + shift, truth + shift
        acc: dict = {}
        sim.summarise_batch(res, settings, acc)
        assert acc[2.0]["cover"][0] / acc[2.0]["cover"][1] == want


@pytest.mark.skipif(not FACTS.exists(), reason="the team's PAPER_FACTS.md is not here")
def test_the_paper_rows_are_the_papers(sim):
    text = FACTS.read_text()
    sim_rows = {(g, name): vals for g, name, vals in sim.PAPER_ROWS}
    sft = re.findall(
        r"^- (C\d+) ([\d.]+) / ([\d.]+) / ([\d.]+) / ([\d.]+) / ([\d.]+) / ([\d.]+)\s*$",
        text.split("Table 5 (SFT)")[1].split("Table 6")[0],
        flags=re.M,
    )
    rl = re.findall(
        r"^- (.+?) ([\d.]+) / ([\d.]+) / ([\d.]+) / ([\d.]+) / ([\d.]+) / ([\d.]+)",
        text.split("Table 6 (RL)")[1].split("Table 7")[0],
        flags=re.M,
    )
    want = {("SFT", r[0]): tuple(map(float, r[1:])) for r in sft} | {("RL", r[0]): tuple(map(float, r[1:])) for r in rl}
    assert len(want) == 12 and sim_rows == want


def test_the_betting_prototype_covers_planted_populations_and_closes(sim):
    """The betting prototype's hedged sequence misses a planted population's mean in at most α of random orders (up
    to 3 binomial standard errors) and, without replacement, closes on it to a few grid steps."""
    rng = np.random.default_rng(3)
    n, paths = 200, 120
    pop = (rng.random(n) < 0.4).astype(float)
    missed = 0
    for _ in range(paths):
        lo, hi = sim.hedged_wor_cs(pop[rng.permutation(n)], n, grid=1001)
        missed += bool(((lo > pop.mean() + 1e-9) | (hi < pop.mean() - 1e-9)).any())
    assert missed / paths <= 0.05 + 3 * (0.05 * 0.95 / paths) ** 0.5
    assert hi[-1] - lo[-1] <= 0.01 and lo[n // 2] < pop.mean() < hi[n // 2]


def test_the_oracle_floor_is_where_a_fixed_size_interval_reaches_the_precision(sim):
    """At the floor's m, a fixed-size normal interval on m problems drawn without replacement from the pooled ones
    is ±precision wide, and one problem fewer is wider: checked by drawing the m problems many times (the spread of
    the estimate measured, not the finite-population formula the floor uses)."""
    order, _, correct = _pairs(sim, 1)
    full, variant = (correct[0, 5, sim.VARIANTS.index(v)].astype(np.float64) for v in ("full", "proj"))
    end = order.census_end
    m = int(sim.oracle_problems(order, variant[None], full[None], 2.0)[0]) - end
    weight = np.array([order.weight[b] for b, _ in order.items[end:]])
    values = weight * (variant[end:] - full[end:])
    rng = np.random.default_rng(0)
    scale = 100 * len(order.weight) / len(order.sizes)  # the pooled part's mean → points of the score

    def half_width(k):
        means = [values[rng.permutation(values.size)[:k]].mean() for _ in range(4000)]
        return 1.959964 * scale * np.std(means)

    assert 0 < m < values.size
    assert 1.9 < half_width(m) <= 2.06 and half_width(max(m - 40, 1)) > 2.0


def test_the_simulated_adaptive_counts_are_the_products(sim):
    """A count claim's interval in the simulation (transitions surely / possibly on the claim's side) is the one
    stats/claims_adaptive.py gives the report from per-transition intervals with those sides."""
    from grrr_stream.stats.claims_adaptive import _statistics

    cs = ClaimSettings()
    sides = np.array([1, 1, 0, -1, 0, 1], dtype=np.int8)  # offnull's retention against the 95 % floor
    # intervals with those sides: above → wholly ≥ 95, open → across it, below → wholly under it
    lo = np.where(sides == 1, 96.0, np.where(sides == 0, 90.0, 80.0))
    hi = np.where(sides == -1, 90.0, 99.0)
    at_floor = next(fn for stat, _, _, _, fn in _statistics(cs) if stat == "at_floor")
    _, product_lo, product_hi = at_floor(lo, lo, hi)

    offnull = {"sides": np.stack([np.ones_like(sides), sides, sides], axis=-1)}
    diag = {"sides": -np.ones((6, 1), dtype=np.int8)}
    surely, possibly = sim._per_transition_ends(offnull, diag)
    assert (surely["floor"].sum(), possibly["floor"].sum()) == (product_lo, product_hi) == (3, 5)
    # the report's rule on that interval: 3/6 and 5/6 against shares 0.5, 0.8 and 0.9
    verdicts = [float(sim.at_least(np.array(3), np.array(5), np.array(6), t)) for t in (0.5, 0.8, 0.9)]
    assert verdicts == [1.0, 0.0, -1.0]


def test_at_the_defaults_the_controls_stop_at_four_points_and_a_null_precision_on_thresholds_alone(sim):
    """The simulation follows the product's per-variant precision: at the ±30 target a control (and off) still stops
    at ±4 (so later than at the census plus a chunk), offnull at ±30; diag mapped to null never stops on
    precision."""
    rng = np.random.default_rng(3)
    settings = sim.make_settings(AdaptiveSettings(), precisions=(30.0,), resamples=100)
    res = sim.run_batch(rng, 1, problem_order(sim.SIZES), settings, retention=False)["seq"][30.0]
    assert (res["randrm-0"]["reason"] == 1).any() and (res["randrm-0"]["problems"] > 134).all()
    assert (res["off"]["problems"] > 134).all()  # off too stops at ±4 by default
    assert (res["offnull"]["problems"] == 134).all()  # on the ±30 target itself: the first look after the census
    seq = AdaptiveSettings(variant_precision_points={"diag": None})  # diag on its thresholds alone
    res = sim.run_batch(rng, 1, problem_order(sim.SIZES), {**settings, "adaptive": seq}, retention=False)
    assert not (res["seq"][30.0]["diag"]["reason"] == 1).any()  # reason codes: 0 thresholds, 1 precision, 2 exhausted


def test_equal_allocation_beats_proportional_when_a_small_benchmark_weighs_as_much(sim):
    """Planted: a benchmark of 2,000 problems and one of 200, each half of the unweighted mean, with the same spread
    of paired differences. Drawing in proportion to size (today's oracle without a census, and the stratified
    proportional one) starves the small benchmark; equal draws need fewer problems, Neyman's no more than equal.
    At the equal allocation a stratified sample is ±precision wide (drawn, not the formula), and with 15 fewer
    draws per benchmark wider."""
    sizes = {"big": 2000, "small": 200}
    order = problem_order(sizes, seed=0, max_weight=100.0)  # no census: every problem pooled, drawn by size
    assert order.census == ()
    rng = np.random.default_rng(5)
    full = (rng.random(order.total) < 0.5).astype(float)
    variant = np.where(rng.random(order.total) < 0.15, 1 - full, full)  # 15 % flipped on both benchmarks
    by = {k: int(sim.allocation_problems(order, variant[None], full[None], 5.0, k)[0]) for k in sim.ALLOCATIONS}
    today = int(sim.oracle_problems(order, variant[None], full[None], 5.0)[0])
    assert by["equal"] < 0.7 * min(by["proportional"], today)
    assert by["neyman"] <= by["equal"]
    split = sim.allocation_problems(order, variant[None], full[None], 5.0, "equal", split=True)[0]
    names = np.array([b for b, _ in order.items])
    diffs = [(variant - full)[names == b] for b in sizes]

    def half_width(n):
        means = [np.mean([d[rng.permutation(d.size)[:k]].mean() for d, k in zip(diffs, n)]) for _ in range(3000)]
        return 1.959964 * 100 * np.std(means)

    assert split[1] < sizes["small"] and 4.7 < half_width(split) <= 5.2
    assert half_width(split - 15) > 5.2


def test_the_disagreement_scenario_flips_near_the_target(sim):
    """Planted accuracies (full at 50 % on every benchmark, the close variants equal to it, diag at 20 %): each
    variant disagrees with full on the target share of problems (a variant further from full than the target on
    the gap), and keeps its accuracy, within 4 binomial standard errors over 28 × 1,517 problems; the measured rates
    likewise; the scenario's own accuracies stay in their ranges."""
    order = problem_order(sim.SIZES, seed=0)
    acc = np.full((1, 28, len(sim.VARIANTS), len(sim.SIZES)), 0.5)
    acc[:, :, sim.VARIANTS.index("diag")] = 0.2
    n = 28 * order.total
    for rates in (0.046, dict(sim.MEASURED_FLIPS)):
        correct = sim.draw_flipped(np.random.default_rng(7), acc, order, rates)
        f = correct[:, :, sim.VARIANTS.index("full")]
        for j, v in enumerate(sim.VARIANTS):
            want = max(sim.flip_rates(rates)[j], 0.3 if v == "diag" else 0.0)
            got = (correct[:, :, j] != f).mean()
            tol = 4 * np.sqrt(max(want * (1 - want), 1e-4) / n)
            assert abs(got - want) <= tol, (v, got, want)
            assert abs(correct[:, :, j].mean() - acc[0, 0, j, 0]) <= 4 * np.sqrt(0.25 / n), v
    assert sim.flip_rates(dict(sim.MEASURED_FLIPS))[sim.VARIANTS.index("randrm-2")] == 0.011
    drawn = sim.scenario_accuracies(np.random.default_rng(0))
    full = drawn[:, sim.VARIANTS.index("full")]
    aime = list(sim.SIZES).index("aime24")
    assert (full[:, aime] <= 0.4).all() and (full[:, aime] >= 0.1).all() and (full >= 0.1).all() and (full <= 0.8).all()
    ratio = drawn[:, sim.VARIANTS.index("diag")] / full
    assert (ratio >= 0.2 - 1e-9).all() and (ratio <= 0.5 + 1e-9).all()
    close = np.abs(drawn[:, sim.VARIANTS.index("off")] - full)
    assert (close <= 0.05 + 1e-9).all()


def test_the_allocation_run_counts_the_census_and_each_orders_first_look(sim):
    """`simulate.py allocation`: every share counts the census (aime24, amc23) and whole looks of the pooled draws,
    one per pair and allocation, and a look's miss is counted against the planted weighted mean."""
    out = sim.allocation_paths(paths=4, disagreement=0.046, precision=2.0, chunk=64, seed=3)
    census, total = sim.SIZES["aime24"] + sim.SIZES["amc23"], sum(sim.SIZES.values())
    assert set(out) == {"proportional", "weighted"}
    for r in out.values():
        assert len(r["share"]) == len(r["missed"]) == 4
        for s in r["share"]:
            pooled = round(s * total) - census
            assert 0 < pooled <= total - census and (pooled % 64 == 0 or pooled == total - census), s

"""The SFT vs RL table's group statistics (grrr_stream/channels/groups.py) on planted toys with known answers:
the group's mean ratio, its joint bootstrap interval (against a brute-force float64 bootstrap and by its
coverage of the planted value) and its pooled count-matched null (p small under planted enrichment, uniform
without it)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from grrr_stream.channels.groups import COMPONENTS, Member, group_enrichment

MODULES = [("q_proj", "reader"), ("o_proj", "writer"), ("up_proj", "reader"), ("down_proj", "writer")]


@dataclass
class Toy:
    """A planted transition: its energies, kept for the brute-force reference; :func:`enrich` takes its Member."""

    transition: str
    energies: np.ndarray
    records: list
    channels: np.ndarray


def enrich(toys: list[Toy], **kw) -> dict:
    return group_enrichment([Member.of(t.transition, t.energies, t.records, t.channels) for t in toys], **kw)


def records(n: int) -> list[dict]:
    return [
        {
            "layer": i // len(MODULES),
            "module": MODULES[i % len(MODULES)][0],
            "expert": None,
            "side": MODULES[i % len(MODULES)][1],
        }
        for i in range(n)
    ]


def planted(rng, name: str, *, matrices: int, H: int, channels, factor: float) -> Toy:
    """Energies Gamma(2) per matrix, channel and component, times a matrix scale (lognormal: matrices carry
    different amounts of the update) and ``factor`` on the planted channels: the population ratio is
    factor·k / (factor·k + H − k) · H / k for every component and for the total."""
    e = rng.gamma(2.0, size=(matrices, H, 3)) * rng.lognormal(0.0, 0.5, size=(matrices, 1, 1))
    e[:, channels, :] *= factor
    return Toy(name, e, records(matrices), np.asarray(channels, dtype=np.int64))


def population_ratio(factor: float, k: int, H: int) -> float:
    return factor * k / (factor * k + H - k) * H / k


def test_constant_energies_give_the_planted_mean_ratio_and_a_zero_width_interval():
    H, k = 32, 4
    members = []
    for name, f in (("a", 2.0), ("b", 5.0)):
        e = np.ones((6, H, 3))
        e[:, :k, :] = f
        members.append(Toy(name, e, records(6), np.arange(k)))
    got = enrich(members, draws=300, seed=0)
    want = (population_ratio(2.0, k, H) + population_ratio(5.0, k, H)) / 2
    for c in COMPONENTS:
        assert got[c]["ratio"] == pytest.approx(want, rel=1e-12)
        assert got[c]["ci_lo"] == pytest.approx(want, rel=1e-12) and got[c]["ci_hi"] == pytest.approx(want, rel=1e-12)
        assert got[c]["p_value"] == pytest.approx(1 / 301)  # no random set of 4 channels reaches the planted ones


def _brute_force(members: list[Toy], comp: int, draws: int, seed: int) -> tuple[float, float, float]:
    """Independent float64 reference: matrices resampled by explicit indices, one draw shared by the members
    (same matrix list); random sets as explicit permutations applied to every member's set."""
    rng = np.random.default_rng(seed + 12345)
    n, H = members[0].energies.shape[:2]
    e = [m.energies[:, :, comp] if comp < 3 else m.energies.sum(axis=2) for m in members]
    boot = np.empty(draws)
    for d in range(draws):
        idx = rng.integers(0, n, size=n)
        boot[d] = np.mean(
            [x[idx][:, m.channels].sum() / x[idx].sum() * H / len(m.channels) for x, m in zip(e, members)]
        )
    null = np.empty(draws)
    for d in range(draws):
        perm = rng.permutation(H)
        null[d] = np.mean(
            [x.sum(0)[perm[m.channels]].sum() / x.sum() * H / len(m.channels) for x, m in zip(e, members)]
        )
    obs = np.mean([x[:, m.channels].sum() / x.sum() * H / len(m.channels) for x, m in zip(e, members)])
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return lo, hi, (1 + np.sum(null >= obs)) / (1 + draws)


def test_interval_and_p_match_a_brute_force_float64_bootstrap():
    rng = np.random.default_rng(7)
    H = 48
    # a parent and its child keep most outlier channels: overlapping sets, one matrix list
    members = [
        planted(rng, "sft1", matrices=24, H=H, channels=[1, 5, 9, 20], factor=1.3),
        planted(rng, "sft2", matrices=24, H=H, channels=[1, 5, 9, 33], factor=1.1),
    ]
    got = enrich(members, draws=4000, seed=3)
    for c, comp in enumerate(COMPONENTS):
        lo, hi, p = _brute_force(members, c, 4000, 3)
        width = hi - lo
        assert got[comp]["ci_lo"] == pytest.approx(lo, abs=0.15 * width)
        assert got[comp]["ci_hi"] == pytest.approx(hi, abs=0.15 * width)
        assert got[comp]["p_value"] == pytest.approx(p, abs=0.03)


def test_a_duplicated_step_changes_neither_interval_nor_p():
    """Joint resampling and one permutation per draw: two copies of one step are one step's evidence (drawn
    independently, the copies would narrow the interval by about √2)."""
    rng = np.random.default_rng(1)
    one = planted(rng, "a", matrices=20, H=40, channels=[2, 3, 11], factor=1.2)
    copy = Toy("b", one.energies.copy(), list(one.records), one.channels)
    single = enrich([one], draws=500, seed=0)
    double = enrich([one, copy], draws=500, seed=0)
    for c in COMPONENTS:
        for k in ("ratio", "ci_lo", "ci_hi", "p_value", "null_q975"):
            assert double[c][k] == pytest.approx(single[c][k], rel=1e-12)


def test_coverage_of_the_planted_ratio_and_p_values_with_and_without_enrichment():
    """Over independent toys: the 95 % interval covers the planted group ratio in about 95 % of them; with
    enrichment planted p is at its floor, without it p is uniform (few below 0.05, mean near 0.5)."""
    rng = np.random.default_rng(2026)
    H, k, reps, draws = 64, 4, 60, 400
    covered, p_none, p_planted = 0, [], []
    for r in range(reps):
        sets = [rng.choice(H, size=k, replace=False) for _ in range(2)]
        factors = (1.5, 2.0)
        members = [
            planted(rng, f"t{i}", matrices=30, H=H, channels=s, factor=f) for i, (s, f) in enumerate(zip(sets, factors))
        ]
        want = np.mean([population_ratio(f, k, H) for f in factors])
        got = enrich(members, draws=draws, seed=r)["total"]
        covered += got["ci_lo"] <= want <= got["ci_hi"]
        p_planted.append(got["p_value"])
        none = [planted(rng, f"n{i}", matrices=30, H=H, channels=s, factor=1.0) for i, s in enumerate(sets)]
        p_none.append(enrich(none, draws=draws, seed=r)["diag"]["p_value"])
    assert 0.85 <= covered / reps <= 1.0
    assert max(p_planted) == pytest.approx(1 / (1 + draws))
    assert np.mean(np.asarray(p_none) < 0.05) <= 0.15 and 0.3 <= np.mean(p_none) <= 0.7


def test_steps_without_outlier_channels_are_left_out():
    rng = np.random.default_rng(0)
    a = planted(rng, "a", matrices=10, H=32, channels=[0, 1], factor=3.0)
    empty = Toy("e", rng.random((10, 32, 3)), records(10), np.array([], dtype=np.int64))
    both = enrich([a, empty], draws=200, seed=0)
    alone = enrich([a], draws=200, seed=0)
    assert both["off"]["ratio"] == pytest.approx(alone["off"]["ratio"], rel=1e-12)
    assert np.isnan(enrich([empty], draws=200, seed=0)["off"]["ratio"])


def test_a_kept_member_gives_the_same_group_statistics_as_the_store_energies(tmp_path):
    """What a sweep's channel-stats unit keeps (Member.save) is all the group statistics read: loaded back, the
    same numbers bit for bit, without the (matrices, H, 3) energies."""
    rng = np.random.default_rng(5)
    toys = [
        planted(rng, "a", matrices=12, H=40, channels=[1, 4, 9], factor=1.5),
        planted(rng, "b", matrices=12, H=40, channels=[1, 4, 30], factor=1.2),
    ]
    direct = [Member.of(t.transition, t.energies, t.records, t.channels) for t in toys]
    for m in direct:
        m.save(tmp_path / f"{m.transition}.npz")
    loaded = [Member.load(tmp_path / f"{t.transition}.npz") for t in toys]
    assert [m.signature for m in loaded] == [m.signature for m in direct] and loaded[0].hidden == 40
    assert group_enrichment(loaded, draws=300, seed=1) == group_enrichment(direct, draws=300, seed=1)

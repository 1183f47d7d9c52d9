"""The verdict box's claims over sets (issue 63), on planted rows with answers computed by hand here: transitions
that share a base count once, the set claims are one family (Holm), f_diag is read against its isotropic value,
"consistent" says what it could have seen, values outside the paper's range are not plain "holds", and the paper's
own visible rows, run through the box as a sweep, do not contradict the paper."""

from __future__ import annotations

import math

import pytest
from scipy.optimize import brentq

from grrr_stream.report.paper_claims import CLAIMS
from grrr_stream.report.paper_rows import ROWS
from grrr_stream.report.verdict import (
    CONSISTENT,
    CONTRADICTS,
    FAILS,
    HOLDS,
    NOT_COMPARABLE,
    OUTSIDE,
    TOO_FEW,
    UNRESOLVED,
    verdicts,
)
from grrr_stream.report.verdict_energy import paper_ratios
from grrr_stream.report.verdict_rows import p_text
from grrr_stream.stats.family import benjamini_hochberg, holm


def _row(stat, variant, group, n, set_name="all evaluated", threshold=None):
    return dict(statistic=stat, variant=variant, reference="full", set=set_name, group=group, value=1.0, ci_lo=0.0,
                ci_hi=2.0, transitions=n, threshold=threshold)  # fmt: skip


def _diff(t, variant, minus_full=0.0, lo=None, hi=None, ret=None, rlo=None, rhi=None, **extra):
    r = {"transition": t, "variant": variant, "minus_full": minus_full, "minus_full_ci_lo": minus_full if lo is None
         else lo, "minus_full_ci_hi": minus_full if hi is None else hi}  # fmt: skip
    if ret is not None:
        r.update(retention_full_pct=ret, retention_full_ci_lo=ret if rlo is None else rlo,
                 retention_full_ci_hi=ret if rhi is None else rhi)  # fmt: skip
    return {**r, **extra}


def _box(rows, diffs=(), trs=(), comps=(), chains=None, group="RL", **kw):
    steps = {d["transition"] for d in diffs} | {t["transition"] for t in trs}
    info = [{"transition": t, "informative": True} for t in steps]
    box = verdicts(list(rows), list(trs), list(comps), group_of=lambda r: group, steps=steps, differences=list(diffs),
                   informative=info, chains=chains, **kw)  # fmt: skip
    return {v.claim.id: v for v in box}


WITHIN = _row("within_k", "offnull", "all", 4, "informative", 4.3)
# chain A: two transitions 8–9 points below full; chain B one 9 below; chain C one within
WITHIN_DIFFS = [
    _diff("a1", "offnull", -9.0, -12.0, -6.0),
    _diff("a2", "offnull", -8.0, -11.0, -5.0),
    _diff("b", "offnull", -9.0, -12.0, -6.0),
    _diff("c", "offnull", -0.5, -2.5, 1.0),
]
CHAINS = {"a1": "A", "a2": "A", "b": "B", "c": "C"}


def test_transitions_that_share_a_base_count_once():
    """1 of 3 chains within 4.3 points against the paper's 96 % taken as fixed: P(Bin(3, 0.96) ≤ 1) =
    0.04³ + 3·0.96·0.04² = 0.004672; counted by transition it would be 1 of 4, P(Bin(4, 0.96) ≤ 1) = 0.000248."""
    v = _box([WITHIN], WITHIN_DIFFS, chains=CHAINS)["offnull-within"]
    assert v.set.startswith("4 transitions in 3 chains")
    assert [m.name.split(" (")[0] for m in v.members] == ["OffNull vs Full on chain A", "OffNull vs Full on chain B",
                                                          "OffNull vs Full on chain C"]  # fmt: skip
    assert v.members[0].value.startswith("−8.5 points [−11.5, −5.5]")  # the mean of the chain's transitions
    assert [m.outcome for m in v.members] == [FAILS, FAILS, HOLDS]
    assert "1 of 3 chains meet it" in v.test and f"p = {0.04**3 + 3 * 0.96 * 0.04**2:.2g}" in v.test
    assert v.verdict == CONTRADICTS and v.css == "fails"
    alone = _box([WITHIN], WITHIN_DIFFS)["offnull-within"]  # no chains given: each transition its own
    assert "1 of 4 chains" in alone.test and "p < 0.001" in alone.test  # 0.000248


def test_one_transition_per_chain_that_leaves_it_open_is_not_resolved():
    # chain C's interval reaches below −4.3: the count is 0 or 1 of 2 (p = 0.0016 or 0.078)
    diffs = [_diff("b", "offnull", -9.0, -12.0, -6.0), _diff("c", "offnull", -3.0, -6.0, 0.0)]
    v = _box([WITHIN], diffs)["offnull-within"]
    assert v.verdict == UNRESOLVED and "0.0016–0.078 over the intervals over problems" in v.p


def test_the_set_claims_are_one_family_adjusted_by_holm():
    """Two claims in the family: within (p1 = 0.004672) and the ≥ 95 % floor (3 chains all below 95 % against a
    fixed 22/28: p2 = (6/28)³ = 0.009840). Holm: 2·p1 = 0.009344, max(2·p1, p2) = 0.009840."""
    floor = _row("at_floor", "offnull", "all", 4, threshold=95.0)
    diffs = [{**d, "retention_full_pct": 80.0, "retention_full_ci_lo": 78.0, "retention_full_ci_hi": 82.0}
             for d in WITHIN_DIFFS]  # fmt: skip
    box = _box([WITHIN, floor], diffs, chains=CHAINS)
    p1, p2 = 0.04**3 + 3 * 0.96 * 0.04**2, (6 / 28) ** 3
    assert holm([p1, p2]) == pytest.approx([2 * p1, p2])
    assert f"Holm-adjusted over 2 claims: p = {2 * p1:.2g}" in box["offnull-within"].p
    assert f"Holm-adjusted over 2 claims: p = {p2:.2g}" in box["offnull-floor"].p
    assert box["offnull-within"].verdict == box["offnull-floor"].verdict == CONTRADICTS
    # Benjamini–Hochberg on the same pair: q2 = p2·2/2 = p2, q1 = min(p1·2/1, q2) = 2·p1 (here below p2)
    assert benjamini_hochberg([p1, p2]) == pytest.approx([2 * p1, p2])
    assert benjamini_hochberg([0.02, 0.03]) == pytest.approx([0.03, 0.03])  # min(0.04, 0.03)
    bh = _box([WITHIN, floor], diffs, chains=CHAINS, adjust="bh")
    assert "Benjamini–Hochberg-adjusted over 2 claims" in bh["offnull-within"].p
    # Holm by hand on four: sorted 0.01, 0.03, 0.04, 0.5 → 0.04, 0.09, max(0.09, 0.08), 0.5
    assert holm([0.04, 0.01, 0.5, 0.03]) == pytest.approx([0.09, 0.04, 0.5, 0.09])


def test_a_consistent_row_says_what_its_size_could_have_seen():
    """3 of 3 chains within: consistent. Alone in the family (level 0.05), the test rejects at k ≤ 1 (P(Bin(3,
    0.96) ≤ 1) = 0.0047 < 0.05 ≤ P(≤ 2) = 0.115); its power P(Bin(3, θ) ≤ 1) = 3q² − 2q³ (q = 1 − θ) reaches 80 %
    at θ = 28.7 %."""
    diffs = [_diff(t, "offnull", 0.5, -1.0, 2.0) for t in ("a1", "a2", "b", "c")]
    v = _box([WITHIN], diffs, chains=CHAINS)["offnull-within"]
    assert v.verdict == CONSISTENT and v.css == "consistent"  # not the green of "holds"
    q = brentq(lambda q: 3 * q * q - 2 * q**3 - 0.8, 0.0, 1.0)
    assert f"≤ {100 * (1 - q):.0f} % (the paper's 96 %)" in v.detect and "80 % power at level 0.05" in v.detect


def test_a_median_at_the_chain_level_and_too_few_chains():
    med = _row("retention_median_pct", "offnull", "all", 6)
    # six transitions in three chains, all below 99: 3 of 3 below, the sign test's p = 2/8, which no outcome beats
    low = [_diff(f"t{i}", "offnull", ret=85.0 + i, rlo=84.0 + i, rhi=86.0 + i) for i in range(6)]
    chains = {f"t{i}": f"c{i // 2}" for i in range(6)}
    v = _box([med], low, chains=chains)["offnull-median"]
    assert v.verdict == TOO_FEW and "3 chains" in v.set and "0 chains above 99 %, 3 below" in v.test
    assert "even the most extreme outcome at this size gives p = 0.25" in v.p
    # each its own chain: 0 above, 6 below, p = 2/64, alone in the family: contradicts
    own = _box([med], low)["offnull-median"]
    assert own.verdict == CONTRADICTS and f"p = {2 / 64:.2g}" in own.test
    assert _box([med])["offnull-median"].verdict == NOT_COMPARABLE  # no per-transition values


def test_null_above_diag_on_the_paired_difference():
    rows = [_row("retention_median_pct", "null", "all", 5), _row("retention_median_pct", "diag", "all", 5)]
    # paired null − diag below 0 on all five, although the two retentions' intervals overlap: 1/32 one-sided
    diffs = [_diff(f"t{i}", "null", ret=60.0, rlo=50.0, rhi=70.0, minus_diag=-2.0, minus_diag_ci_lo=-3.0,
                   minus_diag_ci_hi=-1.0) for i in range(5)]  # fmt: skip
    diffs += [_diff(f"t{i}", "diag", ret=64.0, rlo=54.0, rhi=74.0) for i in range(5)]
    v = _box(rows, diffs)["null-above-diag"]
    assert "paired over problems" in v.test and f"p = {1 / 32:.2g}" in v.test
    assert v.verdict == CONTRADICTS and all(m.outcome == FAILS for m in v.members)
    # without the paired difference (the adaptive design's rows) the overlapping intervals leave every side open
    unpaired = [{k: x for k, x in d.items() if not k.startswith("minus_diag")} for d in diffs]
    w = _box(rows, unpaired)["null-above-diag"]
    assert "not paired" in w.test and all(m.outcome == UNRESOLVED for m in w.members) and w.verdict == UNRESOLVED


def _rl(t, ratio, iso=0.0056):
    return {"transition": t, "f_diag_mean": ratio * iso, "f_diag_iso": iso, "f_diag_vs_iso": ratio}


def test_f_diag_is_read_against_its_isotropic_value_at_each_sides_shapes():
    tight, loose = min(paper_ratios(0.011)), max(paper_ratios(0.011))
    # 0.011 over Qwen2.5-1.5B's isotropic 0.00042 and Qwen3-14B's 0.000136 (tests/geometry/test_isotropic.py)
    assert tight == pytest.approx(26.2, abs=0.2) and loose == pytest.approx(80.7, abs=0.3)
    # f_diag 0.024–0.032 on the demo's shapes is 4–6× isotropic: every reading of the paper's bound holds
    ok = _box([], trs=[_rl("a", 4.3), _rl("b", 5.7)])["rl-fdiag"]
    assert ok.verdict == CONSISTENT and [m.outcome for m in ok.members] == [HOLDS, HOLDS]
    assert "4.3–5.7× its isotropic value" in ok.reason
    # 100× is beyond every reading: "every RL step" has a counterexample (a fixed rate of 1)
    bad = _box([], trs=[_rl("a", 4.3), _rl("b", 100.0)])["rl-fdiag"]
    assert bad.verdict == CONTRADICTS and [m.outcome for m in bad.members] == [HOLDS, FAILS]
    # 40× is within the 1.5B model's reading and beyond the 7B-14B ones: not resolved
    mid = _box([], trs=[_rl("a", 40.0)])["rl-fdiag"]
    assert mid.members[0].outcome == UNRESOLVED and mid.verdict == UNRESOLVED
    # a store whose summary predates the isotropic value: not comparable, and said why
    old = _box([], trs=[{"transition": "a", "f_diag_mean": 0.03}])["rl-fdiag"]
    assert old.verdict == NOT_COMPARABLE and "without an isotropic value" in old.reason


def _cmp(median, lo, hi, band=0.01, kind="independent"):
    return {"label": "x", "kind": kind, "median_cos_off": median, "ci_lo": lo, "ci_hi": hi, "p_value": 1e-4,
            "null_draws": 10_000, "null_lo": -band, "null_hi": band, "verdict": "aligned", "norm_sft": 1.0,
            "norm_incr": 0.1}  # fmt: skip


def test_values_outside_the_papers_range_are_not_plain_holds():
    inside = _box([], comps=[_cmp(0.05, 0.04, 0.06), _cmp(0.12, 0.10, 0.14)])["indep-above"]
    assert inside.verdict == HOLDS and "within the paper's range 0.003–0.146" in inside.reason
    far = _box([], comps=[_cmp(0.90, 0.89, 0.92), _cmp(0.12, 0.10, 0.14)])["indep-above"]
    assert far.verdict == OUTSIDE and far.css == "outside" and "6.2× the paper's largest 0.146" in far.reason


def test_a_stepwise_cosine_whose_interval_reaches_inside_is_not_resolved():
    box = _box([], comps=[_cmp(0.01, 0.005, 0.03, band=0.001, kind="sequential")])
    assert box["seq-cos"].verdict == UNRESOLVED and "none lies wholly beyond" in box["seq-cos"].reason
    beyond = _box([], comps=[_cmp(0.3, 0.25, 0.35, band=0.001, kind="sequential")])
    assert beyond["seq-cos"].verdict == FAILS
    inside = _box([], comps=[_cmp(0.002, -0.001, 0.004, band=0.003, kind="sequential")])
    assert inside["seq-cos"].verdict == HOLDS and inside["rl-step-size"].verdict == HOLDS


def test_p_values_are_not_rounded_up_to_one():
    assert p_text(0.998) == "p = 0.998" and p_text(1.0) == "p = 1" and p_text(0.0312) == "p = 0.031"
    assert p_text(0.0004) == "p < 0.001"


def test_the_papers_own_rows_do_not_contradict_the_paper():
    """Tables 5 and 6's visible rows, run through the box as a sweep (a chain per C number): 6 SFT and 6 RL rows
    in 6 chains. None of the paper's claims may read as contradicted by the paper's own numbers."""
    diffs, groups, chains = [], {}, {}
    for i, (group, chain, _, values) in enumerate(ROWS):
        t = f"r{i}"
        acc = dict(zip(("base", "full", "diag", "off", "null", "offnull"), values))
        groups[t], chains[t] = group, chain
        for v in ("diag", "null", "offnull"):
            diffs.append(_diff(t, v, acc[v] - acc["full"], ret=100 * acc[v] / acc["full"],
                               minus_diag=acc[v] - acc["diag"], minus_diag_ci_lo=acc[v] - acc["diag"],
                               minus_diag_ci_hi=acc[v] - acc["diag"]))  # fmt: skip
    rows = [_row(*c.statistic[1:2], c.statistic[4], 12, c.statistic[3]) | {"statistic": c.statistic[0]}
            for c in CLAIMS if c.source == "claims"]  # fmt: skip
    rows.append(_row("retention_median_pct", "diag", "all", 12))
    for r in rows:
        r["threshold"] = {"within_k": 4.3, "at_floor": 95.0, "at_most_ceiling": 25.0}.get(r["statistic"])
    informative = [{"transition": t, "informative": values[1] - values[0] >= 1.0}
                   for t, (_, _, _, values) in zip(groups, ROWS)]  # fmt: skip
    box = verdicts(rows, [], [], group_of=lambda r: groups.get(r["transition"]), steps=set(groups),
                   differences=diffs, informative=informative, chains=chains)  # fmt: skip
    said = {v.claim.id: v.verdict for v in box if v.claim.source == "claims"}
    assert CONTRADICTS not in said.values(), said
    assert math.isclose(100 * 6.4 / 49.2, 13.0, abs_tol=0.05)  # C1's diag retention, the paper's heavy distillation


def test_a_claim_names_the_transitions_it_could_not_use():
    """A claim never silently covers fewer transitions: an RL step without an isotropic value, and an evaluation
    without per-problem results, are named beside the claims they would have been in."""
    fd = _box([], trs=[_rl("a", 4.3), {"transition": "b", "f_diag_mean": 0.03}])["rl-fdiag"]
    assert fd.verdict == CONSISTENT and len(fd.members) == 1
    assert "left out: 1 RL step without an isotropic value" in fd.set
    why = "no per-problem results (evaluated by an older version)"
    box = _box([WITHIN], WITHIN_DIFFS, chains=CHAINS, left_out=[{"transition": "d", "why": why}], names={"d": "b → s"})
    assert box["offnull-within"].set.endswith(f"left out: b → s: {why}")
    assert all(f"left out: b → s: {why}" in v.set for v in box.values() if v.claim.source == "claims")
    assert "left out" not in box["rl-fdiag"].set

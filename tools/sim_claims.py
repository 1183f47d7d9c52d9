"""The verdict box's evaluation claims on simulated studies, for tools/simulate_designs.py: each claim's verdict
under the fixed design (at the point estimates, and by the report's rule with a joint bootstrap over problems)
and under the sequential design (at its point estimates, where a side stayed open; and by the report's rule on
the intervals stats/claims_sequential.py gives the product's claims: a count from the transitions surely on the
claim's side to those possibly on it, a median from the median of the lower ends to that of the upper ends), by
the interval rule: at_least_fraction (three-way on the interval's two ends), contains (the paper's whole percent
± 0.5 inside the interval), above_other (one interval wholly above the other). This compares the designs on the
intervals alone; the verdict box itself tests claims over sets exactly against the paper's counts
(grrr_stream/report/verdict_sets.py), which these studies do not model. Verdicts are coded 1 holds, −1 does not
hold, 0 not resolved, NaN not computed."""

from __future__ import annotations

import warnings

import numpy as np

from grrr_stream.report.paper_claims import CLAIMS
from grrr_stream.stats.claims import TIE

_BOX = {c.id: c for c in CLAIMS if c.source == "claims"}
# the paper's "≥ 92 % in 25 of 28": the design decides it (offnull's second floor), the verdict box has no row
EXTRA = {"offnull-floor-92": 25 / 28}
CLAIM_IDS = (
    "offnull-within",
    "offnull-median",
    "offnull-floor",
    "offnull-floor-92",
    "diag-median-sft",
    "diag-median-rl",
    "diag-ceiling-sft",
    "null-above-diag",
)


def _nanmedian(x, axis):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(x, axis=axis)


def _ratio(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b != 0, 100.0 * a / np.where(b != 0, b, 1.0), np.nan)


def at_least(lo, hi, n, target):
    """at_least_fraction by the interval rule: holds when both ends of the count's interval reach the paper's share."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ok_lo, ok_hi = lo / n >= target - 1e-9, hi / n >= target - 1e-9
    v = np.where(ok_lo & ok_hi, 1.0, np.where(~(ok_lo | ok_hi), -1.0, 0.0))
    return np.where(n > 0, v, np.nan)


def contains(lo, hi, target):
    """contains by the interval rule: the paper's whole percent (± 0.5) inside the interval."""
    v = np.where((lo - 0.5 <= target) & (target < hi + 0.5), 1.0, -1.0)
    return np.where(np.isfinite(lo) & np.isfinite(hi), v, np.nan)


def above(a_lo, a_hi, b_lo, b_hi):
    v = np.where(a_lo > b_hi, 1.0, np.where(a_hi < b_lo, -1.0, 0.0))
    return np.where(np.isfinite(a_lo + a_hi + b_lo + b_hi), v, np.nan)


def _side_or_point(side, point_ok):
    """A transition's verdict on one threshold: the side its sequence decided, else its point estimate's."""
    return np.where(side == 0, point_ok, side == 1)


def _per_transition(d_base, d_off, d_diag, cs):
    """The sequential design's per-transition booleans: informative, within, ≥ floor, ≥ second floor,
    ≤ ceiling (diag: its last threshold, whatever it is compared with before it)."""
    return {
        "informative": _side_or_point(-d_base["sides"][..., 0], d_base["minus_full"] <= -cs.informative_points + TIE),
        "within": _side_or_point(d_off["sides"][..., 0], d_off["minus_full"] >= -cs.within_points - TIE),
        "floor": _side_or_point(d_off["sides"][..., 1], d_off["retention"] >= cs.retention_floor_pct - TIE),
        "floor92": _side_or_point(d_off["sides"][..., 2], d_off["retention"] >= cs.retention_second_floor_pct - TIE),
        "ceiling": _side_or_point(-d_diag["sides"][..., -1], d_diag["retention"] <= cs.retention_ceiling_pct + TIE),
    }


def _per_transition_ends(d_off, d_diag):
    """The sequential design's per-transition sides as the product's claims read them (stats/claims_sequential.py):
    a count runs from the transitions whose interval lies wholly on the claim's side ('surely') to those whose
    interval reaches it ('possibly')."""
    sides = {
        "within": d_off["sides"][..., 0],
        "floor": d_off["sides"][..., 1],
        "floor92": d_off["sides"][..., 2],
        "ceiling": -d_diag["sides"][..., -1],
    }
    return {k: s == 1 for k, s in sides.items()}, {k: s >= 0 for k, s in sides.items()}


def _fixed_booleans(sc, cs):
    """The same booleans from scores (…, T, variant) in CLAIM_VARIANTS' order (points)."""
    b, f, o, d = sc[..., 0], sc[..., 1], sc[..., 2], sc[..., 3]
    return {
        "informative": f - b >= cs.informative_points - TIE,
        "within": o - f >= -cs.within_points - TIE,
        "floor": _ratio(o, f) >= cs.retention_floor_pct - TIE,
        "floor92": _ratio(o, f) >= cs.retention_second_floor_pct - TIE,
        "ceiling": _ratio(d, f) <= cs.retention_ceiling_pct + TIE,
    }


def _medians(sc, sft):
    """offnull all, diag SFT, diag RL, null all, diag all: medians of retention over transitions (axis −2 of
    scores (…, T, variant))."""
    r = {v: _ratio(sc[..., j], sc[..., 1]) for v, j in (("offnull", 2), ("diag", 3), ("null", 4))}
    return {
        "offnull": _nanmedian(r["offnull"], -1),
        "diag-sft": _nanmedian(r["diag"][..., sft], -1),
        "diag-rl": _nanmedian(r["diag"][..., ~sft], -1),
        "null": _nanmedian(r["null"], -1),
        "diag": _nanmedian(r["diag"], -1),
    }


def _counts(bools, inf, sft):
    return {
        "offnull-within": ((bools["within"] & inf).sum(-1), inf.sum(-1)),
        "offnull-floor": (bools["floor"].sum(-1), bools["floor"].shape[-1]),
        "offnull-floor-92": (bools["floor92"].sum(-1), bools["floor92"].shape[-1]),
        "diag-ceiling-sft": (bools["ceiling"][..., sft].sum(-1), int(sft.sum())),
    }


def _target(cid):
    return EXTRA[cid] if cid in EXTRA else _BOX[cid].target


def claim_verdicts(fixed, boot, seq, settings, variants, claim_variants, groups) -> dict:
    """Per study, each claim's verdicts (sequential at its point estimates, sequential by the report's rule, fixed at
    its point estimates, fixed by the report's rule), like compared with like,
    and per threshold how many (study, transition) pairs the two designs put on the same side."""
    cs = settings["claim_settings"]
    sft = np.array([g == "SFT" for g in groups])
    pts = fixed[..., [variants.index(v) for v in claim_variants]]  # S × T × 5
    reps = np.moveaxis(boot, -1, 1)  # S × R × T × 5
    fb_pt, fb_rep = _fixed_booleans(pts, cs), _fixed_booleans(reps, cs)
    inf = fb_pt["informative"]
    sb = _per_transition(seq["base"], seq["offnull"], seq["diag"], cs)
    surely, possibly = _per_transition_ends(seq["offnull"], seq["diag"])
    out = {}
    c_pt, c_seq = _counts(fb_pt, inf, sft), _counts(sb, sb["informative"], sft)
    c_lo, c_hi = (_counts(ends, sb["informative"], sft) for ends in (surely, possibly))
    c_rep = _counts(fb_rep, inf[:, None], sft)
    for cid in c_pt:
        lo, hi = np.percentile(c_rep[cid][0], [2.5, 97.5], axis=1)
        n_seq, n_fix, t = np.asarray(c_seq[cid][1]), np.asarray(c_pt[cid][1]), _target(cid)
        out[cid] = (
            at_least(c_seq[cid][0], c_seq[cid][0], n_seq, t),
            at_least(c_lo[cid][0], c_hi[cid][0], n_seq, t),
            at_least(c_pt[cid][0], c_pt[cid][0], n_fix, t),
            at_least(lo, hi, n_fix, t),
        )
    m_pt, m_rep = _medians(pts, sft), _medians(reps, sft)
    m_ci = {k: np.nanpercentile(v, [2.5, 97.5], axis=1) for k, v in m_rep.items()}
    seq_med = _seq_medians(seq, sft)
    for cid, key in (("offnull-median", "offnull"), ("diag-median-sft", "diag-sft"), ("diag-median-rl", "diag-rl")):
        t = _target(cid)
        est, lo, hi = seq_med[key]
        out[cid] = (
            contains(est, est, t),
            np.where(np.isnan(est), np.nan, contains(lo, hi, t)),
            contains(m_pt[key], m_pt[key], t),
            contains(m_ci[key][0], m_ci[key][1], t),
        )
    s_null, s_diag = seq_med["null"], seq_med["diag"]
    out["null-above-diag"] = (
        above(s_null[0], s_null[0], s_diag[0], s_diag[0]),
        above(s_null[1], s_null[2], s_diag[1], s_diag[2]),
        above(m_pt["null"], m_pt["null"], m_pt["diag"], m_pt["diag"]),
        above(m_ci["null"][0], m_ci["null"][1], m_ci["diag"][0], m_ci["diag"][1]),
    )
    sides = {k: (int((sb[k] == fb_pt[k]).sum()), sb[k].size) for k in sb}
    return {"claims": out, "sides": sides}


def _seq_medians(seq, sft):
    """(median of the point estimates, median of the lower ends, median of the upper ends) of retention over
    transitions; NaN where the retention intervals were not computed."""
    out = {}
    for key, v, mask in (
        ("offnull", "offnull", None),
        ("diag-sft", "diag", sft),
        ("diag-rl", "diag", ~sft),
        ("null", "null", None),
        ("diag", "diag", None),
    ):
        d = seq[v]
        pick = (lambda x: x) if mask is None else (lambda x, m=mask: x[..., m])  # noqa: E731
        if "ret_lo" not in d:
            nan = np.full(d["retention"].shape[0], np.nan)
            out[key] = (nan, nan, nan)
            continue
        out[key] = tuple(_nanmedian(pick(d[k]), -1) for k in ("retention", "ret_lo", "ret_hi"))
    return out

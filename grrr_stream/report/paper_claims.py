"""The GRRR paper's headline claims as data: each with the paper's value, the set it is over, where the paper
states it, and the test the report's verdict box applies to this sweep's value (:mod:`.verdict`).

Source: J. Qi, H. Tang and Z. Zhu, "GRRR: The Geometry of Reshaping, Rotation, and Routing in Decoder LLM
post-training" (CUNY Graduate Center and City College of New York, cs.LG 2026), as summarised in the team's
PAPER_FACTS.md (section "Headline claims and the sets they are over"). The numbers are copied here so that the
package never reads that file at run time; ``tests/report/test_verdict.py`` checks them against it when the
file is present.

A claim's ``test`` (how :mod:`.verdict` decides it):
- ``at_least_fraction``: a rate (24 of 25 → ``target`` 0.96 over ``paper_n`` 25): this sweep's count against the
  paper's, Fisher's exact test, one-sided (:mod:`.verdict_sets`);
- ``contains``: a median (99 %): the sign test of this sweep's transitions above and below the paper's value;
- ``at_most_all``: every member of the set at most ``bound`` ("all 17 RL transitions have f_diag ≤ 0.011"): the
  count within it against the paper's 17 of 17, as a rate;
- ``within_all``: every pair's interval inside ``bound`` (a bound the paper states per pair, with no count);
- ``above_other``: this claim's statistic exceeds another claim's (null-only above diag-only), per transition by
  the sign test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

PAPER = (
    'J. Qi, H. Tang, Z. Zhu, "GRRR: The Geometry of Reshaping, Rotation, and Routing in Decoder LLM '
    'post-training", cs.LG 2026'
)


@dataclass(frozen=True)
class PaperClaim:
    id: str
    claim: str  # the claim in a few words
    paper_value: str  # as the paper writes it
    paper_set: str  # the set it is over, as the paper names it
    paper_n: Optional[int]  # how many transitions (or pairs) that set holds (None: not stated)
    where: str  # where the paper states it
    source: str  # what of this sweep answers it: 'claims', 'energy', 'stepwise', 'independent'
    test: str  # see the module's docstring
    # for source 'claims': (statistic, variant, reference, set, group) of a claims.csv row
    statistic: tuple = ()
    target: float = float("nan")  # the paper's number the test compares with (fraction, percent, bound)
    bound: tuple = ()  # (lo, hi) for within_all; (hi,) for at_most_all
    other: str = ""  # for above_other: the claim id compared with


CLAIMS: tuple[PaperClaim, ...] = (
    PaperClaim(
        "offnull-within",
        "Removing the diagonal (OffNull) stays within 4.3 points of Full",
        "24 of 25",
        "informative transitions",
        25,
        "§5, main text",
        "claims",
        "at_least_fraction",
        ("within_k", "offnull", "full", "informative", "all"),
        24 / 25,
    ),
    PaperClaim(
        "offnull-median",
        "OffNull retention, median",
        "99 %",
        "all evaluated transitions",
        28,
        "appendix summary",
        "claims",
        "contains",
        ("retention_median_pct", "offnull", "full", "all evaluated", "all"),
        99.0,
    ),
    PaperClaim(
        "offnull-floor",
        "OffNull retention ≥ 95 %",
        "22 of 28",
        "all evaluated transitions",
        28,
        "appendix summary",
        "claims",
        "at_least_fraction",
        ("at_floor", "offnull", "full", "all evaluated", "all"),
        22 / 28,
    ),
    PaperClaim(
        "diag-median-sft",
        "Diag-only retention, median (SFT)",
        "23 %",
        "SFT transitions",
        11,
        "appendix summary",
        "claims",
        "contains",
        ("retention_median_pct", "diag", "full", "all evaluated", "SFT"),
        23.0,
    ),
    PaperClaim(
        "diag-median-rl",
        "Diag-only retention, median (RL)",
        "79 %",
        "RL transitions",
        17,
        "appendix summary",
        "claims",
        "contains",
        ("retention_median_pct", "diag", "full", "all evaluated", "RL"),
        79.0,
    ),
    PaperClaim(
        "diag-ceiling-sft",
        "The diagonal alone retains ≤ 25 % (SFT)",
        "6 of 11",
        "SFT chains",
        11,
        "appendix summary",
        "claims",
        "at_least_fraction",
        ("at_most_ceiling", "diag", "full", "all evaluated", "SFT"),
        6 / 11,
    ),
    PaperClaim(
        "null-above-diag",
        "Null-only retention above Diag-only retention (medians)",
        "generally above",
        "all evaluated transitions",
        28,
        "appendix summary",
        "claims",
        "above_other",
        ("retention_median_pct", "null", "full", "all evaluated", "all"),
        other="diag-median-all",
    ),
    PaperClaim(
        "rl-fdiag",
        "f_diag ≤ 0.011 for every RL transition",
        "all 17 ≤ 0.011",
        "RL transitions",
        17,
        "§ energies (Table 7)",
        "energy",
        "at_most_all",
        bound=(0.011,),
    ),
    PaperClaim(
        "seq-cos",
        "Stepwise SFT → RL off-diagonal cosines stay below 0.008",
        "|cos| < 0.008",
        "stepwise pairs",
        None,
        "§ geometry (Fig. 4B)",
        "stepwise",
        "within_all",
        bound=(-0.008, 0.008),
    ),
    PaperClaim(
        "indep-above",
        "Independent pairs from a shared base lie above the isotropic ±2σ envelope",
        "all above (0.003–0.146)",
        "independent pairs",
        None,
        "§ geometry (Fig. 5B)",
        "independent",
        "above_band",
    ),
    PaperClaim(
        "rl-step-size",
        "The incremental RL step is 0.004–0.17× the SFT update",
        "0.004–0.17×",
        "stepwise pairs",
        None,
        "§ geometry (Fig. 4A)",
        "stepwise",
        "ratio_within",
        bound=(0.004, 0.17),
    ),
)

# the diag-only median over all evaluated transitions: not a claim of its own, the comparand of null-above-diag
DIAG_MEDIAN_ALL = ("retention_median_pct", "diag", "full", "all evaluated", "all")

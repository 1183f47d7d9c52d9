"""The GRRR paper's headline claims as data: each with the paper's value, the set it is over, where the paper
states it, and the test the report's verdict box applies to this sweep's value (:mod:`.verdict`).

Source: J. Qi, H. Tang and Z. Zhu, "GRRR: The Geometry of Reshaping, Rotation, and Routing in Decoder LLM
post-training" (CUNY Graduate Center and City College of New York, cs.LG 2026), as summarised in the team's
PAPER_FACTS.md (section "Headline claims and the sets they are over"). The numbers are copied here so that the
package never reads that file at run time; ``tests/report/test_verdict.py`` checks them against it when the
file is present.

A claim's ``test`` (how :mod:`.verdict` decides it; a claim over a set is tested on one value per chain, the
transitions that share a base model, against the paper's count read the same way: :mod:`grrr_stream.stats.predictive`):
- ``at_least_fraction``: a rate (24 of 25 → ``target`` 0.96): this sweep's chains that meet the claim against the
  paper's rate seen in its ``paper_units`` independent units, one-sided (a lower rate contradicts);
- ``contains``: a median (99 %): this sweep's chains above and below the paper's median, against half of the
  paper's units above it, two-sided;
- ``at_most_all``: every member at most ``bound`` ("all 17 RL transitions have f_diag ≤ 0.011") as a rate of 1;
  f_diag is compared as its ratio to the isotropic value at each side's own shapes (:data:`RL_W0`);
- ``within_all``: every pair's interval inside ``bound`` (a bound the paper states per pair, with no count);
- ``above_band``: every pair above the isotropic band, and within the paper's ``paper_range`` or said outside it;
- ``above_other``: this claim's statistic exceeds another claim's (null-only above diag-only) per chain, on the
  paired difference; "generally" has no count, so it is taken as a fixed rate of one half (``paper_units`` None).
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
    # the independent units (bases) the paper's set rests on; None: its value is taken as fixed (no count stated)
    paper_units: Optional[int] = None
    paper_range: tuple = ()  # (lo, hi) the paper reports for a claim decided per member (above_band)


# The independent units of the paper's sets: configs/paper.yaml's 28 evaluated transitions come from 10 base
# models (C6 and C10 share Qwen2.5-Math-7B), and its 11 SFT and its 17 RL transitions each span all 10
# (tests/report/test_paper_sets.py checks it against the config's lineage); its 25 informative ones are taken to
# span them too (which 3 are not informative the copies here do not say, beyond C5's DPO step, whose base keeps
# its informative SFT step).
PAPER_UNITS = 10

# W0 of each of the paper's 17 RL rows (configs/paper.yaml's lineage): their shapes (forecast/shapes.py's table)
# set the isotropic f_diag its bound of 0.011 is read against.
RL_W0 = (
    *("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",) * 2,
    "Kwai-Klear/Klear-Reasoner-8B-SFT",
    "ReasoningTransferability/UniReason-Qwen3-14B-think-SFT",
    "HuggingFaceH4/mistral-7b-sft-beta",
    "RLHFlow/Qwen2.5-7B-SFT",
    *("Qwen/Qwen2.5-Math-7B",) * 3,
    "PRIME-RL/Eurus-2-7B-SFT",
    "allenai/OLMo-2-1124-7B-SFT",
    "allenai/OLMo-2-1124-7B-DPO",
    "OpenRLHF/Llama-3-8b-sft-mixture",
    "allenai/Olmo-3-7B-Think-SFT",
    "XiaomiMiMo/MiMo-7B-SFT",
    "XiaomiMiMo/MiMo-7B-Base",
    "deepseek-ai/deepseek-math-7b-instruct",
)

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
        paper_units=PAPER_UNITS,
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
        paper_units=PAPER_UNITS,
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
        paper_units=PAPER_UNITS,
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
        paper_units=PAPER_UNITS,
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
        paper_units=PAPER_UNITS,
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
        paper_units=PAPER_UNITS,
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
        paper_units=PAPER_UNITS,
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
        paper_range=(0.003, 0.146),
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

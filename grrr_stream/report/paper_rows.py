"""The paper's own per-transition rows, where the copies of it show them: accuracy averaged over the five
benchmarks, in points, for Base / Full / Diag / Off / Null / OffNull (J. Qi, H. Tang, Z. Zhu, "GRRR", cs.LG 2026,
Tables 5 (SFT) and 6 (RL), as the team's PAPER_FACTS.md copies them; 6 of its 11 SFT and 6 of its 17 RL rows).

They are not the paper's whole sets, so the verdict box does not test against them (it reads the paper's stated
summaries, :mod:`.paper_claims`); they are a sample of the paper's population that the tests run through the box
as if it were a sweep, and that tools/simulate.py builds its planted studies from.
"""

from __future__ import annotations

COLUMNS = ("base", "full", "diag", "off", "null", "offnull")

# (group, chain, row, accuracies in the order of COLUMNS); a chain's rows share its base model
ROWS = (
    ("SFT", "C1", "C1", (31.3, 49.2, 6.4, 31.3, 18.5, 28.9)),
    ("SFT", "C2", "C2", (21.2, 60.4, 14.0, 9.5, 9.7, 56.1)),
    ("SFT", "C3", "C3", (17.2, 49.1, 28.0, 54.3, 55.7, 45.8)),
    ("SFT", "C5", "C5", (3.6, 5.7, 1.9, 5.8, 6.2, 5.7)),
    ("SFT", "C6", "C6", (35.8, 43.5, 38.8, 49.7, 48.0, 42.1)),
    ("SFT", "C7", "C7", (5.0, 8.6, 7.9, 9.0, 9.8, 7.5)),
    ("RL", "C1", "C1 DeepScaleR (GRPO)", (49.2, 51.8, 41.0, 43.8, 51.7, 54.4)),
    ("RL", "C1", "C1 Nemotron (GRPO)", (49.2, 61.3, 40.3, 57.6, 59.2, 62.7)),
    ("RL", "C2", "C2 KlearReasoner (GPPO)", (60.4, 71.7, 58.6, 69.8, 69.0, 72.6)),
    ("RL", "C3", "C3 UniReason (GRPO)", (49.1, 66.5, 75.1, 64.2, 65.9, 65.0)),
    ("RL", "C5", "C5 zephyr-beta (DPO)", (5.7, 3.1, 5.2, 5.3, 4.7, 3.7)),
    ("RL", "C6", "C6 DPO", (43.5, 49.7, 41.2, 45.0, 48.5, 49.8)),
)

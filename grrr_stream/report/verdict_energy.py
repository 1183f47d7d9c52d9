"""The verdict box's claim on an energy share whose scale depends on the shapes: "f_diag ≤ 0.011 for every RL
transition".

An isotropic update puts r/(m·n) of its energy on the diagonal (:mod:`grrr_stream.geometry.isotropic`): 0.0056 on
the demo's 128-wide matrices, 0.0004 on Qwen2.5-1.5B's, 0.0002 on a 7B model's. So 0.011 at the paper's shapes and
0.011 here are different statements, and the claim is compared in a form that transfers, f_diag over its isotropic
value at each side's own shapes. The paper's bound becomes 0.011 / iso(W0) for each of its 17 RL rows (its W0s'
published shapes, :data:`.paper_claims.RL_W0`): 26× at 1.5B to 81× at 14B. A chain below the smallest of these
meets every reading of the bound; above the largest, none; between, it is not resolved.
"""

from __future__ import annotations

import statistics
from functools import lru_cache
from typing import Mapping, Sequence

from ..columns import ISO, VS_ISO
from ..forecast.shapes import KNOWN
from ..geometry import isotropic
from ..geometry.metrics import PAPER_COLUMNS
from ..stats.chains import per_chain
from ..stats.predictive import FIXED, count_test
from ..stats.sides import finite
from .paper_claims import RL_W0, PaperClaim
from .verdict_rows import FAILS, HOLDS, UNRESOLVED, Member, p_text
from .verdict_sets import SetTest, count_set, paper_reference

F_DIAG = PAPER_COLUMNS.column("f_diag")


@lru_cache(maxsize=None)
def paper_ratios(bound: float) -> tuple[float, ...]:
    """``bound`` over the isotropic f_diag of each of the paper's RL rows' W0, at its published shapes."""
    return tuple(bound / isotropic.decoder_expected("diag", KNOWN[repo].matrices()) for repo in RL_W0)


def energy_set(c: PaperClaim, rows: Sequence[dict], chain_of: Mapping[str, str], paper_side: str = FIXED) -> SetTest:
    """Every RL step's f_diag within the paper's bound, each read against its own isotropic value: the chains
    within it (each chain's mean ratio) against the paper's all, a rate of 1 from its units."""
    ratios = paper_ratios(c.bound[0])
    tight, loose, typical = min(ratios), max(ratios), statistics.median(ratios)
    vals = [(r["transition"], r.get("name", r["transition"]), r[F_DIAG.stat(VS_ISO)]) for r in rows]
    chains = per_chain([(t, n, v, v, v) for t, n, v in vals], chain_of)
    raw = {r.get("name", r["transition"]): (r[F_DIAG.headline], r[F_DIAG.stat(ISO)]) for r in rows}

    def outcome(x: float) -> str:
        return HOLDS if x <= tight else FAILS if x > loose else UNRESOLVED

    mem = [
        Member(
            f"f_diag on chain {ch.chain} ({', '.join(ch.members)})",
            f"{ch.value:.1f}× isotropic ("
            + ", ".join(f"{raw[m][0]:.3g} against {raw[m][1]:.2g}" for m in ch.members if m in raw)
            + ")",
            outcome(ch.value),
        )
        for ch in chains
    ]
    n = len(chains)
    if not n:
        return SetTest("0 chains", "—", "no RL step with an isotropic value", "", mem)
    ref = paper_reference(c, paper_side)
    sure = sum(1 for ch in chains if ch.value <= tight)
    reach = sum(1 for ch in chains if ch.value <= loose)
    point = sum(1 for ch in chains if ch.value <= typical)
    at = count_test(point, n, ref)
    largest = max(ch.value for ch in chains)
    shown = f"{point} of {n} chains within it (largest {largest:.1f}× isotropic)"
    test = (
        f"{point} of {n} chains at most the paper's bound at its typical shapes ({typical:.0f}× isotropic; "
        f"{tight:.0f}–{loose:.0f}× over its 17 RL rows' shapes), against {ref.describe()}, one-sided"
        + (
            " (a fixed rate of 1: a chain beyond every reading of the bound contradicts 'every')"
            if ref.units is None
            else ""
        )
        + f": {p_text(at.p)}"
    )
    reason = (
        f"f_diag {min(raw[m][0] for m in raw):.3g}–{max(raw[m][0] for m in raw):.3g} here is "
        f"{min(ch.value for ch in chains):.1f}–{largest:.1f}× its isotropic value; the paper's ≤ {c.bound[0]:g} "
        f"is ≤ {tight:.0f}–{loose:.0f}× at its shapes"
    )
    return count_set(chains, shown, reason, test, mem, (point, sure, reach), ref, "chains within the bound")


def rl_rows(transitions: Sequence[dict], group_of, steps: set, names: Mapping[str, str]) -> tuple[list[dict], int]:
    """The decomposed RL steps with an isotropic value, and how many RL steps have none (a store whose summary
    predates it)."""
    rl = [r for r in transitions if r["transition"] in steps and group_of(r) == "RL" and finite(r.get(F_DIAG.headline))]
    have = [
        {**r, "name": names.get(r["transition"], r["transition"])} for r in rl if finite(r.get(F_DIAG.stat(VS_ISO)))
    ]
    return have, len(rl) - len(have)

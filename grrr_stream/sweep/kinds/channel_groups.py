"""The channel-stats kind's group table: SFT vs RL ("SFT reshapes the outlier channels, RL adapts the others").

``channels_sft_rl.csv`` / ``.txt``: the training steps (parent → child transitions) grouped SFT / RL by
``method`` as the claims group them (:func:`grrr_stream.stats.claims_sets.method_group`); per group and component
the mean over its transitions of the energy share, channel share and ratio, and for the mean ratio a joint
bootstrap interval over matrices and a p-value against count-matched random channel sets pooled over the group
(:mod:`grrr_stream.channels.groups`). A statistic over several units (no unit owns a group): resampled when the
report is assembled, from what each step's channel-stats unit kept (its per-matrix and per-channel sums), never
from the stores.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..rows import Row
from ..units import Unit
from .channels import read_channel_set
from .decompose import unit_id as decompose_id

COMPONENTS = ("diag", "off", "null", "total")
SFT_RL_TABLE, SFT_RL_TEXT = "channels_sft_rl.csv", "channels_sft_rl.txt"


def members(plan, done: list[Unit], member_file: str) -> dict:
    """transition → its :class:`~grrr_stream.channels.groups.Member`, for every finished channel-stats unit of a
    training step: the one the unit kept (``member_file`` in its folder), or for a unit finished before units
    kept one, made from its store's energies and W0's outlier set."""
    from ...channels.enrichment import store_energies
    from ...channels.groups import Member
    from ...errors import StoreError

    out = {}
    for u in done:
        tr = plan.transitions[u.params.transition]
        if plan.models[tr.child].parent != tr.parent:  # not one training step: not in the table
            continue
        kept = Path(u.out) / member_file
        if kept.is_file():
            out[tr.id] = Member.load(kept)
            continue
        try:
            energies, records = store_energies(Path(plan.unit(decompose_id(tr.id)).out))
            chans = np.asarray(sorted(read_channel_set(u.params.channels_out)["channels"]), dtype=np.int64)
        except (StoreError, OSError, KeyError, ValueError):  # removed since: the table's means stay, no interval
            continue
        out[tr.id] = Member.of(tr.id, energies, records, chans)
    return out


def _num(x) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else math.nan


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if math.isfinite(x)]
    return sum(xs) / len(xs) if xs else math.nan


def sft_rl_rows(rows: list[Row], members: dict, *, draws: int, seed: int) -> list[Row]:
    """Per group (SFT, RL) and component: the means over the group's training steps (all matrices' row of
    each) and, for the mean ratio, the group's interval and p-value (:func:`grrr_stream.channels.groups.
    group_enrichment` over ``members``, transition → Member)."""
    from ...channels.groups import group_enrichment

    out = []
    for group in ("SFT", "RL"):
        mine = [r for r in rows if r["group"] == "all" and r.get("step") in (True, "True")
                and r["group_sft_rl"] == group]
        steps = list(dict.fromkeys(r["transition"] for r in mine))
        # a step whose store can no longer be read leaves the group without an interval, not with a wrong one
        pooled = group_enrichment([members[t] for t in steps] if all(t in members for t in steps) else [],
                                  draws=draws, seed=seed)
        for comp in COMPONENTS:
            rs = [r for r in mine if r["component"] == comp]
            if not rs:
                continue
            g = pooled[comp]
            out.append({"group": group, "component": comp, "transitions": " ".join(r["transition"] for r in rs),
                        "n": len(rs), "channel_share": _mean([_num(r["channel_share"]) for r in rs]),
                        "energy_share": _mean([_num(r["energy_share"]) for r in rs]),
                        "ratio": _mean([_num(r["ratio"]) for r in rs]),
                        "ci_lo": g["ci_lo"], "ci_hi": g["ci_hi"], "null_q975": g["null_q975"],
                        "p_value": g["p_value"], "draws": draws, "seed": seed})
    return out


def sft_rl_text(report) -> str:
    """The SFT vs RL table and every transition's overall row, as text (the summary and channels_sft_rl.txt)."""
    if not report.channels:
        return ""
    lines = ["outlier residual channels (each W0's, label-free rule): share of each component's update energy "
             "on them, next to their share of channels; ratio = energy share / channel share, 95 % bootstrap "
             "interval over matrices, p against count-matched random channel sets (a group: its mean ratio, the "
             "interval and the random sets pooled over its steps)",
             f"  {'':<30} {'comp':<6} {'ch.share':>8} {'E share':>8} {'ratio':>7} {'interval':>17} {'p':>7}"]
    for g in report.channels_sft_rl:
        lines.append(f"  {g['group'] + ' (' + str(g['n']) + ' step' + ('s' if g['n'] != 1 else '') + ', mean)':<30} "
                     f"{g['component']:<6} {g['channel_share']:>8.4f} {g['energy_share']:>8.4f} {g['ratio']:>7.3f} "
                     f"[{g['ci_lo']:>6.3f}, {g['ci_hi']:>6.3f}] {g['p_value']:>7.4f}")
    for r in report.channels:
        if r["group"] == "all":
            name = f"{r['transition']} ({r['method'] or 'no method'})"
            lines.append(f"  {name:<30} {r['component']:<6} {_num(r['channel_share']):>8.4f} "
                         f"{_num(r['energy_share']):>8.4f} {_num(r['ratio']):>7.3f} [{_num(r['ci_lo']):>6.3f}, "
                         f"{_num(r['ci_hi']):>6.3f}] {_num(r['p_value']):>7.4f}")
    return "\n".join(lines) + "\n"

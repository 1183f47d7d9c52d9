"""``channel-groups/sft-rl``: the residual channels' SFT vs RL table ("SFT reshapes the outlier channels, RL
adapts the others").

The training steps (parent → child transitions) grouped SFT / RL by ``method`` as the claims group them
(:func:`grrr_stream.stats.claims_sets.method_group`); per group and component the mean over its steps of the
energy share, channel share and ratio, and for the mean ratio a joint bootstrap interval over matrices and a
p-value against count-matched random channel sets pooled over the group (:mod:`grrr_stream.channels.groups`),
from what each step's channel-stats unit kept (its rows and its per-matrix and per-channel sums), never from
the stores but for a step finished before units kept them.

It needs the channel-stats unit of every training step with a group and writes in its folder
``channels_sft_rl.csv`` and last ``channels_sft_rl.json`` (the rows with their numbers exact: what the report
reads back; assembling the report draws no bootstrap). Key: per step its transition, group and channel-stats
unit's key; ``channels.resamples`` and ``channels.seed``. Its report files: ``channels_sft_rl.csv`` and
``channels_sft_rl.txt`` (the table and every transition's overall row, as the sweep's summary prints them).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from ...channels.enrichment import store_energies
from ...channels.groups import Member, group_enrichment
from ...channels.transition_stats import STATS_FILE
from ...errors import StoreError
from ...files import atomic_write_text, to_csv, to_json
from ...stats.claims_sets import method_group
from ..context import PlanContext, Problems, RunContext
from ..rows import Report, Row, TableRows, read_rows
from ..units import Unit, UnitParams
from .base import Kind, Planned, constant_estimate
from .channel_stats import MEMBER_FILE
from .channel_stats import NAME as CHANNEL_STATS
from .channel_stats import TABLE as CHANNELS_TABLE
from .channels import read_channel_set
from .decompose import store_of

NAME = "channel-groups"  # the kind's name: its units' ``kind``, the registry's key; spelled only here
FOLDER = "channel_groups"
UNIT_ID = f"{NAME}/sft-rl"
ROWS_FILE = "channels_sft_rl.json"  # written last: the marker
SFT_RL_TABLE, SFT_RL_TEXT = "channels_sft_rl.csv", "channels_sft_rl.txt"
COMPONENTS = ("diag", "off", "null", "total")
SECONDS = 1.0  # the demo's 3 steps × 2000 draws (2 CPU cores): not modelled


class Step(BaseModel):
    """One training step of a group, as the table reads it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    transition: str
    group: str  # SFT or RL: method_group of its method under claims.sft_methods
    stats_key: str
    stats_out: str  # its channel-stats unit's folder (not in the key)
    channels_out: str  # W0's channels unit's folder, for a unit that kept no member (not in the key)

    def key_content(self) -> dict:
        return {"transition": self.transition, "group": self.group, "channel_stats": self.stats_key}


class ChannelGroupsParams(UnitParams):
    """The SFT vs RL table over the steps' channel-stats units, with the channels section's resampling."""

    kind: ClassVar[str] = NAME
    steps: tuple[Step, ...]
    resamples: int
    seed: int

    def key_content(self) -> dict:
        return {"steps": [s.key_content() for s in self.steps], "resamples": self.resamples, "seed": self.seed}


def plan(ctx: PlanContext) -> tuple[list[Unit], Problems]:
    """One unit when a channel-stats unit of a training step with a method group is planned, after them all."""
    steps, deps = [], []
    for u in ctx.units_of(CHANNEL_STATS):
        tr = ctx.transitions[u.params.transition]
        group = method_group(tr.method, ctx.cfg.claims.sft_methods)
        if ctx.models[tr.child].parent != tr.parent or group is None:  # not a step of a group: not in the table
            continue
        steps.append(
            Step(transition=tr.id, group=group, stats_key=u.key, stats_out=u.out, channels_out=u.params.channels_out)
        )
        deps.append(u.id)
    if not steps:
        return [], []
    c = ctx.cfg.channels
    params = ChannelGroupsParams(steps=tuple(steps), resamples=c.resamples, seed=c.seed)
    return [
        Unit.of(
            UNIT_ID, f"SFT vs RL enrichment over {len(steps)} training step(s)", params, ctx.keyed(FOLDER), tuple(deps)
        )
    ], []


def run(u: Unit, ctx: RunContext) -> dict:
    """The table from the steps' rows and members: channels_sft_rl.csv, then channels_sft_rl.json."""
    p: ChannelGroupsParams = u.params
    rows = [
        {**r, "transition": s.transition, "group_sft_rl": s.group, "step": True}
        for s in p.steps
        for r in read_rows(Path(s.stats_out) / STATS_FILE)
    ]
    table = sft_rl_rows(rows, members(p.steps, lambda t: store_of(ctx, t)), draws=p.resamples, seed=p.seed)
    out = Path(u.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / SFT_RL_TABLE, to_csv(table))
    atomic_write_text(out / ROWS_FILE, to_json(table))
    return {"rows": len(table), "steps": len(p.steps)}


def members(steps, store_of: Callable[[str], Path]) -> dict:
    """transition → its :class:`~grrr_stream.channels.groups.Member`: the one its channel-stats unit kept, or
    for a unit finished before units kept one, made from its store's energies (``store_of``: transition → store)
    and W0's outlier set; a step whose store can no longer be read has none."""
    out = {}
    for s in steps:
        kept = Path(s.stats_out) / MEMBER_FILE
        if kept.is_file():
            out[s.transition] = Member.load(kept)
            continue
        try:
            energies, records = store_energies(store_of(s.transition))
            chans = np.asarray(sorted(read_channel_set(s.channels_out)["channels"]), dtype=np.int64)
        except (StoreError, OSError, KeyError, ValueError):  # removed since: the table's means stay, no interval
            continue
        out[s.transition] = Member.of(s.transition, energies, records, chans)
    return out


def report(plan: Planned, done: list[Unit], rep: Report) -> list[TableRows]:
    """The table as its unit wrote it."""
    rows: list[Row] = []
    for u in done:
        try:
            rows = json.loads((Path(u.out) / ROWS_FILE).read_text())
        except (OSError, ValueError):
            continue
    return [TableRows(SFT_RL_TABLE, rows)]


def write(rep: Report) -> list[Path]:
    if not rep.rows(CHANNELS_TABLE):  # the transitions' own rows, with the group table when there is one
        return []
    path = rep.folder / SFT_RL_TEXT
    atomic_write_text(path, sft_rl_text(rep))
    return [path]


def _num(x) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else math.nan


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if math.isfinite(x)]
    return sum(xs) / len(xs) if xs else math.nan


def sft_rl_rows(rows: list[Row], members: dict, *, draws: int, seed: int) -> list[Row]:
    """Per group (SFT, RL) and component: the means over the group's training steps (all matrices' row of
    each) and, for the mean ratio, the group's interval and p-value (:func:`grrr_stream.channels.groups.
    group_enrichment` over ``members``, transition → Member)."""
    out = []
    for group in ("SFT", "RL"):
        mine = [
            r for r in rows if r["group"] == "all" and r.get("step") in (True, "True") and r["group_sft_rl"] == group
        ]
        steps = list(dict.fromkeys(r["transition"] for r in mine))
        # a step whose store can no longer be read leaves the group without an interval, not with a wrong one
        pooled = group_enrichment(
            [members[t] for t in steps] if all(t in members for t in steps) else [], draws=draws, seed=seed
        )
        for comp in COMPONENTS:
            rs = [r for r in mine if r["component"] == comp]
            if not rs:
                continue
            g = pooled[comp]
            out.append(
                {
                    "group": group,
                    "component": comp,
                    "transitions": " ".join(r["transition"] for r in rs),
                    "n": len(rs),
                    "channel_share": _mean([_num(r["channel_share"]) for r in rs]),
                    "energy_share": _mean([_num(r["energy_share"]) for r in rs]),
                    "ratio": _mean([_num(r["ratio"]) for r in rs]),
                    "ci_lo": g["ci_lo"],
                    "ci_hi": g["ci_hi"],
                    "null_q975": g["null_q975"],
                    "p_value": g["p_value"],
                    "draws": draws,
                    "seed": seed,
                }
            )
    return out


def sft_rl_text(report) -> str:
    """The SFT vs RL table and every transition's overall row, as text (the summary and channels_sft_rl.txt)."""
    channels, groups = report.rows(CHANNELS_TABLE), report.rows(SFT_RL_TABLE)
    if not channels:
        return ""
    lines = [
        "outlier residual channels (each W0's, label-free rule): share of each component's update energy "
        "on them, next to their share of channels; ratio = energy share / channel share, 95 % bootstrap "
        "interval over matrices, p against count-matched random channel sets (a group: its mean ratio, the "
        "interval and the random sets pooled over its steps)",
        f"  {'':<30} {'comp':<6} {'ch.share':>8} {'E share':>8} {'ratio':>7} {'interval':>17} {'p':>7}",
    ]
    for g in groups:
        lines.append(
            f"  {g['group'] + ' (' + str(g['n']) + ' step' + ('s' if g['n'] != 1 else '') + ', mean)':<30} "
            f"{g['component']:<6} {g['channel_share']:>8.4f} {g['energy_share']:>8.4f} {g['ratio']:>7.3f} "
            f"[{g['ci_lo']:>6.3f}, {g['ci_hi']:>6.3f}] {g['p_value']:>7.4f}"
        )
    for r in channels:
        if r["group"] == "all":
            name = f"{r['transition']} ({r['method'] or 'no method'})"
            lines.append(
                f"  {name:<30} {r['component']:<6} {_num(r['channel_share']):>8.4f} "
                f"{_num(r['energy_share']):>8.4f} {_num(r['ratio']):>7.3f} [{_num(r['ci_lo']):>6.3f}, "
                f"{_num(r['ci_hi']):>6.3f}] {_num(r['p_value']):>7.4f}"
            )
    return "\n".join(lines) + "\n"


KIND = Kind(
    name=NAME,
    params=ChannelGroupsParams,
    plan=plan,
    run=run,
    marker=ROWS_FILE,
    tables=(SFT_RL_TABLE,),
    estimate=constant_estimate(SECONDS),
    report=report,
    write=write,
)

"""``channel-stats/<transition>``: the share of each component's energy on W0's outlier channels, from the
transition's store alone (:func:`grrr_stream.channels.transition_stats.transition_channel_stats`, the function
behind ``grrr-stream channel-stats``); it needs the decomposition and W0's channels unit.

Its report rows (read from the units, never recomputed): ``channels.csv`` (per transition, group and component:
the energy share next to the channel share, the enrichment ratio with its interval and p-value),
``channel_layers.csv`` and its figure. It keeps ``channel_member.npz`` for the SFT vs RL table over the training
steps (the ``channel-groups`` kind, :mod:`.channel_groups`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import ClassVar, Optional

from ... import plots
from ...channels.transition_stats import LAYERS_FILE, STATS_FILE, transition_channel_stats
from ...columns import VALUE, Column
from ...forecast import work
from ...stats.claims_sets import method_group
from ...tracking.runs import log_channel_stats
from ..context import PlanContext, Problems, RunContext
from ..estimate import UnitForecast
from ..rows import Report, TableRows, read_rows, rectangular
from ..units import Unit, UnitParams
from .base import Kind, Planned
from .channels import channels_file, channels_unit, read_channel_set, selected
from .decompose import keys as decompose_keys
from .decompose import store_of
from .decompose import unit_id as decompose_id

NAME = "channel-stats"  # the kind's name: its units' ``kind``, the registry's key; spelled only here

FOLDER = "channel_stats"
MEMBER_FILE = "channel_member.npz"  # what the SFT vs RL table reads of this step (channels.groups.Member)
TABLE, LAYERS_TABLE = "channels.csv", "channel_layers.csv"
LAYERS_FIGURE = "channel_layers.png"  # in WORKDIR/report
START_S = 0.1  # reading the store's channel arrays, the bootstrap, two CSVs


class ChannelStatsParams(UnitParams):
    """One transition's update energy on its W0's outlier channels: keyed by its decomposition's and that
    channels unit's keys and the resampling; ``channels_out`` only says where the channels file is."""

    kind: ClassVar[str] = NAME
    transition: str
    store_key: str
    channels_key: str
    channels_out: str
    post_channels_out: Optional[str]  # W1's channels unit, for the Jaccard of the two sets (not in the key)
    resamples: int
    seed: int

    def key_content(self) -> dict:
        return {"store": self.store_key, "channels": self.channels_key, "resamples": self.resamples, "seed": self.seed}


def plan(ctx: PlanContext) -> tuple[list[Unit], Problems]:
    """One unit per transition the ``channels`` section selects (its problems are the channels kind's)."""
    c = ctx.cfg.channels
    chosen, _ = selected(ctx)
    dec_key = decompose_keys(ctx)
    units = []
    for tid in chosen:
        tr = ctx.transitions[tid]
        base = channels_unit(ctx, tr.parent)
        post: Optional[Unit] = channels_unit(ctx, tr.child) if c.post_models else None
        params = ChannelStatsParams(
            transition=tid,
            store_key=dec_key[tid],
            channels_key=base.key,
            channels_out=base.out,
            post_channels_out=post.out if post else None,
            resamples=c.resamples,
            seed=c.seed,
        )
        deps = (decompose_id(tid), base.id) + ((post.id,) if post else ())
        units.append(
            Unit.of(
                f"channel-stats/{tid}",
                f"update energy of {tid} on {tr.parent}'s outlier channels",
                params,
                ctx.keyed(FOLDER, tid),
                deps,
            )
        )
    return units, []


def run(u: Unit, ctx: RunContext) -> dict:
    """One transition's energy on its W0's outlier channels: channel_layers.csv, then channel_stats.csv."""
    p: ChannelStatsParams = u.params
    store = store_of(ctx, p.transition)
    base = read_channel_set(p.channels_out)
    post = read_channel_set(p.post_channels_out)["channels"] if p.post_channels_out is not None else None
    res = transition_channel_stats(
        store,
        base["channels"],
        draws=p.resamples,
        seed=p.seed,
        hidden=base["hidden_size"],
        label=p.transition,
        post_channels=post,
        what=str(channels_file(p.channels_out)),
    )
    Path(u.out).mkdir(parents=True, exist_ok=True)
    res.member.save(Path(u.out) / MEMBER_FILE)  # before the marker: a finished unit always has it
    files = res.write(Path(u.out))
    if ctx.tracking.enabled:
        log_channel_stats(store, res.rows, res.layers, files, ctx.tracking)
    overall = {r["component"]: r for r in res.rows if r["group"] == "all"}
    return {
        "channels": int(res.channels.size),
        "channel_share": res.channels.size / res.hidden,
        **{f"share_{c}": _finite(r["energy_share"]) for c, r in overall.items()},
        **{f"ratio_{c}": _finite(r["ratio"]) for c, r in overall.items()},
    }


def _finite(x) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def seconds(matrices: int, hidden: int, draws: int, rates) -> float:
    return START_S + work.channel_stats_work(matrices, hidden, draws) / rates.null_cells_s


def estimate(u: Unit, facts) -> UnitForecast:
    """The null's channel × draw × group cells at their measured rate."""
    p: ChannelStatsParams = u.params
    base, rates, write = facts.base_of(p.transition), facts.rates, facts.write(u)
    if base.hidden is None or base.shapes is None or rates is None or not rates.null_cells_s:
        return UnitForecast(u.id, u.kind, 0, write, None, None, f"hidden size {base.where}")
    n = len(base.shapes)
    return UnitForecast(
        u.id,
        u.kind,
        0,
        write,
        work.channel_stats_ram(n, base.hidden),
        seconds(n, base.hidden, p.resamples, rates),
        f"{p.resamples} draws × {base.hidden} channels × {n} matrices",
    )


def report(plan: Planned, done: list[Unit], rep: Report) -> list[TableRows]:
    sft = plan.config.claims.sft_methods
    shares, layers = [], []
    for u in done:
        tr = plan.transitions[u.params.transition]
        step = plan.models[tr.child].parent == tr.parent
        label = {
            "transition": tr.id,
            "chain": tr.chain,
            "kind": tr.kind,
            "method": tr.method or "",
            "group_sft_rl": method_group(tr.method, sft) or "",
            "step": step,
        }
        shares += [
            {**label, **{k: v for k, v in r.items() if k != "transition"}} for r in read_rows(Path(u.out) / STATS_FILE)
        ]
        layers += [
            {**label, **{k: v for k, v in r.items() if k != "transition"}} for r in read_rows(Path(u.out) / LAYERS_FILE)
        ]
    return [TableRows(TABLE, rectangular(shares)), TableRows(LAYERS_TABLE, rectangular(layers))]


def write(rep: Report) -> list[Path]:
    layers = rep.rows(LAYERS_TABLE)
    return [plots.channel_layer_shares(layers, rep.folder / LAYERS_FIGURE)] if layers else []


# the columns of its tables, as people read them
COLUMNS = (Column("post_jaccard", "Jaccard with W1's set", aggregate=VALUE, shown=frozenset()),)


KIND = Kind(
    name=NAME,
    params=ChannelStatsParams,
    plan=plan,
    run=run,
    marker=STATS_FILE,
    tables=(TABLE, LAYERS_TABLE),
    columns=COLUMNS,
    estimate=estimate,
    report=report,
    write=write,
)

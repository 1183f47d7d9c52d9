"""The HTML report's residual-channel tables: SFT vs RL and each transition's shares, laid out from the rows of
the channel-stats and channel-groups kinds (:mod:`grrr_stream.sweep.kinds.channel_stats`, ``channel_groups``)."""

from __future__ import annotations

from ..sweep.kinds import channel_stats
from ..sweep.kinds.channel_groups import SFT_RL_TABLE
from .cells import Table, cell, columns_of, split


def channel_tables(report) -> list[Table]:
    """Residual channels: SFT vs RL and each transition's shares (all matrices, readers, writers)
    (sweep/kinds/channel_stats.py, channel_groups.py); the analysed models' outlier sets are the channels kind's
    own table (:func:`.tables.kind_tables`)."""
    tables = []
    groups, shares = report.rows(SFT_RL_TABLE), report.rows(channel_stats.TABLE)
    if groups:
        cols = columns_of(groups, list(groups[0]), {"ratio": ("ci_lo", "ci_hi")})
        for c in cols:  # here n counts a group's training steps, not matrices as in the transitions' tables
            c.label = "training steps" if c.key == "n" else c.label
        body = [("", [[cell(r, i, SFT_RL_TABLE, c) for c in cols] for i, r in enumerate(groups)])]
        tables += split(
            Table(
                "channels-sft-rl",
                "Outlier residual channels — SFT vs RL",
                "Share of each component's ‖ΔW‖² on W0's outlier channels (label-free rule) next to "
                "their share of channels, and the enrichment ratio; means over each group's training "
                "steps (by method); for the mean ratio, a 95 % bootstrap interval over matrices "
                "(resampled jointly across the group's steps) and a p against count-matched random "
                "channel sets pooled over the group (channels_sft_rl.csv).",
                [c.label for c in cols],
                body,
            ),
            ("group", "component"),
        )
    if shares:
        keep = [(i, r) for i, r in enumerate(shares) if r["group"] in ("all", "reader", "writer")]
        cols = columns_of(
            shares,
            (
                "transition",
                "kind",
                "method",
                "group",
                "component",
                "channels",
                "hidden",
                "channel_share",
                "energy_share",
                "ratio",
                "null_q975",
                "p_value",
                "post_jaccard",
            ),
            {"ratio": ("ci_lo", "ci_hi")},
        )
        rows = [[cell(r, i, channel_stats.TABLE, c) for c in cols] for i, r in keep]
        tables += split(
            Table(
                "channels",
                "Outlier channels per transition",
                "All matrices, readers (residual = input) and writers (residual = output); per module in channels.csv.",
                [c.label for c in cols],
                [("", rows)],
                folded=True,
            ),
            ("transition", "group", "component"),
        )
    return tables

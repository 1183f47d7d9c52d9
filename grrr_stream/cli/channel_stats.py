"""``grrr-stream channel-stats``: one transition's update energy on a set of residual channels."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..channels.transition_stats import STATS_FILE, transition_channel_stats
from .domains import DRAWS, SEED
from .options import check_draws


def channel_stats_parser(sub) -> None:
    p = sub.add_parser(
        "channel-stats",
        help="share of a transition's update energy on a set of residual channels",
        description="Per component (diag, off, null) and for all matrices, readers, writers and each "
        "module: the share of the update's energy on the given residual channels, its "
        "enrichment over their share of channels, a bootstrap interval over matrices and "
        "a p-value against count-matched random channel sets (docs/channels.md). "
        "Reads the store's channels/ arrays only.",
    )
    p.add_argument("store", type=Path, help="a finished transition store")
    p.add_argument(
        "--channels",
        required=True,
        help='channels.json ({"channels": [...], "hidden_size": H}) or a comma-separated list',
    )
    p.add_argument(
        "--draws", type=DRAWS, default=2000, help="random channel sets and bootstrap resamples (default 2000)"
    )
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--out", type=Path, help="folder for channel_stats.csv (default: the store)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")


def cmd_channel_stats(args: argparse.Namespace) -> int:
    from ..channels.enrichment import load_channel_set

    check_draws(args.draws, "--draws")
    cset = load_channel_set(args.channels)
    res = transition_channel_stats(
        args.store,
        cset.channels,
        draws=args.draws,
        seed=args.seed,
        hidden=cset.hidden,
        what=f"--channels {cset.source}",
    )
    out = args.out or args.store
    res.write(out)
    print(
        f"{res.transition}: {len(res.channels)} of {res.hidden} channels "
        f"(share {len(res.channels) / res.hidden:.4f}), {args.draws} draws, seed {args.seed}"
    )
    print(f"{'group':<18} {'comp':<5} {'energy share':>12} {'ratio':>8} {'95% interval':>19} {'p':>7}")
    for r in res.rows:
        if r["group"] in ("all", "reader", "writer"):
            print(
                f"{r['group']:<18} {r['component']:<5} {r['energy_share']:>12.4f} {r['ratio']:>8.3f} "
                f"[{r['ci_lo']:>7.3f}, {r['ci_hi']:>7.3f}] {r['p_value']:>7.4f}"
            )
    print(f"wrote {out / STATS_FILE} (also per module, and the share per layer beside it)")
    return 0

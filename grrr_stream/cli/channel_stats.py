"""``grrr-stream channel-stats``: one transition's update energy on a set of residual channels."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import ConfigError, StoreError


def channel_stats_parser(sub) -> None:
    p = sub.add_parser("channel-stats", help="share of a transition's update energy on a set of residual channels",
                       description="Per component (diag, off, null) and for all matrices, readers, writers and each "
                                   "module: the share of the update's energy on the given residual channels, its "
                                   "enrichment over their share of channels, a bootstrap interval over matrices and "
                                   "a p-value against count-matched random channel sets (docs/channels.md). "
                                   "Reads the store's channels/ arrays only.")
    p.add_argument("store", type=Path, help="a finished transition store")
    p.add_argument("--channels", required=True,
                   help="channels.json ({\"channels\": [...], \"hidden_size\": H}) or a comma-separated list")
    p.add_argument("--draws", type=int, default=2000, help="random channel sets and bootstrap resamples (default 2000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="folder for channel_stats.csv (default: the store)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")


def cmd_channel_stats(args: argparse.Namespace) -> int:
    from ..channels.enrichment import enrichment, load_channel_set, store_energies
    from ..files import atomic_write_text, to_csv
    from ..store.transition_store import StoredTransition

    if args.draws < 100:
        raise ConfigError("--draws must be at least 100")
    cset = load_channel_set(args.channels)
    energies, records = store_energies(args.store)
    if cset.hidden is not None and cset.hidden != energies.shape[1]:
        raise StoreError(f"--channels {cset.source} was chosen for hidden size {cset.hidden}, but {args.store} has "
                         f"{energies.shape[1]} residual channels: a different model")
    label = StoredTransition(args.store).label
    rows = [{"transition": label, **r} for r in enrichment(energies, records, cset.channels, draws=args.draws,
                                                            seed=args.seed)]
    out = args.out or args.store
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "channel_stats.csv", to_csv(rows))
    print(f"{label}: {len(cset.channels)} of {energies.shape[1]} channels "
          f"(share {len(cset.channels) / energies.shape[1]:.4f}), {args.draws} draws, seed {args.seed}")
    print(f"{'group':<18} {'comp':<5} {'energy share':>12} {'ratio':>8} {'95% interval':>19} {'p':>7}")
    for r in rows:
        if r["group"] in ("all", "reader", "writer"):
            print(f"{r['group']:<18} {r['component']:<5} {r['energy_share']:>12.4f} {r['ratio']:>8.3f} "
                  f"[{r['ci_lo']:>7.3f}, {r['ci_hi']:>7.3f}] {r['p_value']:>7.4f}")
    print(f"wrote {out / 'channel_stats.csv'} (also per module)")
    return 0

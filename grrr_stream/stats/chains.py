"""One value per independent unit: transitions that share a base model form one chain, and a claim over a set of
transitions is tested on one value per chain.

Transitions from one base share its evaluation, its frame and much of their training data; the demo's SFT and
sibling steps from one base have diag retentions of 59.8 and 59.4 %. Counted one by one they would count the same
evidence twice. A chain's value is the mean of its transitions' values, and its interval over problems runs from
the mean of their lower ends to the mean of their upper ends: no narrower than the interval of the mean, whatever
the correlation between them (so a chain's side is never claimed with more certainty than it has).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence


@dataclass(frozen=True)
class ChainValue:
    chain: str
    members: tuple[str, ...]  # its transitions' names, as the page writes them
    value: float
    lo: float
    hi: float


def per_chain(values: Sequence[tuple[str, str, float, float, float]], chain_of: Mapping[str, str]) -> list[ChainValue]:
    """(transition id, name, value, lo, hi) per transition → one :class:`ChainValue` per chain, in the order the
    chains first appear; a transition without a chain is a chain of its own. Non-finite values are left out."""
    groups: dict[str, list] = {}
    for tid, name, v, lo, hi in values:
        if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (v, lo, hi)):
            continue
        groups.setdefault(chain_of.get(tid, tid), []).append((name, v, lo, hi))
    out = []
    for chain, rows in groups.items():
        n = len(rows)
        out.append(
            ChainValue(
                chain,
                tuple(r[0] for r in rows),
                sum(r[1] for r in rows) / n,
                sum(r[2] for r in rows) / n,
                sum(r[3] for r in rows) / n,
            )
        )
    return out


def sizes(chains: Sequence[ChainValue]) -> str:
    """'6 transitions in 3 chains' (or '1 transition in 1 chain')."""
    t = sum(len(c.members) for c in chains)
    return f"{t} transition{'' if t == 1 else 's'} in {len(chains)} chain{'' if len(chains) == 1 else 's'}"

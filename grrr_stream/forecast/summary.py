"""How a forecast's total splits: time by kind of unit, downloads, disk, and the largest RAM and GPU memory.

Takes the per-unit rows of :class:`grrr_stream.sweep.forecast.UnitForecast` (anything with ``kind``,
``seconds``, ``download``, ``write``, ``ram`` and ``gpu``), so that it needs nothing from the sweep package.
"""

from __future__ import annotations

from typing import Iterable, Optional

# the kinds a person plans for; the rest (stats, comparisons, tiny-chain training) are summed as 'other'
_KINDS = (
    ("decompose", "decompositions"),
    ("evaluate", "evaluations"),
    ("variant", "variant builds"),
    ("channels", "channel passes"),
    ("channel-stats", "channel statistics"),
)


def split(rows: Iterable) -> dict:
    """{'seconds': {label: (seconds, units, unknown)}, 'download', 'write', 'ram', 'gpu'} over ``rows``."""
    rows = list(rows)
    named = {k for k, _ in _KINDS}
    out: dict = {"seconds": {}}
    for kind, label in (*_KINDS, (None, "other")):
        sub = [u for u in rows if (u.kind == kind if kind else u.kind not in named)]
        if sub:
            out["seconds"][label] = (sum(u.seconds or 0.0 for u in sub), len(sub), sum(u.seconds is None for u in sub))
    out["download"] = sum(u.download or 0 for u in rows)
    out["write"] = sum(u.write or 0 for u in rows)
    out["ram"] = max((u.ram for u in rows if u.ram is not None), default=None)
    out["gpu"] = max((getattr(u, "gpu", None) for u in rows if getattr(u, "gpu", None) is not None), default=None)
    return out


def _h(seconds: float) -> str:
    return f"{seconds / 3600:,.1f} h"


def _gib(n: Optional[float]) -> str:
    return "none" if not n else f"{n / 2**30:,.1f} GiB"


def split_lines(rows: Iterable, device: str) -> list[str]:
    """The split as lines: 'on h100-80g: 412.3 h = decompositions 20.1 h (47) + evaluations ...'."""
    s = split(rows)
    total = sum(v[0] for v in s["seconds"].values())
    parts = " + ".join(
        f"{label} {_h(sec)} ({n}{f', {unk} unknown' if unk else ''})" for label, (sec, n, unk) in s["seconds"].items()
    )
    return [
        f"on {device}: {_h(total)} one unit after another = {parts}",
        f"  downloads {_gib(s['download'])}, disk written {_gib(s['write'])}, largest RAM {_gib(s['ram'])}, "
        f"largest GPU memory {_gib(s['gpu'])}",
    ]


def lever_lines(rows: Iterable) -> list[str]:
    """What the engine dtype and the evaluation design take off the evaluations' time, from the rows that carry
    their ``alternatives`` (seconds under each design and dtype), ``dtype`` ('bfloat16 stored', 'float32
    predicted', ...) and ``design``. Where 'auto' is predicted (no store yet), the bounds: every such evaluation in
    bfloat16, every one in float32."""
    ev = [u for u in rows if getattr(u, "alternatives", None) and u.seconds is not None]
    if not ev or any(v is None for u in ev for v in u.alternatives.values()):
        return []
    fixed32 = sum(u.alternatives["fixed float32"] for u in ev)
    fixed_chosen = sum(u.alternatives[f"fixed {u.dtype.split()[0]}"] for u in ev)
    this = sum(u.seconds for u in ev)
    lines = [
        f"evaluations ({len(ev)}): {_h(this)}, {this / fixed32:.2f} of the fixed design in float32 ({_h(fixed32)})"
    ]
    taken = fixed32 - this
    if taken > 0:
        dtype_lever, design_lever = fixed32 - fixed_chosen, fixed_chosen - this
        lines.append(
            f"  levers: the engine dtype {_h(dtype_lever)} ({dtype_lever / taken:.0%}), the evaluation design "
            f"{_h(design_lever)} ({design_lever / taken:.0%})"
        )
    sources: dict[str, int] = {}
    for u in ev:
        sources[u.dtype] = sources.get(u.dtype, 0) + 1
    predicted = [u for u in ev if u.dtype.endswith("predicted")]
    said = ", ".join(f"{n} {k}" for k, n in sorted(sources.items()))
    if predicted:
        rest = this - sum(u.seconds for u in predicted)
        lo, hi = (rest + sum(u.alternatives[f"{u.design} {t}"] for u in predicted) for t in ("bfloat16", "float32"))
        lines.append(
            f"  engine dtype: {said}; until their stores say, between {_h(lo)} (every predicted one bfloat16) and "
            f"{_h(hi)} (every one float32)"
        )
    else:
        lines.append(f"  engine dtype: {said}")
    return lines

"""What the evaluate kind contributes to the sweep's report: every finished evaluation's tables (accuracy,
retention, removal, solved/lost, and avg@n, pass@k, maj@k where answers were sampled), read from its folder,
and where an evaluation asked for ``engine.dtype: auto``, the dtype each transition got and why
(``engine_dtype.csv``, from its record; shown by the page as a table of its own). The claims over each suite's
evaluated transitions are the ``claims`` kind's (:mod:`.claims`)."""

from __future__ import annotations

import json
from pathlib import Path

from ...evaluation.pipeline import RECORD_FILE, TABLES
from ..rows import Row, read_rows, rectangular
from ..units import Unit

# report table (a Report field) → its file in WORKDIR/report
READ = ("accuracy", "retention", "removal", "solved_lost")
REPORT_FILES = {
    "accuracy": "accuracy.csv",
    "retention": "retention.csv",
    "removal": "removal.csv",
    "solved_lost": "solved_lost.csv",
    "sampled": "sampled.csv",
}
REPORT_TABLES = tuple(REPORT_FILES.values())
DTYPE_TABLE = "engine_dtype.csv"  # a Report.extra table: the page shows it as it is


def report(plan, done: list[Unit], rep) -> None:
    """The evaluation tables of every finished evaluation."""
    tables: dict[str, list[Row]] = {name: [] for name in READ}
    for u in done:
        tr = plan.transitions[u.params.transition]
        suite = u.params.suite or ""
        label = {
            "transition": tr.id + (f" [{suite}]" if suite else ""),
            "kind": tr.kind,
            "from": tr.parent,
            "to": tr.child,
        }
        for name in READ:
            tables[name] += [{**label, **r} for r in read_rows(Path(u.out) / TABLES[name])]
        rep.sampled += [{**label, **r} for r in sampled_rows(read_rows(Path(u.out) / TABLES["metrics"]))]
        chosen = dtype_row(Path(u.out) / RECORD_FILE)
        if chosen:
            rep.extra.setdefault(DTYPE_TABLE, []).append({"transition": label["transition"], "kind": tr.kind, **chosen})
    if DTYPE_TABLE in rep.extra:
        rep.extra[DTYPE_TABLE] = rectangular(rep.extra[DTYPE_TABLE])
    for name, rows in tables.items():
        setattr(rep, name, rectangular(rows))
    rep.sampled = rectangular(rep.sampled)


def write(rep, put) -> None:
    for field, name in REPORT_FILES.items():
        put(name, getattr(rep, field))


def dtype_row(record: Path) -> dict:
    """The engine dtype an evaluation that asked for 'auto' got, from its record: the floor, each judged part's
    pooled share kept through bf16, the worst matrix of the lowest part and the reason ({} for a dtype set
    outright, or a record from before the choice was recorded)."""
    try:
        chosen = json.loads(record.read_text()).get("engine_dtype") or {}
    except (OSError, ValueError):
        return {}
    if chosen.get("requested") != "auto":
        return {}
    parts = chosen.get("parts") or {}
    low = min(parts, key=lambda c: parts[c]["kept"], default=None)
    return {
        "engine_dtype": chosen["dtype"],
        "floor": chosen.get("floor"),
        **{f"kept_{c}": parts[c]["kept"] for c in ("diag", "off", "null") if c in parts},
        "lowest_part": low or "",
        "worst_matrix": parts[low]["worst_matrix"] if low else "",
        "worst_matrix_kept": parts[low]["worst_kept"] if low else None,
        "shares": chosen.get("source", ""),
        "reason": chosen.get("reason", ""),
    }


def sampled_rows(long: list[Row]) -> list[Row]:
    """An evaluation's metrics.csv (one row per variant, benchmark and metric) as one row per variant and
    benchmark with a column per metric (percent): avg@n (the mean accuracy of the n sampled answers),
    pass@k and maj@k; only where answers were sampled (n > 1): with one answer, avg is the accuracy table's."""
    out: dict[tuple, Row] = {}
    for r in long:
        n = r.get("samples")
        if not isinstance(n, int) or n < 2:
            continue
        row = out.setdefault(
            (r["variant"], r["benchmark"]),
            {"variant": r["variant"], "benchmark": r["benchmark"], "samples": n, "problems": r.get("problems")},
        )
        row[f"avg@{n}" if r["metric"] == "avg" else r["metric"]] = r["value"]
    return list(out.values())

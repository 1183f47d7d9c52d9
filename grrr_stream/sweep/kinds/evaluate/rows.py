"""What the evaluate kind contributes to the sweep's report: every finished evaluation's tables (accuracy,
retention, removal, solved/lost, and avg@n, pass@k, maj@k where answers were sampled), read from its folder,
and where an evaluation asked for ``engine.dtype: auto``, the dtype each transition got and why
(``engine_dtype.csv``, from its record; shown by the page in the kinds' tables). The claims over each suite's
evaluated transitions are the ``claims`` kind's (:mod:`..claims`)."""

from __future__ import annotations

import json
from pathlib import Path

from ....evaluation.pipeline import RECORD_FILE, TABLES
from ...rows import Report, Row, TableRows, read_rows, rectangular
from ...units import Unit
from ..base import Planned

# the evaluation's table (its name in the unit's TABLES) → its file in WORKDIR/report; the paper's tables (Tables
# 5/6 and 8, the accuracy per benchmark, the sampled metrics) are laid out by the page itself (report/tables.py)
READ = ("accuracy", "retention", "removal", "solved_lost")
REPORT_FILES = {
    "accuracy": "accuracy.csv",
    "retention": "retention.csv",
    "removal": "removal.csv",
    "solved_lost": "solved_lost.csv",
    "sampled": "sampled.csv",
}
DTYPE_TABLE = "engine_dtype.csv"
REPORT_TABLES = (*REPORT_FILES.values(), DTYPE_TABLE)
DTYPE_TITLE = "Engine dtype chosen for 'auto'"
DTYPE_NOTE = (
    "Per evaluation that asked for engine.dtype auto: the dtype it got, the floor, each judged part's "
    "pooled share kept through bf16 and the worst matrix of the lowest part (engine_dtype.csv)."
)


def report(plan: Planned, done: list[Unit], rep: Report) -> list[TableRows]:
    """The evaluation tables of every finished evaluation."""
    tables: dict[str, list[Row]] = {name: [] for name in (*READ, "sampled")}
    chosen_rows: list[Row] = []
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
        tables["sampled"] += [{**label, **r} for r in sampled_rows(read_rows(Path(u.out) / TABLES["metrics"]))]
        chosen = dtype_row(Path(u.out) / RECORD_FILE)
        if chosen:
            chosen_rows.append({"transition": label["transition"], "kind": tr.kind, **chosen})
    return [
        *(TableRows(REPORT_FILES[name], rectangular(rows)) for name, rows in tables.items()),
        TableRows(DTYPE_TABLE, rectangular(chosen_rows), DTYPE_TITLE, DTYPE_NOTE),
    ]


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
        **{f"last_step_kept_{k.split()[0]}": v["kept"] for k, v in parts.items() if " of the last step " in k},
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

"""What the evaluate kind contributes to the sweep's report: every finished evaluation's tables (accuracy,
retention, removal, solved/lost, and avg@n, pass@k, maj@k where answers were sampled), read from its folder.
The claims over each suite's evaluated transitions are the ``claims`` kind's (:mod:`.claims`)."""

from __future__ import annotations

from pathlib import Path

from ...evaluation.pipeline import TABLES
from ..rows import Row, read_rows, rectangular
from ..units import Unit

# report table (a Report field) → its file in WORKDIR/report
READ = ("accuracy", "retention", "removal", "solved_lost")
REPORT_FILES = {"accuracy": "accuracy.csv", "retention": "retention.csv", "removal": "removal.csv",
                "solved_lost": "solved_lost.csv", "sampled": "sampled.csv"}
REPORT_TABLES = tuple(REPORT_FILES.values())


def report(plan, done: list[Unit], rep) -> None:
    """The evaluation tables of every finished evaluation."""
    tables: dict[str, list[Row]] = {name: [] for name in READ}
    for u in done:
        tr = plan.transitions[u.params.transition]
        suite = u.params.suite or ""
        label = {"transition": tr.id + (f" [{suite}]" if suite else ""), "kind": tr.kind, "from": tr.parent,
                 "to": tr.child}
        for name in READ:
            tables[name] += [{**label, **r} for r in read_rows(Path(u.out) / TABLES[name])]
        rep.sampled += [{**label, **r} for r in sampled_rows(read_rows(Path(u.out) / TABLES["metrics"]))]
    for name, rows in tables.items():
        setattr(rep, name, rectangular(rows))
    rep.sampled = rectangular(rep.sampled)


def write(rep, put) -> None:
    for field, name in REPORT_FILES.items():
        put(name, getattr(rep, field))


def sampled_rows(long: list[Row]) -> list[Row]:
    """An evaluation's metrics.csv (one row per variant, benchmark and metric) as one row per variant and
    benchmark with a column per metric (percent): avg@n (the mean accuracy of the n sampled answers),
    pass@k and maj@k; only where answers were sampled (n > 1): with one answer, avg is the accuracy table's."""
    out: dict[tuple, Row] = {}
    for r in long:
        n = r.get("samples")
        if not isinstance(n, int) or n < 2:
            continue
        row = out.setdefault((r["variant"], r["benchmark"]), {"variant": r["variant"], "benchmark": r["benchmark"],
                                                              "samples": n, "problems": r.get("problems")})
        row[f"avg@{n}" if r["metric"] == "avg" else r["metric"]] = r["value"]
    return list(out.values())

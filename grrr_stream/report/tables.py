"""The HTML report's tables, built from the sweep report's typed rows (never from the files again), each cell
naming its source (:mod:`.cells`).

Rows are grouped SFT / RL by the child's post-training method as the claims group them
(:func:`grrr_stream.stats.claims_sets.method_group`); the ``kind`` column says cumulative or incremental.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional, Sequence

from ..columns import REPORT
from ..plots import cosine_label, p_text
from ..stats.claims_sets import method_group
from ..stats.run import COMPARISONS_TABLE
from ..sweep.kinds import TRANSITION_COLUMNS, decompose
from ..sweep.kinds.claims import FILES as CLAIM_FILES
from ..sweep.kinds.evaluate.rows import REPORT_FILES as FILES
from .cells import VARIANT_LABELS, Cell, Col, Row, Table, cell, columns_of, grouped, split, transposed, ungrouped

TABLE34 = (
    "transition",
    "kind",
    "n",
    "sv_cos_mean",
    "delta_max_mean",
    "sr_w0_mean",
    "sr_delta_mean",
    "sr_w1_mean",
    "dsr_pct_mean",
    "alpha_mean",
    "r_delta_mean",
)
TABLE7 = ("transition", "kind", "f_diag_mean", "f_off_mean", "f_null_mean", "r_delta_mean")
PAPER_VARIANTS = ("base", "full", "diag", "off", "null", "offnull")


def paper_tables(report, method_of: Callable[[Row], Optional[str]], sft: Sequence[str]) -> list[Table]:
    """In the paper's order: Tables 3/4, 5/6 (the paper's layout, then retention with the paired CIs), 7, 8;
    the accuracy per benchmark and the sampled metrics folded after them."""
    trs = report.rows(decompose.TABLE)
    tables = []
    if trs:
        cols = columns_of(trs, TABLE34)
        tables.append(
            Table(
                "table34",
                "Tables 3/4 — spectral invariance, stable rank, additivity",
                "Means over each transition's matrices (transitions.csv): SV cos = cosine of the "
                "singular-value profiles of W0 and W1, δ_max, stable ranks SR and their change Δ% SR, "
                "additivity α, r_Δ = ‖ΔW‖/‖W0‖.",
                [c.label for c in cols],
                grouped(trs, decompose.TABLE, cols, method_of, sft),
            )
        )
        ranks = {c.name: c for c in decompose.RANK_CHANGES.present(trs[0])}
        if ranks:
            cols = columns_of(trs, ["transition", "kind", *ranks])
            for c in cols[2:]:
                c.label = ranks[c.key].label
            tables.append(
                Table(
                    "table4-rank",
                    "Table 4 — numerical rank change W0 → W1",
                    "Per rank threshold T: nrank(W1) − nrank(W0) over matrices, mean and largest "
                    "magnitude. T = 0.001 is the paper's reading (≤ 87); at 1e-07 rounding of the small "
                    "singular values dominates.",
                    [c.label for c in cols],
                    grouped(trs, decompose.TABLE, cols, method_of, sft),
                )
            )
    tables += _evaluation_tables(report, method_of, sft)
    if trs:
        cols = columns_of(trs, TABLE7)
        tables.insert(
            _after(tables, ("table56", "table56-retention", "table34", "table4-rank")),
            Table(
                "table7",
                "Table 7 — energy fractions of ΔW",
                "Shares of ‖ΔW‖² in the diagonal (reshaping), off-diagonal (rotation) and null (routing) "
                "parts, means over matrices.",
                [c.label for c in cols],
                grouped(trs, decompose.TABLE, cols, method_of, sft),
            ),
        )
    return tables


def _after(tables: list[Table], ids: Sequence[str]) -> int:
    """The index just after the last table with one of ``ids`` (0 when none)."""
    where = [i for i, t in enumerate(tables) if t.id in ids]
    return where[-1] + 1 if where else 0


ADAPTIVE_NOTE = (
    " Rows of an adaptive suite: its anytime-valid 95 % interval over the problems the "
    "variant answered (problems), against Full only. Each variant stops once its claim thresholds "
    "are decided or its interval is within its precision (adaptive.variant_precision_points: by "
    "default ±4 points for the controls proj, randrm and the principal bands, which only have to "
    "sit near Full, for off and null, which feed no finer claim, and for diag; ±2 for offnull and the "
    "rest); Full answers as far as its longest variant, so Full's problems are the transition's cost."
)


def _retention_tables(retention: list[Row], differences: list[Row], method_of, sft) -> list[Table]:
    """Tables 5/6: the paper's layout, then retention with the paired differences of each variant."""
    tables = []
    # the paper's layout: one row per transition, the five-benchmark average of each variant
    variants = list(dict.fromkeys(r["variant"] for r in retention))
    order = [v for v in PAPER_VARIANTS if v in variants] + [v for v in variants if v not in PAPER_VARIANTS]
    at = {(r["transition"], r["variant"]): i for i, r in enumerate(retention)}
    first = {}
    for i, r in enumerate(retention):
        first.setdefault(r["transition"], (i, r))
    groups: dict[str, list] = {"SFT": [], "RL": [], "no method": []}
    src = FILES["retention"]
    for t, (i0, r0) in first.items():
        cells = [Cell(t, f"{src}#{i0}:transition"), Cell(r0.get("kind"), f"{src}#{i0}:kind")]
        for v in order:
            i = at.get((t, v))
            cells.append(Cell(retention[i]["average"], f"{src}#{i}:average") if i is not None else Cell(None))
        groups[method_group(method_of(r0), sft) or "no method"].append(cells)
    tables += split(
        Table(
            "table56",
            "Tables 5/6 — causal decomposition: accuracy per variant",
            "Score (%): unweighted mean over benchmarks, as the paper's Tables 5 (SFT) and 6 (RL).",
            ["transition", "kind"] + [VARIANT_LABELS.get(v, v) for v in order],
            [(g, rs) for g, rs in groups.items() if rs],
        ),
        2,
    )
    diffs = {
        (d["transition"] + ("" if d["suite"] == "main" else f" [{d['suite']}]"), d["variant"]): (i, d)
        for i, d in enumerate(differences)
    }
    dcols = columns_of(differences, ("minus_full", "minus_proj", "problems"))
    adaptive = any(d.get("interval") == "anytime-valid" for d in differences)

    def paired(_i: int, r: Row) -> list[Cell]:
        j, d = diffs.get((r["transition"], r["variant"]), (None, {}))
        return [cell(d, j, CLAIM_FILES["differences"], c) for c in dcols]

    cols = columns_of(retention, ("transition", "variant", "retention_pct", "retention_proj_pct"))
    tables.append(
        Table(
            "table56-retention",
            "Tables 5/6 — retention and the paired differences",
            "Retention = 100 · score / Full (and / proj); − Full, − proj: the difference in points "
            "with its paired bootstrap 95 % CI over the transition's problems (differences.csv)."
            + (ADAPTIVE_NOTE if adaptive else ""),
            [c.label for c in cols] + [c.label for c in dcols],
            grouped(retention, FILES["retention"], cols, method_of, sft, paired),
        )
    )
    return tables


def _evaluation_tables(report, method_of, sft) -> list[Table]:
    """Tables 5/6 and 8, then the accuracy per benchmark and the sampled metrics (folded)."""
    retention, removal, accuracy, sampled = (
        report.rows(FILES[k]) for k in ("retention", "removal", "accuracy", "sampled")
    )
    tables = _retention_tables(retention, report.rows(CLAIM_FILES["differences"]), method_of, sft) if retention else []
    if removal:
        tables.append(_removal_table(removal, method_of, sft))
    if accuracy:
        tables += _accuracy_tables(accuracy, method_of, sft)
    if sampled:
        tables += _sampled_tables(sampled, method_of, sft)
    return tables


def _removal_table(removal: list[Row], method_of, sft) -> Table:
    """Table 8: removing the diagonal against removing as much at random."""
    cols = columns_of(
        removal,
        (
            "transition",
            "kind",
            "full",
            "remove_diag",
            "remove_random",
            "delta_diag",
            "delta_rand",
            "proj",
            "delta_diag_proj",
            "delta_rand_proj",
            "remove_random_seeds",
        ),
    )
    return Table(
        "table8",
        "Table 8 — removing the diagonal against random removal",
        "Scores (%); Δ = remove − Full (points; negative when removal hurts); vs proj: against proj (removal.csv).",
        [c.label for c in cols],
        grouped(removal, FILES["removal"], cols, method_of, sft),
    )


def _accuracy_tables(accuracy: list[Row], method_of, sft) -> list[Table]:
    """The accuracy per benchmark (folded), split when wide."""
    cols = columns_of(accuracy, [k for k in accuracy[0] if k not in ("from", "to")])
    t = Table(
        "accuracy",
        "Accuracy per benchmark",
        "Per variant: the table metric per benchmark (%), its average, and answer diagnostics.",
        [c.label for c in cols],
        grouped(accuracy, FILES["accuracy"], cols, method_of, sft),
        folded=True,
    )
    return split(t, ("transition", "variant"))


def _sampled_tables(sampled: list[Row], method_of, sft) -> list[Table]:
    """pass@k, maj@k and avg@n of the problems answered more than once (folded), split when wide."""
    cols = columns_of(sampled, [k for k in sampled[0] if k not in ("from", "to")])
    return split(
        Table(
            "sampled",
            "Sampled answers — pass@k, maj@k, avg@n",
            "Where each problem was answered n > 1 times: avg@n (mean accuracy of the n answers), "
            "unbiased pass@k and maj@k (majority vote over equivalent answers), in percent, from "
            "each evaluation's metrics.csv.",
            [c.label for c in cols],
            grouped(sampled, FILES["sampled"], cols, method_of, sft),
            folded=True,
        ),
        ("transition", "variant", "benchmark"),
    )


def comparison_table(report) -> list[Table]:
    """Figures 4–5 as numbers: each comparison's median cosine with its CI over matrices, the isotropic band, the
    null test's p and what the two say together (:func:`grrr_stream.plots.cosine_label`), and the update norms."""
    comparisons = report.rows(COMPARISONS_TABLE)
    if not comparisons:
        return []
    cols = columns_of(
        comparisons,
        ("label", "kind", "median_cos_off", "n_matrices", "norm_sft", "norm_incr", "norm_cum"),
        {"median_cos_off": ("ci_lo", "ci_hi")},
    )
    band = Col("null_lo", "isotropic band ±2σ")
    cols.insert(next((k + 1 for k, c in enumerate(cols) if c.key == "median_cos_off"), len(cols)), band)
    rows = []
    for i, r in enumerate(comparisons):
        cells = []
        for c in cols:
            if c is band:
                b = Cell(None)
                b.lo, b.hi = (
                    cell(r, i, COMPARISONS_TABLE, Col("null_lo", "")),
                    cell(r, i, COMPARISONS_TABLE, Col("null_hi", "")),
                )
                cells.append(b)
            else:
                cells.append(cell(r, i, COMPARISONS_TABLE, c))
        cells.append(Cell(p_text(r.get("p_value"), r.get("null_draws"))))
        cells.append(Cell(cosine_label(r)))
        rows.append(cells)
    return [
        Table(
            "comparisons",
            "Figures 4–5 — stepwise and independent cosines against the isotropic null",
            "Median off-diagonal cosine over matrices with its 95 % bootstrap CI over matrices, the matched "
            "isotropic null's ±2σ band and its Monte Carlo p (comparisons.csv); the reading says what rests on "
            "which: the band on the null test, the direction on the CI. Norms: ‖ΔW‖_F against ‖ΔW_cum‖_F.",
            [c.label for c in cols] + ["p (null draws)", "reading"],
            [("", rows)],
        )
    ]


def other_tables(report, method_of, sft) -> list[Table]:
    """The informative set, the beyond-the-paper means, the claims' rows (folded)."""
    informative, claim_rows = report.rows(CLAIM_FILES["informative"]), report.rows(CLAIM_FILES["claims"])
    tables: list[Table] = _informative_tables(informative) if informative else []
    tables += _beyond_tables(report.rows(decompose.TABLE))
    if claim_rows:
        tables.append(_claims_table(claim_rows))
    return tables


def _informative_tables(informative: list[Row]) -> list[Table]:
    """The informative set: each transition's gain over the base against the threshold, split when wide."""
    cols, body = ungrouped(
        informative,
        CLAIM_FILES["informative"],
        (
            "suite",
            "transition",
            "kind",
            "gain",
            "informative",
            "informative_within_ci",
            "full_minus_proj",
            "problems",
            "rest_from",
            "note",
            "rest_fallback",
        ),
    )
    return split(
        Table(
            "informative",
            "The informative set",
            "Full − Base ≥ the informative threshold, with its paired 95 % CI over problems (informative.csv).",
            [c.label for c in cols],
            body,
        ),
        ("suite", "transition"),
    )


def _beyond_tables(transitions: list[Row]) -> list[Table]:
    """The analyses' means beyond the paper (folded), one column per transition; none when no analysis ran."""
    beyond = TRANSITION_COLUMNS.stats_in(transitions[0] if transitions else {}, REPORT)
    if not beyond:
        return []
    return [
        replace(t, folded=True)
        for t in transposed(
            "beyond",
            "Beyond the paper",
            "Update sparsity (pooled over entries, with the per-matrix spread), "
            "principal-band energies, subspace angles and component survival through 16-bit rounding (means over "
            "matrices; docs/statistics.md: 'Beyond the paper'); one column per transition.",
            transitions,
            decompose.TABLE,
            beyond,
        )
    ]


def _claims_table(claim_rows: list[Row]) -> Table:
    """Every statistic of the claims (folded), its interval folded into the value's column."""
    cols, body = ungrouped(
        claim_rows,
        CLAIM_FILES["claims"],
        (
            "suite",
            "set",
            "group",
            "statistic",
            "variant",
            "reference",
            "transitions",
            "threshold",
            "value",
            "resampling",
        ),
        {"value": ("ci_lo", "ci_hi")},
    )
    return Table(
        "claims_table",
        "Claims, every statistic",
        "One row per suite, statistic, variant, "
        "reference, set and group; intervals over problems, the transitions fixed (claims.csv).",
        [c.label for c in cols],
        body,
        folded=True,
    )


def kind_tables(report) -> list[Table]:
    """The kinds' own tables (those with a title: :class:`grrr_stream.sweep.rows.TableRows`), each as it is."""
    return [
        replace(part, folded=t.folded)
        for t in report.titled
        for part in plain_table("kind-" + t.name.rsplit(".", 1)[0].replace("_", "-"), t.title, t.note, t.rows, t.name)
    ]


def plain_table(tid: str, title: str, note: str, rows: Sequence[Row], source: str) -> list[Table]:
    """Any table as it is (the hook for analyses the report does not know), split when wide."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    cols, body = ungrouped(rows, source, keys)
    return split(Table(tid, title, note, [c.label for c in cols], body), 1)

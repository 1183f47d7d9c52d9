"""The HTML report's tables, built from the sweep report's typed rows (never from the files again).

Every cell keeps where it comes from: the CSV file in WORKDIR/report, the row's index there and the
column (``Cell.src``, rendered as ``data-src``), and the exact text that file holds (``Cell.text``,
rendered as ``data-value``), so a reader (and the browser test) can check any number against its file.
Rows are grouped SFT / RL by the child's post-training method as the claims group them
(:func:`grrr_stream.stats.claims_sets.method_group`); the ``kind`` column says cumulative or incremental.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Optional, Sequence

from ..geometry.analyses import analysis_columns
from ..stats.claims_sets import method_group
from ..stats.run import COMPARISONS_TABLE
from ..sweep.kinds import decompose
from ..sweep.kinds.claims import FILES as CLAIM_FILES
from ..sweep.kinds.evaluate.rows import REPORT_FILES as FILES

Row = dict


def csv_text(v) -> str:
    """The text :func:`grrr_stream.files.to_csv` writes for a cell."""
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(float(v))
    return str(v)


UNDEFINED = "—"


def shown(v) -> str:
    """A cell as people read it: 4 significant digits for floats (6 for large ones), '—' for undefined (no value,
    NaN: a ratio to a zero score, a statistic of no transition)."""
    if v is None or (isinstance(v, str) and v.strip().lower() in ("", "nan")):
        return UNDEFINED
    if isinstance(v, bool) or not isinstance(v, float):
        return str(v)
    if v != v or v in (float("inf"), float("-inf")):
        return UNDEFINED
    return f"{v:.6g}" if abs(v) >= 1000 else f"{v:.4g}"


@dataclass
class Cell:
    value: object
    src: str = ""  # 'file.csv#row:column' ('' for a cell computed for display only)
    lo: Optional["Cell"] = None  # an interval's ends: shown as 'x [lo, hi]', each end naming its own source
    hi: Optional["Cell"] = None

    @property
    def text(self) -> str:
        return csv_text(self.value)

    @property
    def display(self) -> str:
        return shown(self.value)

    @property
    def number(self) -> bool:
        return isinstance(self.value, (int, float)) and not isinstance(self.value, bool)

    @property
    def has_interval(self) -> bool:
        return self.lo is not None and self.hi is not None and UNDEFINED not in (self.lo.display, self.hi.display)


@dataclass
class Table:
    id: str
    title: str
    note: str
    columns: list[str]
    groups: list[tuple[str, list[list[Cell]]]] = field(default_factory=list)
    folded: bool = False  # a dump: shown inside <details>, closed

    @property
    def n_rows(self) -> int:
        return sum(len(rows) for _, rows in self.groups)


# CSV columns as the paper writes them
LABELS = {
    "transition": "transition",
    "kind": "kind",
    "method": "method",
    "n": "matrices",
    "variant": "variant",
    "sv_cos_mean": "SV cos",
    "delta_max_mean": "δ_max",
    "sr_w0_mean": "SR(W0)",
    "sr_delta_mean": "SR(ΔW)",
    "sr_w1_mean": "SR(W1)",
    "dsr_pct_mean": "Δ% SR",
    "alpha_mean": "α",
    "r_delta_mean": "r_Δ",
    "f_diag_mean": "f_diag",
    "f_off_mean": "f_off",
    "f_null_mean": "f_null",
    "average": "score (%)",
    "retention_pct": "retention vs Full (%)",
    "retention_proj_pct": "retention vs proj (%)",
    "minus_full": "− Full (points)",
    "minus_proj": "− proj (points)",
    "full": "Full",
    "proj": "proj",
    "remove_diag": "Remove diag",
    "remove_random": "Remove random",
    "delta_diag": "Δ_diag",
    "delta_rand": "Δ_rand",
    "delta_diag_proj": "Δ_diag vs proj",
    "delta_rand_proj": "Δ_rand vs proj",
    "remove_random_seeds": "random seeds",
    "median_cos_off": "median cos_off",
    "n_matrices": "matrices",
    "gain": "Full − Base (points)",
    "full_minus_proj": "Full − proj (points)",
    "informative_within_ci": "within its CI",
    "value": "value",
    "transitions": "transitions",
    "norm_sft": "‖ΔW_SFT‖",
    "norm_incr": "‖ΔW_incr‖",
    "norm_cum": "‖ΔW_cum‖",
}
VARIANT_LABELS = {
    "base": "Base",
    "full": "Full",
    "diag": "Diag",
    "off": "Off",
    "null": "Null",
    "offnull": "OffNull",
    "proj": "proj",
}
MAX_COLUMNS = 12  # wider tables are split into parts (the key columns repeated), never scrolled


def label(col: str) -> str:
    if col in LABELS:
        return LABELS[col]
    return col.replace("_mean", "").replace("_", " ")


@dataclass
class Col:
    key: str
    label: str
    lo: str = ""  # the columns of its interval's ends ('' for none)
    hi: str = ""


def columns_of(
    rows: Sequence[Row], wanted: Sequence[str], intervals: Optional[dict[str, tuple[str, str]]] = None
) -> list[Col]:
    """The wanted columns that the rows have, each X with X_ci_lo / X_ci_hi (or the ends ``intervals`` names)
    folded into one interval column; the ends never stand alone."""
    have = set().union(*(r.keys() for r in rows)) if rows else set()
    intervals = dict(intervals or {})
    for k in wanted:
        if f"{k}_ci_lo" in have and f"{k}_ci_hi" in have:
            intervals.setdefault(k, (f"{k}_ci_lo", f"{k}_ci_hi"))
    ends = {e for pair in intervals.values() for e in pair}
    # a column no row fills (a note nobody wrote) says nothing: left out
    empty = {k for k in have if all(r.get(k) in (None, "") for r in rows)}
    out = []
    for k in wanted:
        if k in have and k not in ends and k not in empty:
            lo, hi = intervals.get(k, ("", ""))
            out.append(Col(k, label(k) + (" [95 % CI]" if lo else ""), lo, hi))
    return out


def cell(r: Row, i: Optional[int], source: str, col: Col) -> Cell:
    def one(key: str) -> Cell:
        return Cell(r.get(key), f"{source}#{i}:{key}" if i is not None and key in r else "")

    c = one(col.key)
    if col.lo:
        c.lo, c.hi = one(col.lo), one(col.hi)
    return c


def _cells(rows: Sequence[Row], source: str, cols: Sequence[Col]) -> list[tuple[int, list[Cell]]]:
    return [(i, [cell(r, i, source, c) for c in cols]) for i, r in enumerate(rows)]


def grouped(
    rows: Sequence[Row],
    source: str,
    cols: Sequence[Col],
    method_of: Callable[[Row], Optional[str]],
    sft_methods: Sequence[str],
    extra: Optional[Callable[[int, Row], list[Cell]]] = None,
) -> list[tuple[str, list[list[Cell]]]]:
    """The rows as cells, in groups SFT, RL and (rows without a method) 'no method', in that order."""
    out: dict[str, list[list[Cell]]] = {"SFT": [], "RL": [], "no method": []}
    for i, cells in _cells(rows, source, cols):
        group = method_group(method_of(rows[i]), sft_methods) or "no method"
        out[group].append(cells + (extra(i, rows[i]) if extra else []))
    return [(g, rs) for g, rs in out.items() if rs]


def split(table: Table, keep: int) -> list[Table]:
    """A table wider than :data:`MAX_COLUMNS` as parts of at most that many columns, the first ``keep`` (the
    row's key) repeated in each part."""
    if len(table.columns) <= MAX_COLUMNS:
        return [table]
    rest = list(range(keep, len(table.columns)))
    step = MAX_COLUMNS - keep
    parts = [rest[k : k + step] for k in range(0, len(rest), step)]
    out = []
    for n, idx in enumerate(parts, 1):
        cols = list(range(keep)) + idx
        out.append(
            Table(
                table.id if n == 1 else f"{table.id}-{n}",
                f"{table.title} (part {n} of {len(parts)})",
                table.note if n == 1 else "",
                [table.columns[c] for c in cols],
                [(g, [[row[c] for c in cols] for row in rows]) for g, rows in table.groups],
                table.folded,
            )
        )
    return out


def transposed(
    tid: str,
    title: str,
    note: str,
    rows: Sequence[Row],
    source: str,
    keys: Sequence[str],
    name: str = "transition",
    per_table: int = 6,
) -> list[Table]:
    """Many statistics of a few transitions: one row per statistic, one column per transition (at most
    ``per_table`` transitions per table)."""
    out = []
    chunks = [list(range(len(rows)))[k : k + per_table] for k in range(0, len(rows), per_table)] or [[]]
    for n, idx in enumerate(chunks, 1):
        body = [
            [Cell(label(k))] + [Cell(rows[i].get(k), f"{source}#{i}:{k}" if k in rows[i] else "") for i in idx]
            for k in keys
        ]
        out.append(
            Table(
                tid if n == 1 else f"{tid}-{n}",
                title + (f" ({n} of {len(chunks)})" if len(chunks) > 1 else ""),
                note if n == 1 else "",
                ["statistic"] + [str(rows[i].get(name)) for i in idx],
                [("", body)],
            )
        )
    return out


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
        ranks = [c for c in trs[0] if c.startswith("nrank_change_")]
        if ranks:
            cols = columns_of(trs, ["transition", "kind", *ranks])
            for c in cols[2:]:
                t = c.key[len("nrank_change_") :].rpartition("_")
                c.label = f"Δ rank at {t[0]}: {'mean' if t[2] == 'mean' else 'max |·|'}"
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
    sequential = any(d.get("interval") == "anytime-valid" for d in differences)

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
            + (
                " Rows of a sequential suite: its anytime-valid 95 % interval over the problems the "
                "variant answered (problems), against Full only."
                if sequential
                else ""
            ),
            [c.label for c in cols] + [c.label for c in dcols],
            grouped(retention, FILES["retention"], cols, method_of, sft, paired),
        )
    )
    return tables


def _evaluation_tables(report, method_of, sft) -> list[Table]:
    retention, removal, accuracy, sampled = (
        report.rows(FILES[k]) for k in ("retention", "removal", "accuracy", "sampled")
    )
    tables = _retention_tables(retention, report.rows(CLAIM_FILES["differences"]), method_of, sft) if retention else []
    if removal:
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
        tables.append(
            Table(
                "table8",
                "Table 8 — removing the diagonal against random removal",
                "Scores (%); Δ = remove − Full (points; negative when removal hurts); vs proj: against "
                "proj (removal.csv).",
                [c.label for c in cols],
                grouped(removal, FILES["removal"], cols, method_of, sft),
            )
        )
    if accuracy:
        cols = columns_of(accuracy, [k for k in accuracy[0] if k not in ("from", "to")])
        t = Table(
            "accuracy",
            "Accuracy per benchmark",
            "Per variant: the table metric per benchmark (%), its average, and answer diagnostics.",
            [c.label for c in cols],
            grouped(accuracy, FILES["accuracy"], cols, method_of, sft),
            folded=True,
        )
        tables += split(t, 2)
    if sampled:
        cols = columns_of(sampled, [k for k in sampled[0] if k not in ("from", "to")])
        tables += split(
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
            2,
        )
    return tables


def _plain(
    rows: Sequence[Row], source: str, wanted: Sequence[str], intervals: Optional[dict[str, tuple[str, str]]] = None
) -> tuple[list[Col], list[tuple[str, list]]]:
    cols = columns_of(rows, wanted, intervals)
    return cols, [("", [c for _, c in _cells(rows, source, cols)])]


def comparison_table(report) -> list[Table]:
    """Figures 4–5 as numbers: each comparison's median cosine with its CI over matrices, the isotropic band, the
    null test's p and what the two say together (:func:`grrr_stream.plots.cosine_label`), and the update norms."""
    from ..plots import cosine_label, p_text

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
            "Figures 4–5 — sequential and independent cosines against the isotropic null",
            "Median off-diagonal cosine over matrices with its 95 % bootstrap CI over matrices, the matched "
            "isotropic null's ±2σ band and its Monte Carlo p (comparisons.csv); the reading says what rests on "
            "which: the band on the null test, the direction on the CI. Norms: ‖ΔW‖_F against ‖ΔW_cum‖_F.",
            [c.label for c in cols] + ["p (null draws)", "reading"],
            [("", rows)],
        )
    ]


def other_tables(report, method_of, sft) -> list[Table]:
    """The informative set, the beyond-the-paper means, the claims' rows (folded)."""
    tables: list[Table] = []
    informative, claim_rows = report.rows(CLAIM_FILES["informative"]), report.rows(CLAIM_FILES["claims"])
    if informative:
        cols, body = _plain(
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
        tables += split(
            Table(
                "informative",
                "The informative set",
                "Full − Base ≥ the informative threshold, with its paired 95 % CI over problems (informative.csv).",
                [c.label for c in cols],
                body,
            ),
            2,
        )
    trs = report.rows(decompose.TABLE)
    beyond = list(analysis_columns(trs[0] if trs else {}, "report"))
    if beyond:
        tables += [
            replace(t, folded=True)
            for t in transposed(
                "beyond",
                "Beyond the paper",
                "Update sparsity (pooled over entries, with the per-matrix spread), "
                "principal-band energies, subspace angles and component survival through 16-bit rounding (means over "
                "matrices; docs/statistics.md: 'Beyond the paper'); one column per transition.",
                trs,
                decompose.TABLE,
                beyond,
            )
        ]
    if claim_rows:
        cols, body = _plain(
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
        tables.append(
            Table(
                "claims_table",
                "Claims, every statistic",
                "One row per suite, statistic, variant, "
                "reference, set and group; intervals over problems, the transitions fixed (claims.csv).",
                [c.label for c in cols],
                body,
                folded=True,
            )
        )
    return tables


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
    cols, body = _plain(rows, source, keys)
    return split(Table(tid, title, note, [c.label for c in cols], body), 1)

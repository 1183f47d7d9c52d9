"""The HTML report's tables, built from the sweep report's typed rows (never from the files again).

Every cell keeps where it comes from: the CSV file in WORKDIR/report, the row's index there and the
column (``Cell.src``, rendered as ``data-src``), and the exact text that file holds (``Cell.text``,
rendered as ``data-value``), so a reader (and the browser test) can check any number against its file.
Rows are grouped SFT / RL by the child's post-training method as the claims group them
(:func:`grrr_stream.stats.claims_sets.method_group`); the ``kind`` column says cumulative or incremental.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from ..stats.claims_sets import method_group

Row = dict


def csv_text(v) -> str:
    """The text :func:`grrr_stream.files.to_csv` writes for a cell."""
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(float(v))
    return str(v)


def shown(v) -> str:
    """A cell as people read it: 4 significant digits for floats (6 for large ones)."""
    if v is None:
        return ""
    if isinstance(v, bool) or not isinstance(v, float):
        return str(v)
    if v != v:
        return "nan"
    return f"{v:.6g}" if abs(v) >= 1000 else f"{v:.4g}"


@dataclass
class Cell:
    value: object
    src: str = ""        # 'file.csv#row:column' ('' for a cell computed for display only)

    @property
    def text(self) -> str:
        return csv_text(self.value)

    @property
    def display(self) -> str:
        return shown(self.value)


@dataclass
class Table:
    id: str
    title: str
    note: str
    columns: list[str]
    groups: list[tuple[str, list[list[Cell]]]] = field(default_factory=list)

    @property
    def n_rows(self) -> int:
        return sum(len(rows) for _, rows in self.groups)


def _cells(rows: Sequence[Row], source: str, columns: Sequence[str]) -> list[tuple[int, list[Cell]]]:
    return [(i, [Cell(r.get(c), f"{source}#{i}:{c}" if c in r else "") for c in columns]) for i, r in enumerate(rows)]


def grouped(rows: Sequence[Row], source: str, columns: Sequence[str], method_of: Callable[[Row], Optional[str]],
            sft_methods: Sequence[str], extra: Optional[Callable[[int, Row], list[Cell]]] = None
            ) -> list[tuple[str, list[list[Cell]]]]:
    """The rows as cells, in groups SFT, RL and (rows without a method) 'no method', in that order."""
    out: dict[str, list[list[Cell]]] = {"SFT": [], "RL": [], "no method": []}
    for i, cells in _cells(rows, source, columns):
        group = method_group(method_of(rows[i]), sft_methods) or "no method"
        out[group].append(cells + (extra(i, rows[i]) if extra else []))
    return [(g, rs) for g, rs in out.items() if rs]


def _present(rows: Sequence[Row], wanted: Sequence[str]) -> list[str]:
    have = set().union(*(r.keys() for r in rows)) if rows else set()
    return [c for c in wanted if c in have]


TABLE34 = ("transition", "kind", "method", "n", "sv_cos_mean", "delta_max_mean", "sr_w0_mean", "sr_delta_mean",
           "sr_w1_mean", "dsr_pct_mean", "alpha_mean", "r_delta_mean")
TABLE7 = ("transition", "kind", "method", "f_diag_mean", "f_off_mean", "f_null_mean", "r_delta_mean")
BEYOND_PREFIX = ("frac_", "band", "angle", "bfloat16_kept_", "float16_kept_", "sparsity_compare")


def paper_tables(report, method_of: Callable[[Row], Optional[str]], sft: Sequence[str]) -> list[Table]:
    """Tables 3/4, 7, 5/6 (with the paired CIs), 8, the accuracy per benchmark and the sampled metrics."""
    trs = report.transitions
    tables = []
    if trs:
        ranks = [c for c in trs[0] if c.startswith("nrank_change_")]
        cols = _present(trs, TABLE34) + ranks
        tables.append(Table("table34", "Tables 3/4 — spectral invariance, stable rank, additivity, rank change",
                            "Means over the transition's matrices (transitions.csv). nrank_change_T: numerical "
                            "rank of W1 − W0 at threshold T, mean and largest magnitude over matrices.",
                            cols, grouped(trs, "transitions.csv", cols, method_of, sft)))
        cols = _present(trs, TABLE7)
        tables.append(Table("table7", "Table 7 — energy fractions of ΔW",
                            "Shares of ‖ΔW‖² in the diagonal, off-diagonal and null parts (means over matrices).",
                            cols, grouped(trs, "transitions.csv", cols, method_of, sft)))
    tables += _evaluation_tables(report, method_of, sft)
    return tables


def _evaluation_tables(report, method_of, sft) -> list[Table]:
    tables = []
    if report.retention:
        diffs = {(d["transition"] + ("" if d["suite"] == "main" else f" [{d['suite']}]"), d["variant"]): (i, d)
                 for i, d in enumerate(report.differences)}
        ci_cols = ("minus_full", "minus_full_ci_lo", "minus_full_ci_hi", "minus_proj", "minus_proj_ci_lo",
                   "minus_proj_ci_hi")

        def paired(_i: int, r: Row) -> list[Cell]:
            j, d = diffs.get((r["transition"], r["variant"]), (None, {}))
            return [Cell(d.get(c), f"differences.csv#{j}:{c}" if c in d else "") for c in ci_cols]

        cols = _present(report.retention, ("transition", "kind", "variant", "average", "retention_pct",
                                           "retention_proj_pct"))
        tables.append(Table("table56", "Tables 5/6 — causal decomposition: accuracy and retention",
                            "Score = unweighted mean over benchmarks (%); retention = 100 · score / full (and / "
                            "proj). minus_full, minus_proj: the difference in points with its paired bootstrap "
                            "95 % CI over problems (differences.csv).",
                            cols + list(ci_cols), grouped(report.retention, "retention.csv", cols, method_of, sft,
                                                          paired)))
    if report.removal:
        cols = list(report.removal[0])
        tables.append(Table("table8", "Table 8 — removing the diagonal against random removal",
                            "delta = remove − full (points; negative when removal hurts); _proj: against proj.",
                            cols, grouped(report.removal, "removal.csv", cols, method_of, sft)))
    if report.accuracy:
        cols = list(report.accuracy[0])
        tables.append(Table("accuracy", "Accuracy per benchmark",
                            "Per variant: the table metric per benchmark (%), its average, and answer diagnostics.",
                            cols, grouped(report.accuracy, "accuracy.csv", cols, method_of, sft)))
    if report.sampled:
        cols = list(report.sampled[0])
        tables.append(Table("sampled", "Sampled answers — pass@k, maj@k, avg@n",
                            "Where each problem was answered n > 1 times: avg@n (mean accuracy of the n answers), "
                            "unbiased pass@k and maj@k (majority vote over equivalent answers), in percent, from "
                            "each evaluation's metrics.csv.",
                            cols, grouped(report.sampled, "sampled.csv", cols, method_of, sft)))
    return tables


def channel_tables(report) -> list[Table]:
    """Residual channels: SFT vs RL, each transition's shares (all matrices, readers, writers) and the
    analysed models' outlier sets (sweep/report_channels.py)."""
    tables = []
    if report.channels_sft_rl:
        cols = list(report.channels_sft_rl[0])
        tables.append(Table("channels-sft-rl", "Outlier residual channels — SFT vs RL",
                            "Share of each component's ‖ΔW‖² on W0's outlier channels (label-free rule) next to "
                            "their share of channels, and the enrichment ratio; means over each group's training "
                            "steps (by method); for the mean ratio, a 95 % bootstrap interval over matrices (resampled "
                            "jointly across the group's steps) and a p against count-matched random channel sets "
                            "pooled over the group (channels_sft_rl.csv).", cols,
                            [("", [c for _, c in _cells(report.channels_sft_rl, "channels_sft_rl.csv", cols)])]))
    if report.channels:
        cols = _present(report.channels, ("transition", "kind", "method", "group", "component", "channels", "hidden",
                                          "channel_share", "energy_share", "ratio", "ci_lo", "ci_hi", "null_q975",
                                          "p_value", "post_jaccard"))
        keep = [(i, r) for i, r in enumerate(report.channels) if r["group"] in ("all", "reader", "writer")]
        rows = [[Cell(r.get(c), f"channels.csv#{i}:{c}" if c in r else "") for c in cols] for i, r in keep]
        tables.append(Table("channels", "Outlier channels per transition",
                            "All matrices, readers (residual = input) and writers (residual = output); per module "
                            "in channels.csv.", cols, [("", rows)]))
    if report.channel_models:
        cols = list(report.channel_models[0])
        tables.append(Table("channel-models", "Outlier channels per model",
                            "Channels the rule selects (fraction against the paper's ~5 %), the weight proxy's "
                            "Jaccard overlap, calibration perplexity and, when run, the ablation "
                            "(channel_models.csv).", cols,
                            [("", [c for _, c in _cells(report.channel_models, "channel_models.csv", cols)])]))
    return tables


def other_tables(report, method_of, sft) -> list[Table]:
    """Residual channels, comparisons, the informative set, the claims' rows, the beyond-the-paper means."""
    tables = channel_tables(report)
    if report.comparisons:
        cols = _present(report.comparisons, ("comparison", "label", "kind", "median_cos_off", "ci_lo", "ci_hi",
                                             "null_lo", "null_hi", "p_value", "verdict", "n_matrices"))
        tables.append(Table("comparisons", "Sequential and independent cosines against the isotropic null",
                            "Median off-diagonal cosine over matrices with its bootstrap CI, the null's ±2σ "
                            "envelope and p-value (comparisons.csv).", cols,
                            [("", [c for _, c in _cells(report.comparisons, "comparisons.csv", cols)])]))
    beyond = [c for c in (report.transitions[0] if report.transitions else {}) if c.startswith(BEYOND_PREFIX)]
    if beyond:
        cols = ["transition", "kind", *beyond]
        tables.append(Table("beyond", "Beyond the paper",
                            "Update sparsity (pooled over entries, with the per-matrix spread), principal-band "
                            "energies, subspace angles and component survival through 16-bit rounding "
                            "(means over matrices; docs/statistics.md: 'Beyond the paper').", cols,
                            grouped(report.transitions, "transitions.csv", cols, method_of, sft)))
    if report.informative:
        cols = list(report.informative[0])
        tables.append(Table("informative", "The informative set", "full − base ≥ the informative threshold, "
                            "with its paired 95 % CI (informative.csv).", cols,
                            [("", [c for _, c in _cells(report.informative, "informative.csv", cols)])]))
    if report.claim_rows:
        cols = list(report.claim_rows[0])
        tables.append(Table("claims_table", "Claims, every statistic", "One row per suite, statistic, variant, "
                            "reference, set and group (claims.csv).", cols,
                            [("", [c for _, c in _cells(report.claim_rows, "claims.csv", cols)])]))
    return tables


def plain_table(tid: str, title: str, note: str, rows: Sequence[Row], source: str) -> Table:
    """Any table as it is (the hook for analyses the report does not know, and the units' table)."""
    cols = list(dict.fromkeys(k for r in rows for k in r))
    return Table(tid, title, note, cols, [("", [c for _, c in _cells(rows, source, cols)])])

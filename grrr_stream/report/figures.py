"""The HTML report's figures: PNG files in WORKDIR/report (drawn by :mod:`grrr_stream.plots`), embedded
in the page as data: URIs so that the one HTML file carries them.

The sweep report (:mod:`grrr_stream.sweep.tables`) already draws the update norms, the cosines against
the null and the band energies; they are embedded as they are. The figures only the HTML report shows
(per-transition heatmaps, accuracy bars, the beyond-the-paper fractions) are drawn here, once per write,
into WORKDIR/report/figures/.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

from .. import plots
from ..columns import FIGURE, at_one_edge
from ..geometry.analyses import MATRIX_COLUMNS
from ..stats.run import COSINES_FIGURE, NORMS_FIGURE
from ..sweep.kinds import channel_stats, decompose
from ..sweep.kinds.claims import FILES as CLAIM_FILES


@dataclass
class Figure:
    id: str
    title: str
    caption: str
    path: Path
    folded: bool = False  # shown inside a closed <details> (one per transition: the heatmaps)

    @property
    def data_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.path.read_bytes()).decode("ascii")


# the sweep report's own figures: file → (id, title, caption)
SWEEP_FIGURES = {
    NORMS_FIGURE: (
        "fig-norms",
        "Update norms per component (paper Fig. 4A / 5A)",
        "Frobenius norms of the updates of each comparison: stepwise ‖ΔW_SFT‖, ‖ΔW_incr‖ against "
        "‖ΔW_cum‖ = 1; independent: the two updates against the larger.",
    ),
    COSINES_FIGURE: (
        "fig-cosines",
        "Stepwise and independent cosines against the isotropic null (paper Fig. 4B / 5B)",
        "Median off-diagonal cosine over matrices with its 95 % bootstrap CI over matrices; "
        "grey band (outlined, its half-width written beside it): the matched isotropic null's ±2σ envelope. Each "
        "label says what it rests on: outside the band from the null test (p over its draws; 'p < 1e-4' at "
        "the floor of 10,000 draws), the direction only where the CI over matrices excludes 0, and 'inside' only "
        "where the CI over matrices lies inside the band too (else 'not resolved', with how much wider the CI is).",
    ),
    decompose.BANDS_FIGURE: (
        "fig-bands",
        "Band energies",
        "Mean share of ‖ΔW‖² per transition by the top-k principal band of W0.",
    ),
    channel_stats.LAYERS_FIGURE: (
        "fig-channels",
        "Outlier channels per layer, SFT vs RL",
        "Per decoder layer, the share of each component's ‖ΔW‖² on W0's outlier residual "
        "channels (shades of blue SFT, of red RL, one per transition; dashed: a transition that is not one training "
        "step, "
        "e.g. base → grandchild); dotted: the channels' own share.",
    ),
}

# the figures shown right after the verdict box (Figs. 4–5 and the accuracy per variant); the others follow the tables
KEY = ("fig-norms", "fig-cosines", "fig-accuracy")


def figures(report, rows_by_transition: dict, folder: Path) -> list[Figure]:
    """Every figure of the page, in the order shown: the sweep report's, then the heatmaps per transition,
    the accuracy bars and the beyond-the-paper fractions (drawn now into ``folder``)."""
    out = [
        Figure(fid, title, caption, report.folder / name)
        for name, (fid, title, caption) in SWEEP_FIGURES.items()
        if (report.folder / name).is_file()
    ]
    folder.mkdir(parents=True, exist_ok=True)
    for i, (tid, rows) in enumerate(rows_by_transition.items()):
        if rows:
            out.append(
                Figure(
                    f"fig-heat-{i}",
                    f"{tid}: layer × module",
                    "Per matrix f_diag, f_off, f_null (shares "
                    "of ‖ΔW‖²) and r_Δ; experts averaged per layer and module.",
                    plots.layer_module_heatmaps(rows, folder / f"heatmap_{i}.png", title=tid),
                    folded=True,
                )
            )
    differences, transitions = report.rows(CLAIM_FILES["differences"]), report.rows(decompose.TABLE)
    if differences:
        out.append(
            Figure(
                "fig-accuracy",
                "Accuracy per variant",
                "Score (%, unweighted mean over benchmarks) of "
                "each variant; whiskers: that score's own bootstrap 95 % CI over the transition's problems (a "
                "variant that answers every problem wrong has none). The paired CIs of the differences to Full are "
                "in Tables 5/6.",
                plots.accuracy_bars(differences, folder / "accuracy.png"),
            )
        )
    beyond = _beyond_columns(transitions)
    if beyond:
        out.append(
            Figure(
                "fig-beyond",
                "Beyond the paper",
                "Update sparsity (pooled over the transition's entries), "
                "the share of ‖ΔW‖² in the top-k block of P and the energy of each component kept "
                "through 16-bit rounding (means over matrices).",
                plots.grouped_fractions(transitions, beyond, folder / "beyond.png"),
            )
        )
    return out


def _beyond_columns(trs: list) -> list[tuple[str, str]]:
    """The figure's bars: each column shown in the figure that the transitions have, by its headline statistic;
    a family over principal edges at one edge (64 when measured, else the first there is)."""
    if not trs:
        return []
    found = at_one_edge(MATRIX_COLUMNS.sorted(MATRIX_COLUMNS.summarised(trs[0], FIGURE)))
    return [(c.headline, c.short or c.label) for c in found if trs[0].get(c.headline) is not None]


def loose_images(folder: Path, shown: set[Path]) -> list[Figure]:
    """PNG files in the report folder that no section shows (the hook for analyses the report does not know,
    such as the residual-channel analysis once it writes its figure there)."""
    return [
        Figure(f"fig-extra-{i}", p.stem.replace("_", " "), f"{p.name} (found in the report folder)", p)
        for i, p in enumerate(sorted(folder.glob("*.png")))
        if p.resolve() not in shown
    ]

"""What every figure shares: matplotlib on the Agg backend (no display needed), the resolution and page width,
saving as PNG, whole-number ticks."""

from __future__ import annotations

from pathlib import Path


def pyplot():
    """matplotlib's pyplot on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


DPI = 110
PAGE_INCHES = 12.0  # the report's column is ~1,340 px wide: a figure this wide at DPI is shown at its own size


def save(fig, path: Path) -> Path:
    """The figure as a PNG at :data:`DPI`, then closed."""
    fig.tight_layout()
    # "tight" keeps legends placed outside the axes inside the image
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    pyplot().close(fig)
    return Path(path)


def integer_ticks(ax, axis: str = "x") -> None:
    """Layer (and other index) axes: ticks on whole numbers only."""
    from matplotlib.ticker import MaxNLocator

    (ax.xaxis if axis == "x" else ax.yaxis).set_major_locator(MaxNLocator(integer=True))

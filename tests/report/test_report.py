"""The sweep's HTML report (grrr_stream/report) from a small finished sweep with sampled evaluations
(tests/helpers/report_sweep.py, ~25 s): the page holds the numbers of the CSV files it names, groups rows SFT / RL,
shows the paper's tables in the paper's order, is self-contained, is rewritten by `grrr-stream report` without
running anything, and in headless Chromium at 1400 × 900 opens on the verdict box (within the first screen, each
claim's transitions folded under it),
with no console error, every image decoded, no cell reading nan and no table wider than the page. The screenshot
of that first screen is docs/report.png's source (kept in $GRRR_TEST_ARTIFACTS, else tests/artifacts/report.png,
with the page's measured layout in report_layout.json)."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from functools import lru_cache
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers.mlflow_ui import READ_REPORT, Chromium, artifacts_dir, check_report_cells, find_chromium
from helpers.report_sweep import run_small_sweep

pytestmark = pytest.mark.slow  # a real sweep with two evaluations (~25 s on two cores)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    pytest.importorskip("math_verify", reason="grading needs math-verify (the eval extra)")
    res = run_small_sweep(tmp_path_factory.mktemp("report_sweep"))
    assert res.ok, res.states
    return res


class _Cells(HTMLParser):
    """The [data-src, data-value] cells, table ids, group rows and external references of a page."""

    def __init__(self):
        super().__init__()
        self.cells, self.tables, self.external, self._group = [], [], [], False
        self.groups: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-src" in a:  # a table cell, or one number of an 'x [lo, hi]' cell
            self.cells.append((a["data-src"], a["data-value"]))
        if tag == "table" and "data-table" in a:
            self.tables.append(a["data-table"])
        if tag in ("script", "link", "iframe") or (tag == "img" and not a.get("src", "").startswith("data:image/png")):
            self.external.append(tag)
        self._group = tag == "th" and self._group

    def handle_data(self, data):
        if self.lasttag == "th" and data.strip() in ("SFT", "RL", "no method"):
            self.groups.append(data.strip())


def _csv(folder: Path):
    @lru_cache(None)
    def rows(name: str) -> list[dict]:
        with open(folder / name, newline="") as f:
            return list(csv.DictReader(f))

    return rows


def test_page_holds_the_csv_numbers_grouped_sft_rl_and_is_self_contained(swept):
    page = swept.html
    assert page == swept.plan.workdir / "report" / "index.html" and page in swept.report.files
    parsed = _Cells()
    parsed.feed(page.read_text())
    assert {
        "verdict",
        "table34",
        "table7",
        "table56",
        "table56-retention",
        "table8",
        "accuracy",
        "sampled",
        "comparisons",
        "claims_table",
        "units",
    } <= set(parsed.tables)
    # the paper's order: Tables 3/4, 5/6, 7, 8, then Figures 4–5 as numbers
    order = [
        parsed.tables.index(t) for t in ("table34", "table56", "table56-retention", "table7", "table8", "comparisons")
    ]
    assert order == sorted(order), parsed.tables
    assert parsed.tables.index("verdict") == 0
    assert parsed.external == []
    rows = _csv(page.parent)
    for src, value in parsed.cells:
        name, _, where = src.partition("#")
        row, _, col = where.partition(":")
        assert rows(name)[int(row)][col] == value, src
    # every cell of the sampled table and of Tables 5/6's paired CIs is there
    sampled = rows("sampled.csv")
    assert {"avg@4", "pass@2", "maj@4"} <= set(sampled[0])
    shown = {s for s, _ in parsed.cells}
    assert {f"sampled.csv#{i}:{c}" for i in range(len(sampled)) for c in ("avg@4", "pass@2", "maj@4")} <= shown
    assert any(s.startswith("differences.csv#") and s.endswith(":minus_full_ci_lo") for s in shown)
    # no number reads nan anywhere (undefined is '—'), and the paper's symbols replace the CSV names
    text = page.read_text()
    assert not re.search(r">\s*nan\s*<", text, re.I) and ">minus_full_ci_lo<" not in text
    assert "<th>f_diag</th>" in text and "<th>SR(ΔW)</th>" in text
    # base → sft is SFT, base → rl and sft → rl are GRPO: both groups, SFT first
    assert parsed.groups[:2] == ["SFT", "RL"]
    # avg@4 from metrics.csv against the accuracy table's own average of the same answers (another path)
    acc = {(r["transition"], r["variant"]): float(r["sums"]) for r in rows("accuracy.csv")}
    for r in sampled:
        assert float(r["avg@4"]) == pytest.approx(acc[(r["transition"], r["variant"])], abs=1e-9)


def test_extra_csv_and_png_in_the_report_folder_are_shown_as_other_analyses(swept, tmp_path):
    from grrr_stream.report import write_html

    folder = swept.report.folder
    images = swept.html.read_text().count("<img")
    (folder / "residual_channels.csv").write_text("layer,share\n0,0.25\n1,0.5\n")
    (folder / "residual_channels.png").write_bytes((folder / "update_norms.png").read_bytes())
    try:
        page = write_html(swept.plan, swept.report, swept.records).read_text()
    finally:
        for name in ("residual_channels.csv", "residual_channels.png"):
            (folder / name).unlink()
    assert 'data-src="residual_channels.csv#1:share" data-value="0.5"' in page
    assert "residual channels" in page and page.count("<img") == images + 1
    write_html(swept.plan, swept.report, swept.records)  # the page as the sweep wrote it, for the tests after


def test_report_command_rewrites_the_page_from_the_workdir_running_nothing(swept):
    folder = swept.report.folder
    units = swept.plan.workdir / ".sweep" / "units"
    before = {p.name: p.read_bytes() for p in units.iterdir()}
    cells = _Cells()
    cells.feed(swept.html.read_text())
    swept.html.unlink()
    p = subprocess.run(
        [sys.executable, "-m", "grrr_stream.cli", "report", str(swept.plan.workdir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert str(swept.html) in p.stdout and "8 done" in p.stdout  # 7 units and the claims over their evaluations
    again = _Cells()
    again.feed(swept.html.read_text())
    assert again.cells == cells.cells and again.tables == cells.tables
    assert {p.name: p.read_bytes() for p in units.iterdir()} == before  # no unit ran or was recorded
    bad = subprocess.run(
        [sys.executable, "-m", "grrr_stream.cli", "report", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "not the workdir of a sweep" in bad.stderr and "Traceback" not in bad.stderr


# JavaScript: the page's layout as a reader at 1400 × 900 sees it (every <details> opened for the widths)
READ_LAYOUT = r"""
(() => {
  const v = document.getElementById('verdict').getBoundingClientRect();
  const page = document.documentElement.clientWidth;
  const closed = document.documentElement.scrollHeight;
  const members = [...document.querySelectorAll('#verdict tr.member')];
  const hidden = members.filter((r) => r.getClientRects().length === 0).length;
  document.querySelectorAll('details').forEach((d) => { d.open = true; });
  const out = {
    height_closed: closed, height_open: document.documentElement.scrollHeight, page,
    scroll_width: document.documentElement.scrollWidth, viewport: [innerWidth, innerHeight],
    verdict: [v.left, v.top, v.right, v.bottom],
    verdict_rows: document.querySelectorAll('#verdict tr[data-claim]').length,
    members: [members.length, hidden, members.filter((r) => r.getClientRects().length > 0).length],
    wide: [...document.querySelectorAll('table')].filter((t) => t.getBoundingClientRect().right > page + 0.5)
            .map((t) => [t.dataset.table, Math.round(t.getBoundingClientRect().width)]),
    nan: [...document.querySelectorAll('td, th, figcaption, li')].filter((c) => /\bnan\b/i.test(c.innerText))
            .map((c) => c.innerText).slice(0, 5),
    images: [...document.images].map((i) => [i.alt, i.complete ? i.naturalWidth : 0, i.naturalHeight]),
  };
  document.querySelectorAll('details').forEach((d) => { d.open = false; });
  window.scrollTo(0, 0);
  return out;
})()
"""


@pytest.mark.skipif(find_chromium() is None, reason="Debian chromium not found (.ci/run installs it)")
def test_page_loads_in_headless_chromium_with_every_image_and_the_csv_numbers(swept, tmp_path):
    shot = artifacts_dir() / "report.png"
    shot.unlink(missing_ok=True)
    with Chromium(find_chromium(), tmp_path / "chromium", width=1400, height=900) as browser:
        browser.watch_console()
        browser.navigate(swept.html.as_uri())
        browser.wait_for("document.readyState === 'complete' && [...document.images].every((i) => i.complete)")
        layout = browser.evaluate(READ_LAYOUT)
        # every number as a reader sees it once the folded tables are opened
        browser.evaluate("document.querySelectorAll('details').forEach((d) => { d.open = true; })")
        seen = browser.evaluate(READ_REPORT)
        browser.evaluate(
            "document.querySelectorAll('details').forEach((d) => { d.open = false; }); window.scrollTo(0, 0)"
        )
        errors = browser.console_errors()
        browser.screenshot(shot)
    (artifacts_dir() / "report_layout.json").write_text(json.dumps(layout, indent=1) + "\n")
    assert errors == []
    assert len(seen["images"]) >= 7 and all(w > 0 for _, w in seen["images"]), seen["images"]
    assert all(w > 0 and h > 0 for _, w, h in layout["images"]), layout["images"]
    # figures drawn for the page: none shrunk to less than 80 % of its size (its text stays readable)
    assert all(w <= 1.25 * layout["page"] for _, w, _ in layout["images"]), layout["images"]
    assert seen["external"] == 0 and seen["title"] == "grrr-stream report: report-test"
    assert check_report_cells(seen["cells"], _csv(swept.report.folder)) > 200
    # the verdict box, one row per headline claim, lies within the first screen
    left, top, right, bottom = layout["verdict"]
    width, height = layout["viewport"]
    assert 0 <= left and right <= width and 0 <= top and bottom <= height, layout
    assert layout["verdict_rows"] >= 10
    # each claim's transitions and test sit under it, folded on the first screen and shown once opened
    total, hidden, shown = layout["members"]
    assert total > 0 and hidden == total and shown == total, layout["members"]
    # nothing reads nan, nothing is wider than the page (no sideways scroll), every folded table included
    assert layout["nan"] == [] and layout["wide"] == [] and layout["scroll_width"] <= layout["page"], layout
    assert shot.is_file() and shot.stat().st_size > 20_000

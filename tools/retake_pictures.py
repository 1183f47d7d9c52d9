#!/usr/bin/env python3
"""Retake the README's and docs' pictures from the demo itself: the report's first screen (docs/report.png), MLflow's
runs table (docs/mlflow_runs.png) and the transitions' energy shares as MLflow charts them (docs/mlflow_shares.png,
the address a sweep prints and its report links).

    python tools/retake_pictures.py                    # runs the demo in a scratch folder first (minutes)
    python tools/retake_pictures.py --demo-dir DIR     # a folder where `grrr-stream sweep configs/demo.yaml
                                                       #   --tracking-uri sqlite:///DIR/mlflow.db` ran (CI leaves one)

Needs Debian's chromium (.ci/run installs it) and the test extra (the headless browser and the MLflow server
helpers are the tests' own, tests/helpers/mlflow_ui.py).
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from helpers.mlflow_ui import (  # noqa: E402
    DEMO_EXPERIMENT,
    Chromium,
    Rest,
    chart_cards,
    charts_drawn,
    find_chromium,
    runs_table,
    serve,
)

from grrr_stream.tracking.mlflow_view import SHARES_CHARTS, runs_page, shares_page  # noqa: E402

CLOSE_ASSISTANT = """(() => {
    const b = document.querySelector('[data-component-id="mlflow.assistant.chat_panel.close"]');
    if (b) b.click();
    return !!b; })()"""


def run_demo(folder: Path) -> None:
    exe = Path(sys.executable).with_name("grrr-stream")
    cmd = [str(exe), "sweep", str(ROOT / "configs" / "demo.yaml"), "--tracking-uri", f"sqlite:///{folder}/mlflow.db"]
    subprocess.run(cmd, cwd=folder, check=True)


def report_shot(browser: Chromium, demo: Path, out: Path) -> None:
    page = demo / "grrr_demo" / "report" / "index.html"
    if not page.is_file():
        raise SystemExit(f"no report page at {page}: run the demo there first")
    browser.navigate(page.as_uri())
    browser.wait_for("document.readyState === 'complete' && document.images.length > 0", timeout=60)
    browser.screenshot(out)


def _settle(browser: Chromium, url: str, ready: str) -> None:
    """Open ``url`` until ``ready``; the Assistant panel that opens on a first visit is closed and the page reloaded."""
    for _ in range(2):
        browser.navigate("about:blank")
        browser.navigate(url)
        browser.wait_for(ready, timeout=90)
        if not browser.evaluate(CLOSE_ASSISTANT):
            return


def mlflow_shots(demo: Path, runs_out: Path, shares_out: Path, scratch: Path, chromium: str) -> None:
    with serve(demo) as server:
        rest = Rest(server.uri)
        exp_id = rest.experiment(DEMO_EXPERIMENT)["experiment_id"]
        runs = rest.runs([exp_id])
        top = [r for r in runs if "mlflow.parentRunId" not in r.tags]
        n_transitions = sum(r.tags.get("grrr.kind") == "transition" for r in runs)
        with Chromium(chromium, scratch / "runs", width=1600, height=1000) as browser:
            _settle(
                browser, runs_page(server.uri, exp_id), f"document.querySelectorAll('.ag-row').length >= {len(top)}"
            )
            runs_table(browser)  # every nested run shown: the transitions' rows carry the headline columns
            browser.screenshot(runs_out)
        with Chromium(chromium, scratch / "shares", width=1400, height=1000) as browser:
            _settle(browser, shares_page(server.uri, exp_id), charts_drawn(n_transitions))
            titles = [title for title, _ in chart_cards(browser)][: len(SHARES_CHARTS)]
            if titles != list(SHARES_CHARTS):
                raise SystemExit(f"the shares page's first charts are {titles}, not {list(SHARES_CHARTS)}")
            browser.screenshot(shares_out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demo-dir", type=Path, help="a folder where the demo ran (default: run it in a scratch folder)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs", help="where the pictures go (default docs/)")
    args = ap.parse_args()
    chromium = find_chromium()
    if chromium is None:
        raise SystemExit("Debian chromium not found: apt-get install chromium")
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack():
        scratch = Path(tmp)
        demo = args.demo_dir.resolve() if args.demo_dir else scratch / "demo"
        if not args.demo_dir:
            demo.mkdir()
            run_demo(demo)
        with Chromium(chromium, scratch / "report", width=1400, height=900) as browser:
            report_shot(browser, demo, args.out / "report.png")
        mlflow_shots(demo, args.out / "mlflow_runs.png", args.out / "mlflow_shares.png", scratch, chromium)
    for name in ("report.png", "mlflow_runs.png", "mlflow_shares.png"):
        print(f"wrote {args.out / name}")


if __name__ == "__main__":
    main()

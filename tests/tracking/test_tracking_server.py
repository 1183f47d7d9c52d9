"""The team tracking server end to end: tracking/serve.sh on a free loopback port, runs logged to it
over HTTP by the CLI (tests/helpers/mlflow_ui.py: populate), read back through the REST API with plain HTTP,
and the MLflow UI rendered by headless Chromium: the run-comparison page, the transitions' shares page, and the
experiment's page with its runs table (durations, datasets, the sweep's filter). Screenshots are kept in
$GRRR_TEST_ARTIFACTS, else tests/artifacts/ (mlflow_compare_runs.png, mlflow_shares.png, mlflow_runs_table.png,
mlflow_runs_of_the_sweep.png)."""

from __future__ import annotations

import contextlib
import csv
import functools
import hashlib
import io
import json
import math
import time
import urllib.parse
from collections import Counter
from pathlib import Path

import pytest
from helpers.mlflow_ui import (
    DEMO_EXPERIMENT,
    READ_REPORT,
    READ_RUNS_TABLE,
    Chromium,
    Rest,
    Run,
    artifacts_dir,
    chart_cards,
    charts_drawn,
    check_report_cells,
    evaluate,
    find_chromium,
    parse_duration,
    populate,
    runs_table,
    scroll_to_metric,
    search_runs,
    serve,
    show_metric_rows,
)

from grrr_stream.tracking.mlflow_view import SHARES_CHARTS, compare_page, runs_page, shares_page

NO_CHROMIUM = (
    "Debian chromium not found at /usr/bin/chromium or on PATH; .ci/run installs it with apt-get install chromium"
)
KINDS = {"transition": 2, "comparison": 1, "statistics": 1, "variant": 2, "sweep": 1}
HEADLINE = {
    "transition": ("f_diag", "f_diag_vs_iso", "f_off", "f_null", "r_delta", "sv_cos"),
    "variant": ("fidelity",),
    "evaluation": ("average", "retention", "minus_full", "minus_full_ci_lo", "minus_full_ci_hi"),
    "comparison": ("median_cos_off", "ci_lo", "ci_hi", "p_value"),
}
SCREENSHOT = "mlflow_compare_runs.png"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("mlflow_server")) as s:
        yield s


@pytest.fixture(scope="module")
def populated(server, tmp_path_factory):
    work = tmp_path_factory.mktemp("populate")
    populate(server.uri, work)
    return work


@pytest.fixture(scope="module")
def evaluated(server, populated):
    """The benchmark file of two evaluations logged outside the sweep (stand-in engine)."""
    pytest.importorskip("math_verify", reason="grading needs math-verify (the eval extra)")
    from grrr_stream.evaluation import engine as ev

    # the stand-in engine is no vLLM: do not spend seconds importing vLLM for its version
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ev, "engine_versions", lambda: {"engine": "stand-in"})
        return evaluate(server.uri, populated)


def _by_kind(runs: list[Run]) -> dict[str, list[Run]]:
    out: dict[str, list[Run]] = {}
    for r in runs:
        out.setdefault(r.tags.get("grrr.kind", "?"), []).append(r)
    return out


def _same_path(a: str, b: str) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def test_serve_script_prints_the_uri_and_runs_light(server):
    assert server.log.read_text().splitlines()[0] == f"export MLFLOW_TRACKING_URI={server.uri}"
    group = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (proc / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[2]) == server.proc.pid:  # field 5: process group
                group.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode())
    assert any("mlflow" in c and "server" in c for c in group), group
    assert any("--workers 1" in c for c in group), group
    assert not any("huey" in c for c in group), group  # MLflow's job runner is off


def test_runs_are_served_over_rest_with_params_metrics_artifacts(server, populated):
    rest = Rest(server.uri)
    exp = rest.experiment(DEMO_EXPERIMENT)
    exp_id = exp["experiment_id"]
    assert exp["artifact_location"].startswith("mlflow-artifacts:")  # artifacts go through the server
    runs = rest.runs([exp_id])
    kinds = _by_kind(runs)
    assert {k: len(v) for k, v in kinds.items()} == KINDS
    assert all(r.status == "FINISHED" and r.tags.get("grrr.complete") == "true" for r in runs)
    keys = Counter(r.tags["grrr.key"] for r in runs)
    assert max(keys.values()) == 1, keys

    # one tree: the sweep's run holds the transitions, the statistics and the comparison; each run says what it is
    (sweep,) = kinds["sweep"]
    for kind in ("transition", "comparison", "statistics"):
        assert all(r.tags["mlflow.parentRunId"] == sweep.id for r in kinds[kind]), kind
    assert "mlflow.parentRunId" not in sweep.tags
    assert all(r.tags["mlflow.note.content"].endswith(".") for r in runs)
    # a handful of metrics per run, never a layer as step (the detail is in table artifacts)
    assert max(len(r.metrics) for r in runs) <= 12, {r.name: len(r.metrics) for r in runs}
    for r in runs:
        for key in r.metrics:
            assert {h["step"] for h in rest.history(r.id, key)} == {0}, (r.name, key)

    # transitions: params, headline metrics (means over the matrices), artifacts stored by the server
    transitions = {r.name: r for r in kinds["transition"]}
    assert set(transitions) == {"base → sft", "base → rl"}
    for name, run in transitions.items():
        p, m = run.params, run.metrics
        assert f"{Path(p['base']).name} → {Path(p['post']).name}" == name
        assert {"method", "chain", "store", "compute_dtype", "n_matrices", "version.torch"} <= set(p)
        assert set(HEADLINE["transition"]) <= set(m)
        assert m["f_diag"] + m["f_off"] + m["f_null"] == pytest.approx(1, abs=1e-4)
        arts = rest.artifacts(run.id)
        assert {"metrics.csv", "summary.csv", "summary.json", "figures"} <= set(arts)
        assert arts["figures"]["is_dir"]
        assert any(f.endswith(".png") for f in rest.artifacts(run.id, "figures"))
        served = rest.artifact(run.id, "metrics.csv")
        assert served == (Path(p["store"]) / "metrics.csv").read_bytes()
        assert (server.artifacts / exp_id / run.id / "artifacts" / "metrics.csv").read_bytes() == served
        rows = list(csv.DictReader(io.StringIO(served.decode())))
        assert len(rows) == int(p["n_matrices"])
        for k in HEADLINE["transition"]:  # the headline is the mean of the per-matrix table it comes with
            if k.endswith("_vs_iso"):  # over the mean of each matrix's isotropic value r / (m·n)
                iso = math.fsum(float(r["rank"]) / (float(r["rows"]) * float(r["cols"])) for r in rows) / len(rows)
                mean = math.fsum(float(r[k.removesuffix("_vs_iso")]) for r in rows) / len(rows)
                assert m[k] == pytest.approx(mean / iso, rel=1e-5), (name, k)
                continue
            assert m[k] == pytest.approx(math.fsum(float(r[k]) for r in rows) / len(rows), rel=1e-5), (name, k)

    # the comparison of the two transitions
    (cmp,) = kinds["comparison"]
    p, m = cmp.params, cmp.metrics
    assert p["kind"] == "sequential" and cmp.tags["grrr.comparison"] == "sequential"
    assert {"a", "b", "statistic", "seed", "alpha"} <= set(p) and int(p["resamples"]) > 0 and int(p["null_draws"]) > 0
    stores = {name: run.params["store"] for name, run in transitions.items()}
    assert _same_path(p["a_store"], stores["base → sft"]) and _same_path(p["b_store"], stores["base → rl"])
    assert m["ci_lo"] <= m["median_cos_off"] <= m["ci_hi"] and 0 <= m["p_value"] <= 1
    assert cmp.tags["grrr.verdict"] in {"aligned", "anti-aligned", "indistinguishable"}
    assert cmp.name == "sequential: base → sft vs base → rl"
    arts = rest.artifacts(cmp.id)
    (per_matrix,) = [f for f in arts if f.endswith("_per_matrix.csv")]
    assert per_matrix.replace("_per_matrix.csv", ".json") in arts
    summary = json.loads(rest.artifact(cmp.id, per_matrix.replace("_per_matrix.csv", ".json")))
    assert summary["median_cos_off"] == pytest.approx(m["median_cos_off"])
    rows = list(csv.DictReader(io.StringIO(rest.artifact(cmp.id, per_matrix).decode())))
    assert len(rows) == int(m["n_matrices"])
    cosines = sorted(float(r["cos_off"]) for r in rows)  # the headline median, from the per-matrix table
    assert m["median_cos_off"] == pytest.approx(
        (cosines[(len(cosines) - 1) // 2] + cosines[len(cosines) // 2]) / 2, rel=1e-5, abs=1e-9
    )

    # the statistics: their tables as artifacts
    (stats,) = kinds["statistics"]
    assert {"table_overall.csv", "summary_long.csv"} <= set(rest.artifacts(stats.id))
    assert stats.metrics["transitions"] == 2

    # variants, nested under the transition they were built from
    variants = {r.params["variant"]: r for r in kinds["variant"]}
    assert set(variants) == {"full", "diag"}
    for name, run in variants.items():
        p, m = run.params, run.metrics
        assert p["dtype"] == "float32" and isinstance(json.loads(p["components"]), dict)
        parent = run.tags["mlflow.parentRunId"]
        assert _same_path(p["store"], next(t.params["store"] for t in transitions.values() if t.id == parent))
        assert math.isfinite(m["fidelity"]) and m["fidelity"] >= 0 and "fidelity_max" in m
        assert run.name == f"{name} · base → rl" and run.tags["mlflow.note.content"].startswith(
            f"The variant {name} of base → rl "
        )
        fidelity_csv = Path(p["folder"]).name + ".fidelity.csv"  # the sweep names folders <variant>-<key>
        assert fidelity_csv.startswith(name) and fidelity_csv in rest.artifacts(run.id)
        assert rest.artifact(run.id, fidelity_csv) == (Path(p["folder"]).parent / fidelity_csv).read_bytes()

    # idempotent over HTTP: the same job again finds its runs by grrr.key and logs nothing new
    some = transitions["base → rl"]
    n_hist = len(rest.history(some.id, "f_null"))
    populate(server.uri, populated)
    again = rest.runs([exp_id])
    assert Counter(r.tags["grrr.key"] for r in again) == keys
    assert {r.tags["grrr.key"]: r.id for r in again} == {r.tags["grrr.key"]: r.id for r in runs}
    assert {r.id: r.tags.get("mlflow.parentRunId") for r in again} == {
        r.id: r.tags.get("mlflow.parentRunId") for r in runs
    }
    assert len(rest.history(some.id, "f_null")) == n_hist


@pytest.mark.skipif(find_chromium() is None, reason=NO_CHROMIUM)  # before the server is started for it
def test_compare_page_shows_two_transitions_headline_metrics_side_by_side(server, populated, tmp_path):
    """The README's Compare screenshot: two transitions' runs, their headline metrics one row each."""
    exe = find_chromium()
    rest = Rest(server.uri)
    exp_id = rest.experiment(DEMO_EXPERIMENT)["experiment_id"]
    shown = sorted(_by_kind(rest.runs([exp_id]))["transition"], key=lambda r: r.name, reverse=True)  # sft, rl
    url = compare_page(server.uri, exp_id, [r.id for r in shown])  # the address docs/tracking.md describes
    names = [r.name for r in shown]
    shot = artifacts_dir() / SCREENSHOT
    shot.unlink(missing_ok=True)
    text, rows = "", {}
    with Chromium(exe, tmp_path / "chromium", width=1400, height=1100) as browser:
        try:
            rendered = f"""(() => {{
                const t = document.body ? document.body.innerText : '';
                return !!document.querySelector('a[title="Plot chart"]')
                    && {json.dumps(names)}.every((n) => t.includes(n));
            }})()"""
            browser.navigate(url)
            browser.wait_for(rendered, timeout=90)
            # The MLflow Assistant side panel opens itself on a first visit and narrows the tables, which
            # keep their width when it closes: close it (remembered in localStorage) and load the page again.
            if _close_assistant(browser):
                browser.navigate("about:blank")
                browser.navigate(url)
                browser.wait_for(rendered, timeout=90)
            text = browser.text()
            for metric in HEADLINE["transition"]:
                rows[metric] = scroll_to_metric(browser, metric)
            # the screenshot: the Metrics table from f_diag on, names beside their values
            aligned = show_metric_rows(browser, HEADLINE["transition"][0])
            assert len(aligned) >= 2 and len(set(aligned)) == 1, aligned
        finally:
            with contextlib.suppress(Exception):
                browser.screenshot(shot)
            text = text or browser.text()
    assert shot.is_file() and shot.stat().st_size > 20_000, f"no screenshot at {shot}"
    assert f"Comparing {len(shown)} Runs from 1 Experiment" in text, text[:3000]
    assert "Judges" not in text, text[:600]  # the sidebar of Model training, not GenAI's
    for run in shown:
        assert run.id in text and run.name in text, (run.name, text[:3000])
    for metric, row in rows.items():
        cells = row.split(" | ")
        assert cells[0] == metric and len(cells) == 1 + len(shown), (metric, row)
        for run, cell in zip(shown, cells[1:]):
            assert float(cell) == pytest.approx(run.metrics[metric], rel=1e-2, abs=1e-3), (metric, run.name, row)


@pytest.mark.skipif(find_chromium() is None, reason=NO_CHROMIUM)
def test_shares_page_draws_every_transitions_headline_metrics_first(server, populated, tmp_path):
    """The address a sweep prints and its report links for the transitions side by side (MLflow's runs page in chart
    mode with the experiment's shares view): it lists the transitions alone, flat, and its first charts are the
    headline metrics in order, each drawing every transition's value as the REST API returns it."""
    rest = Rest(server.uri)
    exp_id = rest.experiment(DEMO_EXPERIMENT)["experiment_id"]
    transitions = _by_kind(rest.runs([exp_id]))["transition"]
    assert SHARES_CHARTS == HEADLINE["transition"]
    shot = artifacts_dir() / "mlflow_shares.png"
    shot.unlink(missing_ok=True)
    with Chromium(find_chromium(), tmp_path / "chromium", width=1600, height=1000) as browser:
        try:
            browser.navigate(shares_page(server.uri, exp_id))
            browser.wait_for(charts_drawn(len(transitions)), timeout=90)
            cards, text, rows = chart_cards(browser), browser.text(), browser.evaluate(READ_RUNS_TABLE)
        finally:
            with contextlib.suppress(Exception):
                browser.screenshot(shot)
    assert shot.is_file() and shot.stat().st_size > 20_000, f"no screenshot at {shot}"
    assert "Judges" not in text, text[:600]  # Model training's pages, not GenAI's
    assert f"{len(transitions)} matching runs" in text, text[:3000]
    # the run list beside the charts: a row per run, its id the row's, in the rows' order
    assert set(rows) == {r.id for r in transitions}, rows
    name = {r.id: r.name for r in transitions}
    listed = [name[rid] for rid in sorted(rows, key=lambda rid: int(rows[rid]["row-index"]))]
    assert listed == sorted(name.values()), rows  # flat (not under the sweep's row) and by name
    assert [title for title, _ in cards[: len(SHARES_CHARTS)]] == list(SHARES_CHARTS), [t for t, _ in cards]
    for metric, values in cards[: len(SHARES_CHARTS)]:
        assert values == pytest.approx({r.id: r.metrics[metric] for r in transitions}, rel=1e-9), metric


SWEEP_FILTER = "tags.`grrr.sweep` = 'server-test'"
SPAN_SLACK_MS = 50  # clock reads of one host in two processes; MLflow keeps milliseconds


def _close_assistant(browser: Chromium) -> bool:
    """Close the MLflow Assistant side panel that opens itself on a first visit (remembered)."""
    return bool(
        browser.evaluate("""(() => {
        const b = document.querySelector('[data-component-id="mlflow.assistant.chat_panel.close"]');
        if (b) b.click();
        return !!b; })()""")
    )


def _open_runs_table(browser: Chromium, url: str, exp_id: str, n_top: int) -> str:
    """Open ``url``, wait for the runs table with ``n_top`` top-level rows; return where the UI landed."""
    shown = f"""(() => location.hash.startsWith('#/experiments/{exp_id}/runs')
        && new Set([...document.querySelectorAll('.ag-row')].map((r) => r.getAttribute('row-id'))).size
           >= {n_top})()"""
    for attempt in range(2):
        browser.navigate("about:blank")
        browser.navigate(url)
        try:
            browser.wait_for(shown, timeout=90)
        except TimeoutError:
            raise AssertionError(
                f"no runs table at {url}; the UI shows {browser.evaluate('location.href')}:\n{browser.text()[:1500]}"
            ) from None
        if not _close_assistant(browser):
            break
    return browser.evaluate("location.href")


def _unit_records(workdir: Path) -> dict[str, dict]:
    recs = [json.loads(p.read_text()) for p in (workdir / "sweep" / ".sweep" / "units").glob("*.json")]
    return {r["id"]: r for r in recs}


@pytest.mark.slow  # ~30 s beyond the module's server and sweep: two evaluations, the runs table twice
# the screenshot mlflow_runs_table.png is docs/mlflow_runs.png's source
@pytest.mark.skipif(find_chromium() is None, reason=NO_CHROMIUM)
def test_experiment_page_lands_on_runs_with_durations_datasets_and_the_sweep_filter(
    server, populated, evaluated, tmp_path
):
    rest = Rest(server.uri)
    exp = rest.experiment(DEMO_EXPERIMENT)
    exp_id = exp["experiment_id"]
    assert {t["key"]: t["value"] for t in exp.get("tags", [])}["mlflow.experimentKind"] == "custom_model_development"
    runs = {r.id: r for r in rest.runs([exp_id])}
    kinds = _by_kind(list(runs.values()))
    assert {k: len(v) for k, v in kinds.items()} == {**KINDS, "evaluation": 2}
    top = [r for r in runs.values() if "mlflow.parentRunId" not in r.tags]
    in_sweep = {r.id for r in rest.runs([exp_id], filter=SWEEP_FILTER)}
    assert in_sweep == {r.id for k in KINDS for r in kinds[k]}  # the evaluations were not the sweep's

    url = runs_page(server.uri, exp_id)  # the link `grrr-stream sweep` prints
    shots = artifacts_dir() / "mlflow_runs_table.png", artifacts_dir() / "mlflow_runs_of_the_sweep.png"
    for shot in shots:
        shot.unlink(missing_ok=True)
    assert len(top) == 1  # one tree: the sweep's run
    # wide enough for every headline column (the table renders only the columns in view)
    with Chromium(find_chromium(), tmp_path / "chromium", width=2600, height=1000) as browser:
        landed = _open_runs_table(browser, url, exp_id, len(top))
        table = runs_table(browser)
        browser.screenshot(shots[0])
        search_runs(browser, SWEEP_FILTER)
        browser.wait_for(
            f"""(() => location.hash.includes('searchFilter=tags')
            && document.body.innerText.includes({json.dumps(f"{len(in_sweep)} matching runs")}))()""",
            timeout=60,
        )
        search_box = browser.evaluate("document.querySelector('[data-testid=\"search-box\"]').value")
        filtered = runs_table(browser)
        browser.screenshot(shots[1])
    assert all(shot.is_file() and shot.stat().st_size > 20_000 for shot in shots), shots

    # the experiment page lands on the runs table, not on the GenAI overview, and lists every run
    assert urllib.parse.urlsplit(landed).fragment.startswith(f"/experiments/{exp_id}/runs?"), landed
    assert set(table) == set(runs), (table, runs.keys())
    assert {rid: row["name"] for rid, row in table.items()} == {rid: r.name for rid, r in runs.items()}
    # nested: with every parent open, the rows are the tree depth first, siblings oldest first (the order the
    # work ran), sweep → transition → variant → evaluation, the statistics and comparison under the sweep
    children: dict = {}
    for r in runs.values():
        children.setdefault(r.tags.get("mlflow.parentRunId"), []).append(r)

    def depth_first(parent):
        for r in sorted(children.get(parent, []), key=lambda r: r.start_ms):
            yield r.id
            yield from depth_first(r.id)

    assert [rid for rid, _ in sorted(table.items(), key=lambda kv: kv[1]["position"])] == list(depth_first(None))
    assert all(runs[r.tags["mlflow.parentRunId"]].tags["grrr.kind"] == "variant" for r in kinds["evaluation"])
    # the headline columns, shown without choosing them, filled for the runs of their kind
    for rid, row in table.items():
        run = runs[rid]
        for k in HEADLINE.get(run.tags["grrr.kind"], ()):
            assert float(row["metrics"][k]) == pytest.approx(run.metrics[k], rel=1e-3, abs=1e-6), (run.name, k, row)

    # durations as shown = the REST times, and each covers the work the run records
    for rid, row in table.items():
        run = runs[rid]
        shown, half_step = parse_duration(row["duration"])
        span = (run.end_ms - run.start_ms) / 1000
        assert shown == pytest.approx(span, abs=half_step + 1e-9), (run.name, row["duration"], span)
        assert shown + half_step >= run.metrics["work_seconds"] > 0, (run.name, row["duration"], run.metrics)
    # ... and lies within what the sweep's own records measured for the unit (the sweep's run: around them)
    records = _unit_records(populated)
    unit_of = {r.id: f"decompose/base-to-{r.name.split(' → ')[1]}" for r in kinds["transition"]}
    unit_of.update({r.id: f"variant/base-to-rl/{r.params['variant']}" for r in kinds["variant"]})
    unit_of.update({r.id: next(u for u in records if u.startswith("compare/")) for r in kinds["comparison"]})
    unit_of.update({r.id: next(u for u in records if u.startswith("stats")) for r in kinds["statistics"]})
    for rid, unit in unit_of.items():
        rec, run = records[unit], runs[rid]
        assert rec["status"] == "done", rec
        began, ended = rec["started"] * 1000, (rec["started"] + rec["seconds"]) * 1000
        assert began - SPAN_SLACK_MS <= run.start_ms < run.end_ms <= ended + SPAN_SLACK_MS, (unit, rec, run)
    (sweep,) = kinds["sweep"]
    for rec in records.values():
        began, ended = rec["started"] * 1000, (rec["started"] + rec["seconds"]) * 1000
        assert sweep.start_ms - SPAN_SLACK_MS <= began and ended <= sweep.end_ms + SPAN_SLACK_MS, (rec, sweep)

    # each evaluation spans its own variant's scoring (one engine, one variant after the other), not the batch's
    first, second = sorted(kinds["evaluation"], key=lambda r: r.start_ms)
    assert first.end_ms <= second.start_ms + SPAN_SLACK_MS, (first, second)

    # the Dataset column: each evaluation names its benchmark file and its digest (sha256 prefix)
    digest = hashlib.sha256(evaluated.read_bytes()).hexdigest()[:16]
    for rid, row in table.items():
        if runs[rid].tags["grrr.kind"] == "evaluation":
            assert row["dataset"].split("\n") == [f"sums ({digest})", "Evaluation"], row
        else:
            assert row["dataset"] == "-", (runs[rid].name, row)

    # filtering by the sweep's tag finds the sweep and every unit run of it, nested ones included
    assert search_box == SWEEP_FILTER
    assert set(filtered) == in_sweep, (filtered, in_sweep)


@pytest.mark.skipif(find_chromium() is None, reason=NO_CHROMIUM)
def test_sweep_report_page_is_logged_and_opens_in_the_mlflow_artifact_view(server, populated, tmp_path):
    rest = Rest(server.uri)
    exp_id = rest.experiment(DEMO_EXPERIMENT)["experiment_id"]
    (sweep,) = _by_kind(rest.runs([exp_id]))["sweep"]
    local = populated / "sweep" / "report"
    page = rest.artifact(sweep.id, "report/index.html")
    # the page the sweep wrote, named by its run (also after the idempotent rerun of a test above, which
    # rewrites the page and logs it again to the finished run)
    assert page == (local / "index.html").read_bytes()
    assert sweep.id in page.decode() and f"{server.uri}/#/experiments/{exp_id}/runs/{sweep.id}" in page.decode()
    url = f"{server.uri}/#/experiments/{exp_id}/runs/{sweep.id}/artifacts/report/index.html"
    with Chromium(
        find_chromium(), tmp_path / "chromium", width=1600, height=1400, extra_args=Chromium.SAME_PROCESS_FRAMES
    ) as browser:
        browser.navigate(url)
        browser.wait_for("!!document.querySelector('iframe.mlflow-html-iframe')", timeout=90)
        _close_assistant(browser)
        browser.watch_console()  # from here on: the page's own errors (the report frame's included)
        browser.navigate("about:blank")
        browser.navigate(url)
        browser.wait_for("!!document.querySelector('iframe.mlflow-html-iframe')", timeout=90)
        frame = None
        for _ in range(120):
            frame = next((f for f in browser.child_frames() if f.get("url", "").startswith("blob:")), None)
            if frame is not None:
                break
            time.sleep(0.25)
        assert frame is not None, browser.child_frames()
        ready = "document.readyState === 'complete' && [...document.images].every((i) => i.complete)"
        for _ in range(120):
            if browser.evaluate_in_frame(frame["id"], f"(() => {ready})()"):
                break
            time.sleep(0.25)
        seen = browser.evaluate_in_frame(frame["id"], READ_REPORT)
        errors = browser.console_errors()
    # the MLflow UI asks its server for features this server does not have (404s of its own ajax-api calls):
    # the UI's noise, not the report's
    assert [e for e in errors if f"{server.uri}/ajax-api/" not in e] == [], errors
    assert {"table34", "table7", "comparisons", "units"} <= set(seen["tables"]), seen["tables"]
    assert len(seen["images"]) >= 4 and all(w > 0 for _, w in seen["images"]), seen["images"]
    assert seen["external"] == 0

    def served(name: str) -> list[dict]:  # the CSV as the server holds it, beside the page
        return list(csv.DictReader(io.StringIO(rest.artifact(sweep.id, f"report/{name}").decode())))

    assert check_report_cells(seen["cells"], functools.lru_cache(None)(served)) > 50

"""MLflow logging of a transition: params, per-matrix metrics, aggregates, artifacts, no duplicates."""

from __future__ import annotations

import math

import pytest
from helpers.common import no_track_config
from mlflow.tracking import MlflowClient

from grrr_stream.decompose.run import run_transition


@pytest.fixture()
def uri(tmp_path):
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def _runs(uri, experiment="grrr_stream"):
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    return client, client.search_runs([exp.experiment_id]) if exp else []


def test_transition_run_has_params_metrics_artifacts_and_is_not_duplicated(planted_f64, tmp_path, uri):
    base, post = planted_f64
    cfg = no_track_config(
        base=str(base),
        post=str(post),
        store=tmp_path / "s",
        method="SFT",
        chain="toy",
        tracking={"uri": uri},
        figures=True,
    )
    res = run_transition(cfg)
    client, runs = _runs(uri)
    assert len(runs) == 1
    run = runs[0]
    assert run.info.run_id == res.run_id and run.info.status == "FINISHED"
    # the run spans the decomposition (it is opened after it, with the measured start)
    assert (run.info.end_time - run.info.start_time) / 1000 >= run.data.metrics["work_seconds"] > 0
    p = run.data.params
    assert p["base"] == str(base) and p["post"] == str(post) and p["method"] == "SFT" and p["chain"] == "toy"
    assert p["compute_dtype"] == "float32" and p["device"] == "cpu" and "version.torch" in p
    assert run.data.tags["grrr.complete"] == "true" and run.data.tags["grrr.key"].startswith("transition-")
    assert run.info.run_name == f"{base.name} → {post.name}"
    assert run.data.tags["mlflow.note.content"].startswith(f"The update {base.name} → {post.name} (SFT) ")
    # a handful of headline metrics, each the mean over the matrices (float64 here, against the rows), at step 0;
    # the per-matrix detail is the metrics.csv artifact, not hundreds of series with the layer as step
    m = run.data.metrics
    assert set(m) == {
        "f_diag",
        "f_off",
        "f_null",
        "r_delta",
        "sv_cos",
        "delta_fro",
        "delta_max",
        "dsr_pct",
        "alpha",
        "work_seconds",
        "f_diag_vs_iso",
    }, sorted(m)
    # f_diag against what an isotropic update puts on the diagonal of each matrix's frame, r / (m·n)
    iso = math.fsum(r["rank"] / (r["rows"] * r["cols"]) for r in res.rows) / len(res.rows)
    assert m["f_diag_vs_iso"] == pytest.approx(m["f_diag"] / iso, rel=1e-6)
    for k in ("f_diag", "f_off", "f_null", "r_delta", "sv_cos"):
        assert m[k] == pytest.approx(math.fsum(r[k] for r in res.rows) / len(res.rows), rel=1e-6), k
        assert [h.step for h in client.get_metric_history(run.info.run_id, k)] == [0]
    assert m["f_diag"] + m["f_off"] + m["f_null"] == pytest.approx(1, abs=1e-6)
    arts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"metrics.csv", "summary.csv", "summary.json", "figures"} <= arts
    figs = {a.path for a in client.list_artifacts(run.info.run_id, "figures")}
    assert figs == {
        "figures/energy_fractions.png",
        "figures/spectra_most_changed.png",
        "figures/band_energy_by_module.png",
    }
    # rerunning the finished transition logs nothing new
    again = run_transition(cfg)
    assert again.run_id == res.run_id and again.computed == 0
    _, runs = _runs(uri)
    assert len(runs) == 1
    assert len(client.get_metric_history(run.info.run_id, "f_null")) == 1


def test_run_left_unfinished_is_resumed_not_duplicated(planted_f64, tmp_path, uri):
    from grrr_stream.checkpoints.reader import Checkpoint
    from grrr_stream.decompose.run import _identity
    from grrr_stream.tracking import mlflow_client as tracking
    from grrr_stream.tracking.runs import transition_key

    base, post = planted_f64
    cfg = no_track_config(base=str(base), post=str(post), store=tmp_path / "s", tracking={"uri": uri})
    # a crash after the run was created but before it was finished
    key = transition_key(_identity(cfg, Checkpoint.open(base), Checkpoint.open(post)))
    crashed = tracking.open_run(uri=uri, experiment="grrr_stream", key=key, run_name="crashed")
    crashed.log_params({"base": str(base)})
    res = run_transition(cfg)
    client, runs = _runs(uri)
    assert len(runs) == 1 and res.run_id == crashed.run_id
    assert runs[0].info.status == "FINISHED" and "f_diag" in runs[0].data.metrics
    assert runs[0].info.run_name == f"{base.name} → {post.name}"  # the crashed attempt's name brought up to date
    # the resumed run keeps the crashed attempt's start: its span covers both attempts
    info = runs[0].info
    assert info.end_time - info.start_time >= 1000 * runs[0].data.metrics["work_seconds"]


def test_kind_span_sweep_tag_and_datasets_in_one_store(tmp_path, uri):
    """One store for four conventions (each fresh SQLite store costs seconds of migrations)."""
    import hashlib
    import time

    from grrr_stream.tracking import mlflow_client as tracking

    client = MlflowClient(tracking_uri=uri)

    # the experiment is a model-training one: new, or created before (as older versions did), but
    # a kind somebody chose in the UI stays theirs
    client.create_experiment("old", artifact_location=(tmp_path / "a").as_uri())
    client.create_experiment(
        "chosen", artifact_location=(tmp_path / "b").as_uri(), tags={tracking.KIND_TAG: "genai_development"}
    )
    for name in ("fresh", "old", "chosen"):
        tracking.open_run(uri=uri, experiment=name, key=f"k-{name}", run_name=name)
    kinds = {n: client.get_experiment_by_name(n).tags.get(tracking.KIND_TAG) for n in ("fresh", "old", "chosen")}
    assert kinds == {
        "fresh": "custom_model_development",
        "old": "custom_model_development",
        "chosen": "genai_development",
    }

    # a run spans the work that began before it was opened; a rerun that adds nothing keeps its end
    started = tracking.now_ms() - 5000
    run = tracking.open_run(uri=uri, experiment="e", key="k", run_name="r", start_ms=started)
    run.log_metrics([("m", 1.0, 0)])
    run.finish()
    info = client.get_run(run.run_id).info
    assert info.start_time == started and info.end_time - info.start_time >= 5000
    time.sleep(0.05)
    again = tracking.open_run(uri=uri, experiment="e", key="k", run_name="r", start_ms=tracking.now_ms())
    assert again.complete and again.run_id == run.run_id
    again.finish()
    assert client.get_run(run.run_id).info.end_time == info.end_time

    # the sweep tag goes on new runs and on finished runs a sweep reuses
    a = tracking.open_run(uri=uri, experiment="e", key="a", run_name="a", sweep="s1")
    tracking.open_run(uri=uri, experiment="e", key="k", run_name="r", sweep="s1")
    exp = client.get_experiment_by_name("e").experiment_id
    found = client.search_runs([exp], filter_string="tags.`grrr.sweep` = 's1'")
    assert {r.info.run_id for r in found} == {a.run_id, run.run_id}

    # a benchmark file as a dataset input, once however often it is logged
    f = tmp_path / "sums" / "test.jsonl"
    f.parent.mkdir()
    f.write_text('{"problem": "1+1", "answer": "2"}\n')
    sha = hashlib.sha256(f.read_bytes()).hexdigest()
    for _ in range(2):
        tracking.open_run(uri=uri, experiment="e", key="k", run_name="r").log_datasets([("sums", sha, f, 1)])
    (inp,) = client.get_run(run.run_id).inputs.dataset_inputs
    assert (inp.dataset.name, inp.dataset.digest) == ("sums", sha[:16])
    assert {t.key: t.value for t in inp.tags} == {"mlflow.data.context": "evaluation"}
    assert sha in inp.dataset.profile and str(f) in inp.dataset.source


def test_runs_nest_as_the_work_nests_and_placeholders_are_filled(tmp_path, uri):
    """sweep → transition → variant → evaluation, plus the sweep's statistics and comparisons; a parent made for
    a child before its own work was logged ends with the child and is completed by its own logging later."""
    import json

    from grrr_stream.config import TrackingConfig
    from grrr_stream.tracking import mlflow_client as tracking
    from grrr_stream.tracking import mlflow_view
    from grrr_stream.tracking.run_log import RunLog, apply

    cfg = TrackingConfig(uri=uri, experiment="nest", sweep="s1")
    transition = {"key": "t1", "name": "base → sft", "tags": {"grrr.kind": "transition"}}
    variant = {"key": "v1", "name": "full", "tags": {"grrr.kind": "variant"}, "parent": transition}
    t0 = tracking.now_ms() - 10_000
    # the evaluation logged first: its variant and transition are made as placeholders
    ev_id = apply(
        RunLog.of(
            cfg,
            key="e1",
            name="full on sums",
            tags={"grrr.kind": "evaluation"},
            parent=variant,
            start_ms=t0 + 5000,
            end_ms=t0 + 6000,
            metrics=[("average", 50.0, 0)],
        )
    )
    client = MlflowClient(tracking_uri=uri)
    exp_id = client.get_experiment_by_name("nest").experiment_id

    def runs():
        return {r.info.run_name: r for r in client.search_runs([exp_id])}

    r = runs()
    assert set(r) == {"base → sft", "full", "full on sums"}
    parent = {n: x.data.tags.get("mlflow.parentRunId") for n, x in r.items()}
    assert parent == {"base → sft": None, "full": r["base → sft"].info.run_id, "full on sums": r["full"].info.run_id}
    for n in ("base → sft", "full"):  # ended, not left running; not complete: their work is still to come
        assert r[n].info.status == "FINISHED" and "grrr.complete" not in r[n].data.tags, n
    assert r["full on sums"].info.run_id == ev_id and r["full on sums"].info.end_time == t0 + 6000
    # the transition's own logging fills its placeholder and completes it; a second evaluation leaves it alone
    apply(
        RunLog.of(
            cfg,
            key="t1",
            name="base → sft",
            tags={"grrr.kind": "transition"},
            start_ms=t0,
            end_ms=t0 + 3000,
            metrics=[("f_diag", 0.2, 0)],
        )
    )
    apply(
        RunLog.of(
            cfg,
            key="e2",
            name="full on more",
            tags={"grrr.kind": "evaluation"},
            parent=variant,
            start_ms=t0 + 7000,
            end_ms=t0 + 8000,
        )
    )
    r = runs()
    assert r["base → sft"].data.tags["grrr.complete"] == "true" and r["base → sft"].data.metrics == {"f_diag": 0.2}
    assert r["full"].info.status == "FINISHED" and "grrr.complete" not in r["full"].data.tags
    assert r["full on more"].data.tags["mlflow.parentRunId"] == r["full"].info.run_id
    # the sweep's run, logged last, takes its transitions, statistics and comparisons; not the nested runs, nor
    # another sweep's
    other = TrackingConfig(uri=uri, experiment="nest", sweep="s2")
    apply(RunLog.of(cfg, key="c1", name="sequential: a vs b", tags={"grrr.kind": "comparison"}))
    apply(RunLog.of(cfg, key="st1", name="statistics", tags={"grrr.kind": "statistics"}))
    apply(RunLog.of(other, key="t2", name="base → rl", tags={"grrr.kind": "transition"}))
    sweep_id = apply(
        RunLog.of(
            cfg,
            key="sw",
            name="sweep s1",
            tags={"grrr.kind": "sweep"},
            adopt=["transition", "comparison", "statistics"],
        )
    )
    parent = {n: x.data.tags.get("mlflow.parentRunId") for n, x in runs().items()}
    assert {n for n, p in parent.items() if p == sweep_id} == {"base → sft", "sequential: a vs b", "statistics"}
    assert parent["full"] == r["base → sft"].info.run_id and parent["base → rl"] is None
    assert parent["sweep s1"] is None

    # the experiment carries the view every printed address opens: headline columns, oldest run first
    view = json.loads(client.get_experiment(exp_id).tags[mlflow_view.VIEW_TAG])
    assert view["orderByKey"] == "attributes.start_time" and view["orderByAsc"] is True
    assert {"metrics.`f_diag`", "metrics.`average`", "metrics.`minus_full`"} <= set(view["selectedColumns"])
    # and the view of the transitions' shares: flat (sorted by name), every run drawn, the headline charts first
    shares = json.loads(client.get_experiment(exp_id).tags[mlflow_view.SHARES_TAG])
    assert (
        shares["searchFilter"] == "tags.`grrr.kind` = 'transition'" and shares["orderByKey"] != "attributes.start_time"
    )
    assert [c["metricKey"] for c in shares["compareRunCharts"]] == [
        "f_diag",
        "f_diag_vs_iso",
        "f_off",
        "f_null",
        "r_delta",
        "sv_cos",
    ]
    assert shares["runsHiddenMode"] == "SHOW_ALL" and shares["isAccordionReordered"] is True
    assert mlflow_view.shares_page("http://h:5000", exp_id) == (
        f"http://h:5000/#/experiments/{exp_id}/runs?workflowType=machine_learning&viewStateShareKey=grrr-shares"
        "&compareRunsMode=CHART"
    )
    page = mlflow_view.runs_page("http://h:5000/", exp_id)
    assert page == f"http://h:5000/#/experiments/{exp_id}/runs?workflowType=machine_learning&viewStateShareKey=grrr"
    assert mlflow_view.run_page("http://h:5000", exp_id, ev_id).endswith(f"/runs/{ev_id}?workflowType=machine_learning")


def test_the_sweep_run_carries_the_verdict():
    """The sweep's run held unit counts only: it now has, per verdict of the report's box, how many claims have it
    (the runs table's columns logged, 0 included, the other verdicts when a claim has them), a tag per claim saying
    its verdict and what it rests on, and one tag summing them up."""
    from grrr_stream.report.verdict_rows import WORDS
    from grrr_stream.tracking.mlflow_view import HEADLINE_COLUMNS
    from grrr_stream.tracking.runs import verdict_log, verdict_metric

    box = [
        ("offnull-within", "contradicts", "1 of 3 [1–1]; Fisher's exact test, one-sided: p = 0.023"),
        ("offnull-median", "too few to tell", "median 80.0 %"),
        ("seq-cos", "not resolved", "-0.0024 [-0.047, 0.036]"),
        ("rl-fdiag", "contradicts", "0 of 5 ≤ 0.011"),
    ]
    metrics, tags = verdict_log(box, WORDS)
    got = {k: v for k, v, _ in metrics}
    want = {"contradicts": 2, "too few to tell": 1, "not resolved": 1}
    # the counts the runs table shows are logged at 0 too (its columns filled); the others when a claim has them
    shown = {c for c in HEADLINE_COLUMNS if c.startswith("claims_")}
    assert got == {verdict_metric(w): want.get(w, 0) for w in WORDS if verdict_metric(w) in shown or w in want}
    assert verdict_metric("holds, outside the paper's range") == "claims_holds_outside_the_paper_s_range"
    assert got["claims_too_few_to_tell"] == 1 and got["claims_consistent"] == 0
    assert tags["grrr.verdict.offnull-within"] == "contradicts: 1 of 3 [1–1]; Fisher's exact test, one-sided: p = 0.023"
    assert tags["grrr.verdict"] == "2 contradicts, 1 not resolved, 1 too few to tell"
    shown = [c for c in HEADLINE_COLUMNS if c.startswith("claims_")]
    assert shown and set(shown) <= {verdict_metric(w) for w in WORDS}
    assert verdict_log([], WORDS)[1] == {}  # no box yet: no tags, every count 0


def test_variant_and_evaluation_runs_are_named_with_their_transition():
    """The demo's MLflow runs read "full" ×4 and "base on arith" ×4: a variant's run name now says whose it is."""
    from types import SimpleNamespace

    from grrr_stream.tracking.model_runs import variant_ref, variant_run_name

    def builder(base, post):
        manifest = {"base": f"/w/{base}", "post": f"/w/{post}", "identity": {"b": base, "p": post}}
        t = SimpleNamespace(manifest=manifest)
        spec = SimpleNamespace(name="full")
        return SimpleNamespace(transition=t, spec=spec, dtype="float32", metadata=lambda: {"t": [base, post]})

    names = [variant_ref(builder(b, p))["name"] for b, p in (("base", "sft"), ("sft", "rl"), ("base", "rl"))]
    assert names == ["full · base → sft", "full · sft → rl", "full · base → rl"]
    assert variant_run_name("base", {"base": "/x/base", "post": "/x/sibling"}) == "base · base → sibling"

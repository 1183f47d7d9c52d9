"""MLflow logging of a transition: params, per-matrix metrics, aggregates, artifacts, no duplicates."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from helpers.common import no_track_config
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
    cfg = no_track_config(base=str(base), post=str(post), store=tmp_path / "s", method="SFT", chain="toy",
                          tracking={"uri": uri})
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
    hist = client.get_metric_history(run.info.run_id, "f_null/gate_proj")
    assert sorted(m.step for m in hist) == [0, 1]
    by_layer = {r["layer"]: r["f_null"] for r in res.rows if r["module"] == "gate_proj"}
    assert {m.step: m.value for m in hist} == pytest.approx(by_layer)
    m = run.data.metrics
    assert m["mean/f_null"] == pytest.approx(sum(r["f_null"] for r in res.rows) / len(res.rows))
    assert "std/f_off/down_proj" in m and "mean/alpha/q_proj" in m
    arts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"metrics.csv", "summary.csv", "summary.json", "figures"} <= arts
    figs = {a.path for a in client.list_artifacts(run.info.run_id, "figures")}
    assert figs == {"figures/energy_fractions.png", "figures/spectra_most_changed.png",
                    "figures/band_energy_by_module.png"}
    # rerunning the finished transition logs nothing new
    again = run_transition(cfg)
    assert again.run_id == res.run_id and again.computed == 0
    _, runs = _runs(uri)
    assert len(runs) == 1
    assert len(client.get_metric_history(run.info.run_id, "f_null/gate_proj")) == 2


def test_run_left_unfinished_is_resumed_not_duplicated(planted_f64, tmp_path, uri):
    from grrr_stream.tracking import mlflow_client as tracking
    from grrr_stream.decompose.run import _identity
    from grrr_stream.tracking.runs import transition_key
    from grrr_stream.checkpoints.reader import Checkpoint

    base, post = planted_f64
    cfg = no_track_config(base=str(base), post=str(post), store=tmp_path / "s", tracking={"uri": uri})
    # a crash after the run was created but before it was finished
    key = transition_key(_identity(cfg, Checkpoint.open(base), Checkpoint.open(post)))
    crashed = tracking.open_run(uri=uri, experiment="grrr_stream", key=key, run_name="crashed")
    crashed.log_params({"base": str(base)})
    res = run_transition(cfg)
    client, runs = _runs(uri)
    assert len(runs) == 1 and res.run_id == crashed.run_id
    assert runs[0].info.status == "FINISHED" and "mean/f_diag" in runs[0].data.metrics
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
    client.create_experiment("chosen", artifact_location=(tmp_path / "b").as_uri(),
                             tags={tracking.KIND_TAG: "genai_development"})
    for name in ("fresh", "old", "chosen"):
        tracking.open_run(uri=uri, experiment=name, key=f"k-{name}", run_name=name)
    kinds = {n: client.get_experiment_by_name(n).tags.get(tracking.KIND_TAG) for n in ("fresh", "old", "chosen")}
    assert kinds == {"fresh": "custom_model_development", "old": "custom_model_development",
                     "chosen": "genai_development"}

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

"""MLflow logging of a transition: params, per-matrix metrics, aggregates, artifacts, no duplicates."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from conftest import no_track_config
from grrr_stream.decompose import run_transition


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
    from grrr_stream import tracking
    from grrr_stream.decompose import _identity, transition_key
    from grrr_stream.checkpoint import Checkpoint

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

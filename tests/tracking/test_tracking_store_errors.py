"""A tracking store that answers but cannot take the work is said in one line with its remedy, from the console
script as users run it: a deleted experiment is left deleted (not restored behind the user's back) and named with
how to restore it; a tag holding bytes that are not UTF-8 (MLflow's SQL layer logs a 69-line traceback for it)
is named with what to do. The work is done and kept either way, and the exit status says the logging was missed."""

from __future__ import annotations

import sqlite3
import subprocess

import pytest
from mlflow.tracking import MlflowClient

from grrr_stream.cli.entry import EXIT_TRACKING

pytestmark = pytest.mark.timeout(300)


def _decompose(pair, store, uri):
    from helpers.processes import console_script

    base, post = pair
    argv = [console_script(), "decompose", "--base", str(base), "--post", str(post), "--store", str(store),
            "--no-progress", "--tracking-uri", uri]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=240, cwd=store.parent)


def test_a_deleted_experiment_and_an_undecodable_tag_are_said_in_one_line(planted_f64, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = _decompose(planted_f64, tmp_path / "s", uri)
    assert first.returncode == 0, first.stderr
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("grrr_stream")
    client.delete_experiment(exp.experiment_id)

    deleted = _decompose(planted_f64, tmp_path / "s", uri)
    assert deleted.returncode == EXIT_TRACKING, deleted.stderr
    assert "Traceback" not in deleted.stderr
    said = [line for line in deleted.stderr.splitlines() if "is deleted" in line]
    assert said and f"experiments restore --experiment-id {exp.experiment_id}" in said[0], deleted.stderr
    assert client.get_experiment(exp.experiment_id).lifecycle_stage == "deleted"  # left as the user left it

    client.restore_experiment(exp.experiment_id)
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        db.execute(
            "UPDATE experiment_tags SET value = CAST(X'FFFE20626164' AS TEXT) WHERE experiment_id = ? AND key = ?",
            (int(exp.experiment_id), "mlflow.experimentKind"),
        )
    broken = _decompose(planted_f64, tmp_path / "s", uri)
    assert broken.returncode == EXIT_TRACKING, broken.stderr
    assert "Traceback" not in broken.stderr and "sqlalchemy" not in broken.stderr.lower()
    assert "not UTF-8" in broken.stderr and "--experiment" in broken.stderr
    assert len(broken.stderr.strip().splitlines()) <= 4, broken.stderr

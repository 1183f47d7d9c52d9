"""MLflow's UI as the addresses this tool prints open it: the experiment's shared view (:func:`view_state`, the
headline metrics as columns, oldest run first; :mod:`.mlflow_client` sets it on the experiment) and the addresses
of the runs table, a run and the Compare page (:func:`runs_page`, :func:`run_page`, :func:`compare_page`), each in
Model training mode: MLflow 3.17's UI shows GenAI pages unless the address says otherwise."""

from __future__ import annotations

import json
from typing import Iterable

# The experiment's view that every address this tool prints opens (MLflow's "Share" view state, an experiment
# tag read by the runs page's ``viewStateShareKey`` parameter): the headline columns, oldest run first.
VIEW_KEY = "grrr"
VIEW_TAG = "mlflow.sharedViewState." + VIEW_KEY


# The runs table's columns in the view (VIEW_TAG): each kind of run's headline metrics (runs.py and model_runs.py log
# them under these names), then the Dataset column (an evaluation's benchmarks). Ids as the UI builds them: TYPE.`NAME`.
HEADLINE_COLUMNS = (
    "f_diag",
    "f_off",
    "f_null",
    "r_delta",
    "sv_cos",  # a transition (means over its matrices)
    "fidelity",  # a variant
    "average",
    "retention",
    "minus_full",
    "minus_full_ci_lo",
    "minus_full_ci_hi",  # an evaluation
    "median_cos_off",
    "ci_lo",
    "ci_hi",
    "p_value",  # a comparison
    "claims_consistent",
    "claims_holds",
    "claims_contradicts",
    "claims_does_not_hold",  # a sweep: how many of the paper's claims have each verdict (runs.verdict_log)
)


def view_state() -> str:
    """The experiment's shared view (JSON, as MLflow's Share button stores it): the headline metrics as columns, in
    this order, a run-name column wide enough for nested names, and the runs oldest first, so that siblings are
    listed in the order the work ran (the plan's order)."""
    columns = [f"metrics.`{m}`" for m in HEADLINE_COLUMNS] + ["attributes.`Dataset`"]
    return json.dumps(
        {
            "orderByKey": "attributes.start_time",
            "orderByAsc": True,
            "selectedColumns": columns,
            "columnOrder": ["attributes.`Run Name`", "runDateAndNestInfo", "duration", *columns],
            "columnWidths": {"attributes.`Run Name`": 320},
            "runsHiddenMode": "SHOW_ALL",
        },
        separators=(",", ":"),
    )


# MLflow 3.17's UI picks its pages from its own GenAI / Model training switch (kept per browser in localStorage,
# GenAI until changed), never from the experiment's kind (mlflow.experimentKind is read only while that switch is
# off, and it is always on): GenAI opens an experiment on the traces overview. This parameter sets the switch
# for the page it opens, so every address the tool prints carries it.
TRAINING = "workflowType=machine_learning"


def runs_page(ui: str, experiment_id: str) -> str:
    """The address of the experiment in MLflow's UI at ``ui`` that opens on its runs table in Model training mode,
    with the tool's view (:func:`view_state`: headline columns, oldest run first)."""
    return f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs?{TRAINING}&viewStateShareKey={VIEW_KEY}"


def run_page(ui: str, experiment_id: str, run_id: str) -> str:
    """The address of one run's page in Model training mode."""
    return f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}?{TRAINING}"


def compare_page(ui: str, experiment_id: str, run_ids: Iterable[str]) -> str:
    """The address of MLflow's Compare page of ``run_ids`` (the UI's route /compare-runs, as its
    Routes.getCompareRunPageRoute builds it), in Model training mode."""
    runs = json.dumps(list(run_ids), separators=(",", ":"))
    return f'{ui.rstrip("/")}/#/compare-runs?runs={runs}&experiments=["{experiment_id}"]&{TRAINING}'

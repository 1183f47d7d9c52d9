"""MLflow's UI as the addresses this tool prints open it: the experiment's shared views (:func:`views`, which
:mod:`.mlflow_client` sets on the experiment: the runs table with the headline metrics as columns, oldest run
first, and the transitions' energy shares as charts) and the addresses of the runs table, the shares' charts, a
run and the Compare page (:func:`runs_page`, :func:`shares_page`, :func:`run_page`, :func:`compare_page`), each in
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
# a transition (means over its matrices; f_diag also against its isotropic value at the transition's shapes)
TRANSITION_HEADLINE = ("f_diag", "f_diag_vs_iso", "f_off", "f_null", "r_delta", "sv_cos")
HEADLINE_COLUMNS = (
    *TRANSITION_HEADLINE,
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
            # the Dataset column beside the duration, not after every metric: past the screen's width the table
            # does not draw it
            "columnOrder": ["attributes.`Run Name`", "runDateAndNestInfo", "duration", columns[-1], *columns[:-1]],
            "columnWidths": {"attributes.`Run Name`": 320},
            "runsHiddenMode": "SHOW_ALL",
        },
        separators=(",", ":"),
    )


# The transitions side by side, one bar chart per headline metric of a transition, the energy shares first. MLflow's
# Compare page opens on a parallel-coordinates plot of params (a per-browser setting), with the metrics in a table
# below it; its runs page in chart mode draws what this view says. The view lists the transitions flat (MLflow nests
# children under their parent when the runs are sorted by time, so they are sorted by name) and shows them all.
SHARES_KEY = "grrr-shares"
SHARES_TAG = "mlflow.sharedViewState." + SHARES_KEY
SHARES_CHARTS = TRANSITION_HEADLINE
TRANSITIONS_FILTER = "tags.`grrr.kind` = 'transition'"
_SECTION = "grrr-model-metrics"  # the uuid of MLflow's own "Model metrics" section (metrics without a '/')


def shares_view_state() -> str:
    """The shared view of :func:`shares_page`: the transitions by name, their headline metrics' bar charts first
    (in :data:`SHARES_CHARTS`' order, every run drawn) and MLflow's own charts of their other metrics after."""
    charts = [
        {
            "uuid": f"grrr-{m}",
            "type": "BAR",
            "runsCountToCompare": 500,  # MLflow's default draws the first 10 runs only
            "metricSectionId": _SECTION,
            "deleted": False,
            "isGenerated": True,
            "metricKey": m,
            "displayName": m,
        }
        for m in SHARES_CHARTS
    ]
    section = {"uuid": _SECTION, "name": "Model metrics", "display": True, "isReordered": True}
    return json.dumps(
        {
            "searchFilter": TRANSITIONS_FILTER,
            "orderByKey": "tags.`mlflow.runName`",
            "orderByAsc": True,
            "runsHiddenMode": "SHOW_ALL",
            "compareRunCharts": charts,
            "compareRunSections": [{**section, "deleted": False, "isGenerated": True}],
            "isAccordionReordered": True,  # MLflow keeps these sections and charts in order and appends the others
            "hideEmptyCharts": True,
        },
        separators=(",", ":"),
    )


def views() -> dict[str, str]:
    """Every shared view by its experiment tag: what mlflow_client sets on the experiment."""
    return {VIEW_TAG: view_state(), SHARES_TAG: shares_view_state()}


# MLflow 3.17's UI picks its pages from its own GenAI / Model training switch (kept per browser in localStorage,
# GenAI until changed), never from the experiment's kind (mlflow.experimentKind is read only while that switch is
# off, and it is always on): GenAI opens an experiment on the traces overview. This parameter sets the switch
# for the page it opens, so every address the tool prints carries it.
TRAINING = "workflowType=machine_learning"


LOCAL_UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default


def ui_of(uri: str) -> tuple[str, bool]:
    """The UI that shows tracking URI ``uri``, and whether a server serves it: the server itself for an http(s) URI,
    else the local UI that `mlflow ui --backend-store-uri URI` starts."""
    served = uri.startswith(("http://", "https://"))
    return (uri.rstrip("/") if served else LOCAL_UI), served


def _experiment_runs(ui: str, experiment_id: str, view_key: str) -> str:
    return f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs?{TRAINING}&viewStateShareKey={view_key}"


def runs_page(ui: str, experiment_id: str) -> str:
    """The address of the experiment in MLflow's UI at ``ui`` that opens on its runs table in Model training mode,
    with the tool's view (:func:`view_state`: headline columns, oldest run first)."""
    return _experiment_runs(ui, experiment_id, VIEW_KEY)


def shares_page(ui: str, experiment_id: str) -> str:
    """The address of the transitions' headline metrics as bar charts, one bar per transition (the runs page in
    chart mode with :func:`shares_view_state`)."""
    return _experiment_runs(ui, experiment_id, SHARES_KEY) + "&compareRunsMode=CHART"


def run_page(ui: str, experiment_id: str, run_id: str) -> str:
    """The address of one run's page in Model training mode."""
    return f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}?{TRAINING}"


def compare_page(ui: str, experiment_id: str, run_ids: Iterable[str]) -> str:
    """The address of MLflow's Compare page of ``run_ids`` (the UI's route /compare-runs, as its
    Routes.getCompareRunPageRoute builds it), in Model training mode."""
    runs = json.dumps(list(run_ids), separators=(",", ":"))
    return f'{ui.rstrip("/")}/#/compare-runs?runs={runs}&experiments=["{experiment_id}"]&{TRAINING}'

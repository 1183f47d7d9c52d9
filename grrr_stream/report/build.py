"""WORKDIR/report/index.html: the sweep's results in one self-contained page (tables, claims, figures,
provenance), rendered with Jinja2 from the sweep report's typed rows (:class:`grrr_stream.sweep.rows.Report`).

One file to mail or attach: figures are data: URIs, the style sheet is inline, there is no script and no
address outside the page except links to MLflow's UI. Tables and figures appear only when the sweep has
their results, so a page written mid-sweep shows what is done.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Optional

from ..files import atomic_write_text
from ..stats.claims_sets import method_group, sentences
from ..stats.run import COMPARISONS_TABLE
from ..store.transition_store import TransitionStore
from ..sweep.kinds import TABLES, decompose
from ..sweep.kinds import claims as claims_kind
from ..sweep.rows import UNITS_TABLE, read_rows
from ..tracking.mlflow_client import resolve_uri
from ..tracking.mlflow_view import run_page, runs_page, shares_page, ui_of
from . import figures as figs
from . import tables as tbl
from .channels import channel_tables
from .paper_claims import PAPER
from .verdict import verdicts

PAGE = "index.html"
# the report folder's files that sections show already; any other CSV there is an extra table
KNOWN_CSV = {UNITS_TABLE, *TABLES}  # named by the sweep's kinds (sweep/kinds), which write them
CONFIG_FILE = "config.json"  # the sweep's config, for `grrr-stream report WORKDIR`


def write_html(
    plan, report, records: dict, *, tracking=None, run_id: Optional[str] = None, runs: Optional[list[dict]] = None
) -> Path:
    """Write WORKDIR/report/index.html (and the sweep's config beside it) from ``report``; ``tracking``,
    ``run_id``, ``runs``: the sweep's MLflow settings, its run and the runs tagged with the sweep, for the
    provenance. Returns the page's path (also appended to ``report.files``)."""
    folder = report.folder
    folder.mkdir(parents=True, exist_ok=True)
    config = plan.config.model_dump(mode="json")
    atomic_write_text(folder / CONFIG_FILE, json.dumps(config, indent=2, sort_keys=True) + "\n")
    sft = list(plan.config.claims.sft_methods)
    method_of = methods_of(plan)
    shown = figs.figures(report, decompose.matrix_rows(report), folder / "figures")
    extras = _extra_tables(folder)
    loose = figs.loose_images(folder, {f.path.resolve() for f in shown})
    context = {
        "name": plan.config.name,
        "workdir": str(plan.workdir),
        "written": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "counts": _counts(report.units),
        "paper": PAPER,
        "verdicts": verdict_box(plan, report),
        "verdict_how": {"paper_side": plan.config.claims.paper_side, "family": plan.config.claims.family},
        "paper_tables": tbl.paper_tables(report, method_of, sft) + tbl.comparison_table(report),
        "other_tables": channel_tables(report) + tbl.kind_tables(report) + tbl.other_tables(report, method_of, sft),
        "claims": _claims(report, plan),
        "key_figures": [f for f in shown if f.id in figs.KEY],
        "figures": [f for f in shown if f.id not in figs.KEY],
        "extra_tables": extras,
        "extra_figures": loose,
        "csvs": sorted(p.name for p in folder.glob("*.csv")),
        "provenance": _provenance(plan, report, records, config, tracking, run_id, runs or []),
    }
    page = folder / PAGE
    atomic_write_text(page, _environment().get_template("report.html.j2").render(**context))
    written = [f.path for f in shown if f.path.parent == folder / "figures"] + [folder / CONFIG_FILE, page]
    report.files += [p for p in written if p not in report.files]
    return page


def _environment():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("grrr_stream.report", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    return env


def _counts(units: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for u in units:
        out[u["state"]] = out.get(u["state"], 0) + 1
    return out


def steps_of(plan) -> set[str]:
    """The planned transitions that are one training step each: W0 is the model the child was trained from."""
    return {tid for tid, tr in plan.transitions.items() if plan.models[tr.child].parent == tr.parent}


def chains_of(plan) -> dict[str, str]:
    """Transition id → its chain: the base model it descends from (two config chains whose bases are one checkpoint,
    the same source and revision, are one chain). Transitions of one chain share that base's evaluation, frame and
    much of their data; the verdict box counts each chain once."""
    first: dict[tuple, str] = {}
    out = {}
    for tid, tr in plan.transitions.items():
        base = plan.models[tr.child].base
        m = plan.models[base]
        out[tid] = first.setdefault((m.source, m.revision), base)
    return out


def methods_of(plan):
    """A report row → its transition's post-training method (a suite's row names it 'id [suite]')."""

    def method_of(row: dict) -> Optional[str]:
        tr = plan.transitions.get(str(row.get("transition", "")).split(" [")[0])
        return tr.method if tr is not None else row.get("method")

    return method_of


def verdict_box(plan, report) -> list:
    """The verdict box's rows: the paper's headline claims against this sweep's main evaluation suite."""
    sft = list(plan.config.claims.sft_methods)
    method_of = methods_of(plan)

    summaries = claims_kind.summaries(report)
    suite = summaries.get("") or next(iter(summaries.values()), {"claims": []})
    return verdicts(
        suite["claims"],
        report.rows(decompose.TABLE),
        report.rows(COMPARISONS_TABLE),
        group_of=lambda r: method_group(method_of(r), sft),
        steps=steps_of(plan),
        level=plan.config.claims.level,
        differences=suite.get("differences", []),
        informative=suite.get("informative", []),
        left_out=suite.get("left_out", []),
        names={tid: f"{tr.parent} → {tr.child}" for tid, tr in plan.transitions.items()},
        chains=chains_of(plan),
        paper_side=plan.config.claims.paper_side,
        adjust=plan.config.claims.family,
    )


def _claims(report, plan) -> list[dict]:
    """Per evaluation suite: the claims as the paper's sentences (each names the set it is over), the
    informative count and the settings the intervals come from."""
    c = plan.config.claims
    out = []
    for suite, s in claims_kind.summaries(report).items():
        notes = sorted({r["resampling"] for r in s["claims"] if r["resampling"] != "joint"})
        out.append(
            {
                "suite": suite or "main",
                "selector": s.get("selector") or "",
                "counts": s["counts"],
                "sentences": sentences(s["claims"]),
                "notes": notes,
                "settings": f"{c.level:.0%} intervals from {c.resamples} bootstrap resamples of the problems, "
                f"drawn jointly across transitions, the transitions fixed (seed {c.seed}); sets hold "
                f"the evaluated training steps, a multi-step transition (base → RL after an SFT) "
                f"only its own group; informative: full − base ≥ "
                f"{c.informative_points:g} point; within: {c.within_points:g} points",
            }
        )
    return out


def _extra_tables(folder: Path) -> list:
    """Every CSV in the report folder that no section shows: the hook for analyses this page does not know
    yet (the residual-channel analysis writes its table there and it appears here as it is)."""
    out = []
    for i, p in enumerate(sorted(folder.glob("*.csv"))):
        if p.name not in KNOWN_CSV:
            out += tbl.plain_table(
                f"extra-{i}", p.stem.replace("_", " "), f"{p.name} (found in the report folder)", read_rows(p), p.name
            )
    return out


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for dist in (
        "grrr-stream",
        "torch",
        "numpy",
        "zarr",
        "mlflow",
        "dask",
        "scipy",
        "matplotlib",
        "jinja2",
        "vllm",
        "math-verify",
    ):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def _provenance(plan, report, records: dict, config: dict, tracking, run_id, runs: list[dict]) -> dict:
    import yaml

    units = []
    for i, (u, row) in enumerate(zip(plan.units, report.units)):
        rec = records.get(u.id) or {}
        started = rec.get("started")
        units.append(
            {
                "row": i,
                "unit": u.id,
                "kind": u.kind,
                "state": row["state"],
                "seconds": row["seconds"],
                "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if started else "",
                "key": u.key,
                "out": u.out,
                "error": row["error"],
            }
        )
    return {
        "config_yaml": yaml.safe_dump(config, sort_keys=False),
        "plan_key": plan.key,
        "versions": _versions(),
        "units": units,
        "settings": _settings_hashes(report),
        "mlflow": mlflow_links(tracking, run_id, runs),
    }


def _settings_hashes(report) -> list[dict]:
    """Each decomposed transition's store and the identity its manifest records (fingerprints, settings hash)."""
    out = []
    for r in report.rows(decompose.TABLE):
        ident = (TransitionStore.read_manifest(Path(str(r["store"]))) or {}).get("identity", {})
        out.append({"transition": r["transition"], "store": r["store"], **{k: ident[k] for k in sorted(ident)}})
    return out


def mlflow_links(tracking, run_id: Optional[str], runs: list[dict]) -> Optional[dict]:
    """The sweep's MLflow run, the runs tagged with the sweep, and their UI addresses: the server's for an
    http(s) tracking URI, else the local UI that `mlflow ui --backend-store-uri URI` serves."""
    if tracking is None or not tracking.enabled:
        return None

    uri = resolve_uri(tracking.uri)
    ui, served = ui_of(uri)
    exp = next((r["experiment_id"] for r in runs if r.get("experiment_id")), None)
    run_id = run_id or next((r["run_id"] for r in runs if r.get("kind") == "sweep"), None)
    # the tracking owner's addresses: they carry the query that opens MLflow's UI in its training mode
    page = runs_page(ui, exp) if exp else ""
    link = (lambda rid: run_page(ui, exp, rid)) if exp else (lambda rid: "")
    return {
        "uri": uri,
        "experiment": tracking.experiment,
        "ui": ui,
        "served": served,
        "run_id": run_id or "",
        "experiment_link": page,
        "shares_link": shares_page(ui, exp) if exp else "",
        "run_link": link(run_id) if run_id else "",
        "runs": [{**r, "link": link(r["run_id"])} for r in runs],
        "start_ui": "" if served else f"mlflow ui --backend-store-uri {uri}",
    }

"""Imports at the top of a module, unless a reason is written beside it: an import of ours inside a function
(parsed with ast, relative or absolute) is kept only for a measured import cost (the module it imports pulls torch
or another heavy library into a module without it) or a real cycle, and each such import is listed in ALLOWED with
its reason. A listed import that is gone is removed from the list. And the command line starts without the heavy
libraries: ``import grrr_stream.cli.entry`` and ``--help`` load none of HEAVY."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.common import package_modules

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "grrr_stream"

# what the command line must start without (none of them is loaded by `import grrr_stream.cli.entry` on main today;
# numpy, pydantic and yaml are: the settings need them)
HEAVY = (
    "torch",
    "vllm",
    "mlflow",
    "zarr",
    "dask",
    "distributed",
    "transformers",
    "safetensors",
    "scipy",
    "matplotlib",
    "huggingface_hub",
    "math_verify",
    "xarray",
    "pandas",
    "jinja2",
    "tqdm",
)

CYCLE_REPORT = (
    "cycle: report/__init__.py imports report.build, which imports grrr_stream.sweep at top, whose __init__ "
    "imports sweep.run"
)
# (importing module, imported module + "." + name, both below grrr_stream) → why it is imported inside a function.
# "heavy: X pulls L": the importing module does not load L at import time (measured: python -X importtime, and
# sys.modules after importing each module alone) and X does; "cycle: ...": importing at the top fails at import time.
ALLOWED = {
    ("channels.preflight", "channels.validate.preflight"): "heavy: channels.validate pulls numpy and torch (~1 s)",
    (
        "channels.transition_stats",
        "channels.enrichment.store_energies",
    ): "heavy: channels.enrichment pulls torch (~1 s)",
    ("channels.transition_stats", "channels.layers.layer_shares"): "heavy: channels.layers pulls torch (~1 s)",
    (
        "channels.transition_stats",
        "store.transition_store.StoredTransition",
    ): "heavy: store.transition_store pulls torch (~1 s)",
    (
        "channels.transition_stats",
        "geometry.channel_energy.COMPONENTS",
    ): "heavy: geometry.channel_energy pulls torch (~1 s)",
    ("channels.transition_stats", "channels.enrichment.enrichment"): "heavy: channels.enrichment pulls torch (~1 s)",
    ("channels.transition_stats", "channels.enrichment.groups_of"): "heavy: channels.enrichment pulls torch (~1 s)",
    ("cli.channel_stats", "channels.enrichment.load_channel_set"): "heavy: channels.enrichment pulls torch (~1 s)",
    ("cli.channels", "sweep.channels_forecast.FORECAST_WARN_S"): "heavy: sweep.channels_forecast pulls torch (~1 s)",
    ("cli.channels", "channels.analysis.CHANNELS_FILE"): "heavy: channels.analysis pulls torch (~1 s)",
    ("cli.channels", "channels.analysis.run_channels"): "heavy: channels.analysis pulls torch (~1 s)",
    ("cli.channels", "sweep.channels_forecast.forecast_channels"): "heavy: sweep.channels_forecast pulls torch (~1 s)",
    ("cli.printing", "sweep.forecast.print_forecast"): "heavy: sweep.forecast pulls torch (~1 s)",
    ("cli.printing", "sweep.forecast.print_other_devices"): "heavy: sweep.forecast pulls torch (~1 s)",
    ("cli.printing", "sweep.kinds.evaluate"): "heavy: sweep.kinds.evaluate pulls torch (~1 s)",
    ("cli.printing", "stats.run.COMPARISONS_TABLE"): "heavy: stats.run pulls torch (~1 s)",
    ("cli.printing", "sweep.kinds.decompose"): "heavy: sweep.kinds.decompose pulls torch (~1 s)",
    ("cli.printing", "sweep.kinds.TRANSITION_COLUMNS"): "heavy: sweep.kinds pulls torch (~1 s)",
    ("cli.printing", "sweep.kinds.evaluate.rows.REPORT_FILES"): "heavy: sweep.kinds.evaluate.rows pulls torch (~1 s)",
    ("cli.printing", "sweep.kinds.channel_groups.sft_rl_text"): "heavy: sweep.kinds.channel_groups pulls torch (~1 s)",
    ("cli.sweep", "sweep.config.load_sweep_config"): "heavy: sweep.config pulls torch (~1 s)",
    ("cli.sweep", "sweep.math_subset.with_math_subset"): "heavy: sweep.math_subset pulls torch (~1 s)",
    ("cli.sweep", "sweep.plan_sweep"): "heavy: sweep pulls torch (~1 s)",
    ("cli.sweep", "sweep.run_sweep"): "heavy: sweep pulls torch (~1 s)",
    ("cli.sweep", "sweep.dry_run.dry_run_sweep"): "heavy: sweep.dry_run pulls torch (~1 s)",
    ("cli.sweep", "sweep.dry_run.forecast_device"): "heavy: sweep.dry_run pulls torch (~1 s)",
    ("cli.sweep", "sweep.workdir.Workdir"): "heavy: sweep.workdir pulls torch (~1 s)",
    ("cli.sweep", "sweep.Records"): "heavy: sweep pulls torch (~1 s)",
    ("cli.sweep", "sweep.sweep_status"): "heavy: sweep pulls torch (~1 s)",
    ("cli.sweep", "sweep.rewrite.rewrite_report"): "heavy: sweep.rewrite pulls torch (~1 s)",
    ("cli.transition", "decompose.run.run_transition"): "heavy: decompose.run pulls torch (~1 s)",
    ("cli.transition", "stats.run.run_stats"): "heavy: stats.run pulls torch (~1 s)",
    ("cli.transition", "stats.run.run_comparisons"): "heavy: stats.run pulls torch (~1 s)",
    ("cli.transition", "stats.run.run_bands"): "heavy: stats.run pulls torch (~1 s)",
    ("cli.transition", "runtime.device.resolve_device"): "heavy: runtime.device pulls torch (~1 s)",
    ("cli.transition", "variants.run.run_variants"): "heavy: variants.run pulls torch (~1 s)",
    ("cli.transition", "evaluation.pipeline.EvaluationRequest"): "heavy: evaluation.pipeline pulls torch (~1 s)",
    ("cli.transition", "evaluation.pipeline.run_evaluation"): "heavy: evaluation.pipeline pulls torch (~1 s)",
    ("evaluation.benchmarks", "files.check_component"): "heavy: files pulls numpy (~50 ms)",
    ("evaluation.engine", "checkpoints.writer.write_checkpoint"): "heavy: checkpoints.writer pulls torch (~1 s)",
    ("evaluation.engine_loop", "variants.fidelity.store_warning"): "heavy: variants.fidelity pulls torch (~1 s)",
    ("evaluation.engine_loop", "variants.builder.write_variant"): "heavy: variants.builder pulls torch (~1 s)",
    (
        "forecast.calibrate",
        "channels.enrichment.null_shares",
    ): "heavy: channels.enrichment pulls numpy and torch (~1 s)",
    ("forecast.adaptive_shares", "stats.order.problem_order"): "heavy: stats.order pulls numpy (~50 ms)",
    ("forecast.adaptive_shares", "stats.order.round_ends"): "heavy: stats.order pulls numpy (~50 ms)",
    ("forecast.shapes", "checkpoints.reader.Checkpoint"): "heavy: checkpoints.reader pulls numpy and torch (~1 s)",
    ("forecast.shapes", "decompose.plan.default_selection"): "heavy: decompose.plan pulls numpy and torch (~1 s)",
    ("forecast.work", "decompose.streaming.LANE_BUFFERS"): "heavy: decompose.streaming pulls numpy and torch (~1 s)",
    ("forecast.work", "decompose.streaming.lanes_for"): "heavy: decompose.streaming pulls numpy and torch (~1 s)",
    (
        "geometry.analyses.angles",
        "geometry.analyses.davidson.principal_angles_of_w1",
    ): "heavy: geometry.analyses.davidson pulls torch (~1 s)",
    (
        "geometry.analyses.angles",
        "geometry.analyses.davidson.principal_angles_in_frame",
    ): "heavy: geometry.analyses.davidson pulls torch (~1 s)",
    (
        "geometry.analyses.channels",
        "geometry.channel_energy.residual_axis",
    ): "heavy: geometry.channel_energy pulls torch (~1 s)",
    (
        "geometry.analyses.channels",
        "geometry.channel_energy.channel_energies",
    ): "heavy: geometry.channel_energy pulls torch (~1 s)",
    (
        "geometry.analyses.degenerate_share",
        "geometry.degenerate.degenerate_clusters",
    ): "heavy: geometry.degenerate pulls torch (~1 s)",
    (
        "store.xarray_view",
        "store.transition_store.StoredTransition",
    ): "heavy: store.transition_store pulls numpy and torch (~1 s)",
    ("sweep.run", "report.write_html"): CYCLE_REPORT,
    ("sweep.run", "report.build.verdict_box"): CYCLE_REPORT,
    ("tracking.model_runs", "evaluation.engine"): "layer: the one upward import (tests/test_layers.py EXCEPTIONS), "
    "asked only when an evaluation run is logged",
    ("tracking.runs", "store.transition_store.StoredTransition"): "heavy: store.transition_store pulls torch (~1 s)",
}
REASONS = ("heavy: ", "cycle: ", "layer: ")


def modules() -> dict[str, Path]:
    return package_modules(PKG)


def function_imports(module: str, path: Path) -> list[tuple[int, str]]:
    """(line, "imported.module.name") for each import of ours inside a function (a method, a nested function)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    package = [p for p in package if p]
    out = []
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    for fn in ast.walk(ast.parse(path.read_text())):
        if not isinstance(fn, functions):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    target = ".".join(
                        package[: len(package) - (node.level - 1)] + ([node.module] if node.module else [])
                    )
                elif node.module == "grrr_stream" or (node.module or "").startswith("grrr_stream."):
                    target = node.module[len("grrr_stream.") :] if node.module != "grrr_stream" else ""
                else:
                    continue
                out += [(node.lineno, f"{target}.{a.name}" if target else a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                out += [
                    (node.lineno, a.name[len("grrr_stream.") :])
                    for a in node.names
                    if a.name.startswith("grrr_stream.")
                ]
    return sorted(set(out))  # a function nested in a function is walked twice


def found() -> dict[tuple[str, str], list[str]]:
    """(module, imported name) → the places ("grrr_stream/path:line") it is imported inside a function."""
    out: dict[tuple[str, str], list[str]] = {}
    for module, path in modules().items():
        for line, name in function_imports(module, path):
            out.setdefault((module, name), []).append(f"grrr_stream/{path.relative_to(PKG)}:{line}")
    return out


def test_every_import_inside_a_function_has_a_written_reason():
    missing = [
        f"{where[0]}: {m} imports {name}" for (m, name), where in sorted(found().items()) if (m, name) not in ALLOWED
    ]
    assert not missing, (
        "imports of ours inside functions: move them to the top of the module, or (a measured import cost, a real "
        "cycle) list them in ALLOWED of tests/test_imports.py with the reason:\n" + "\n".join(missing)
    )


def test_allowed_lists_only_imports_that_exist():
    """An entry whose import moved to the top (or went away) is removed, not kept as a loophole."""
    stale = sorted(set(ALLOWED) - set(found()))
    assert not stale, f"ALLOWED entries no import uses any more: {stale}"


def test_every_reason_is_written():
    bad = {k: v for k, v in ALLOWED.items() if not v.startswith(REASONS) or len(v) < 20}
    assert not bad, bad


def test_the_checker_sees_imports_inside_functions(tmp_path):
    """Planted: relative and absolute imports in a function, a method and a nested function; left alone: module-level
    imports of ours and a third-party import inside a function."""
    f = tmp_path / "x.py"
    f.write_text(
        "from .plan import Plan\nimport grrr_stream.errors\n"
        "def f():\n    import torch\n    from ..stats import claims\n"
        "    def g():\n        from grrr_stream.store.manifest import label\n"
        "class C:\n    def m(self):\n        import grrr_stream.files\n        from . import units as u\n"
    )
    assert function_imports("sweep.x", f) == [
        (5, "stats.claims"),
        (7, "store.manifest.label"),
        (10, "files"),
        (11, "sweep.units"),
    ]


def test_the_command_line_starts_without_heavy_libraries():
    """`import grrr_stream.cli.entry` and `grrr-stream --help` (every subcommand's parser is built) load none of HEAVY:
    the commands import what they run when they run it."""
    code = (
        "import contextlib, io, sys\n"
        "import grrr_stream.cli.entry as entry\n"
        f"heavy = {HEAVY!r}\n"
        "at_import = sorted(m for m in heavy if m in sys.modules)\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    entry.main(['--help'])\n"
        "print(at_import, sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] []", out.stdout

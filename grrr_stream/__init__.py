"""grrr_stream: where did post-training change a large language model?

Streams two safetensors checkpoints matrix by matrix, writes every update
ΔW = W1 − W0 in the singular frame of W0 (diagonal / off-diagonal / null parts)
into a chunked Zarr store, and tracks the results in MLflow.

The names below are the public API (docs/api.md, one example each): scripts import them from
``grrr_stream`` itself, so the modules behind them may move without breaking a script. The
packages, one per layer (docs/ARCHITECTURE.md): checkpoints, geometry, store, decompose, stats,
variants, evaluation, channels, sweep, report, tracking, runtime, forecast, fixtures, cli.
"""

__version__ = "0.1.0"

# public name → (module below grrr_stream, its name there). Imported on first use, so that
# `import grrr_stream` stays instant (no torch, zarr, dask or xarray until a name is used).
_LAZY = {
    # one transition
    "load_config": ("config", "load_config"),
    "DecomposeConfig": ("config", "DecomposeConfig"),
    "TrackingConfig": ("config", "TrackingConfig"),
    "run_transition": ("decompose.run", "run_transition"),
    "decompose_matrix": ("geometry.kernel", "decompose_matrix"),
    "MatrixSettings": ("geometry.kernel", "MatrixSettings"),
    "analysis_options": ("geometry.analyses", "options"),
    # its store
    "open_store": ("store.xarray_view", "open_store"),
    "read_metrics": ("store.xarray_view", "read_metrics"),
    "metrics_dataset": ("store.xarray_view", "metrics_dataset"),
    "name_dimensions": ("store.zarr_arrays", "name_dimensions"),
    "StoredTransition": ("store.transition_store", "StoredTransition"),
    # statistics over stores
    "run_stats": ("stats.run", "run_stats"),
    "run_bands": ("stats.run", "run_bands"),
    "run_comparisons": ("stats.run", "run_comparisons"),
    "summary_tables": ("stats.summaries", "summary_tables"),
    "compare": ("stats.comparisons", "compare"),
    # variants and their evaluation
    "run_variants": ("variants.run", "run_variants"),
    "parse_variants": ("variants.spec", "parse_variants"),
    "VariantBuilder": ("variants.builder", "VariantBuilder"),
    "EvaluationOptions": ("evaluation.settings", "EvaluationOptions"),
    "EvaluationRequest": ("evaluation.pipeline", "EvaluationRequest"),
    "run_evaluation": ("evaluation.pipeline", "run_evaluation"),
    # sweeps
    "load_sweep_config": ("sweep.config", "load_sweep_config"),
    "plan_sweep": ("sweep.plan", "plan_sweep"),
    "run_sweep": ("sweep.run", "run_sweep"),
    "sweep_status": ("sweep.status", "sweep_status"),
    "dry_run_sweep": ("sweep.dry_run", "dry_run_sweep"),
    "with_math_subset": ("sweep.math_subset", "with_math_subset"),
    "rewrite_report": ("sweep.rewrite", "rewrite_report"),
    # residual-stream channels
    "run_channels": ("channels.analysis", "run_channels"),
    "channels_preflight": ("channels.preflight", "channels_preflight"),
    "forecast_channels": ("sweep.channels_forecast", "forecast_channels"),
    "store_energies": ("channels.enrichment", "store_energies"),
    "load_channel_set": ("channels.enrichment", "load_channel_set"),
    "channel_enrichment": ("channels.enrichment", "enrichment"),
}
__all__ = list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value  # once imported, a plain attribute
        return value
    raise AttributeError(f"module 'grrr_stream' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)

"""grrr_stream: where did post-training change a large language model?

Streams two safetensors checkpoints matrix by matrix, writes every update
ΔW = W1 − W0 in the singular frame of W0 (diagonal / off-diagonal / null parts)
into a chunked Zarr store, and tracks the results in MLflow.

The public entry point for a single transition is :func:`grrr_stream.decompose.run_transition`;
:func:`open_store` opens its store as an xarray DataTree, :func:`read_metrics` gives its table.
"""

__version__ = "0.1.0"

# Imported on first use, so that `import grrr_stream` stays instant (no torch, zarr or xarray).
_LAZY = {"open_store": "xarray_view", "read_metrics": "xarray_view", "metrics_dataset": "xarray_view",
         "name_dimensions": "store"}
__all__ = list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'grrr_stream' has no attribute {name!r}")

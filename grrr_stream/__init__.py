"""grrr_stream: where did post-training change a large language model?

Streams two safetensors checkpoints matrix by matrix, writes every update
ΔW = W1 − W0 in the singular frame of W0 (diagonal / off-diagonal / null parts)
into a chunked Zarr store, and tracks the results in MLflow.

The public entry point for a single transition is :func:`grrr_stream.decompose.run_transition`.
"""

__version__ = "0.1.0"

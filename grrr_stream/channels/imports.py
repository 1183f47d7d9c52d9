"""Importing transformers for the channels pass without the libraries the pass never uses.

Loading a model through transformers 5 imports, besides torch: scikit-learn (``generation.
candidate_generator``, for assisted generation's ROC curve; it brings pandas and narwhals), SciPy
(``loss.loss_for_object_detection``) and Triton (through ``torch._dynamo``; GPU kernels). All three are
imported only when installed (transformers' ``is_sklearn_available`` / ``is_scipy_available`` and torch's
``has_triton_package`` ask ``importlib``), and none of them takes part in a causal LM's forward on the CPU.
Together they are ~210 MiB of the process's resident memory (measured: 562 → 351 MiB after loading and
running a tiny model), which is most of what set the calibration pass's peak above the decomposition's
(docs/channels.md, Peak RSS). :func:`lean_transformers` marks them as absent (``sys.modules[name] = None``,
which ``importlib`` reads as "not installed") for the rest of the process, imports what the pass uses, and
undoes everything if that import fails (a transformers that needs one of them after all).

Only for a process that runs nothing else: ``grrr-stream channels`` (and tools/bench_channels.py's
calibration child). A sweep runs its channel units in its own process, next to units that may need these
libraries, so it imports transformers as it is. ``GRRR_STREAM_LEAN_IMPORTS=0`` turns it off.
"""

from __future__ import annotations

import os
import sys

SKIPPED = ("sklearn", "scipy", "triton")


def lean_transformers() -> bool:
    """Import transformers and accelerate with :data:`SKIPPED` marked absent; True if it was done (False:
    turned off, transformers already imported, or the lean import failed and was undone)."""
    if os.environ.get("GRRR_STREAM_LEAN_IMPORTS", "1") == "0" or "transformers" in sys.modules:
        return False
    blocked = [m for m in SKIPPED if m not in sys.modules]
    for m in blocked:
        sys.modules[m] = None  # type: ignore[assignment]
    try:
        import accelerate  # noqa: F401
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # noqa: F401
        from transformers.models.auto import auto_factory, modeling_auto  # noqa: F401 - the lazy loading chain
    except (ImportError, RuntimeError):
        for m in blocked:
            if m in sys.modules and sys.modules[m] is None:
                del sys.modules[m]
        for name in [n for n in sys.modules if n.split(".")[0] in ("transformers", "accelerate")]:
            del sys.modules[name]
        return False
    del transformers
    return True

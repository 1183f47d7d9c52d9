"""One transition's plan: pair and check every decomposed matrix of the two checkpoints before any
heavy work, and refuse what cannot be decomposed (all problems at once): mismatched tensors, a
family's pattern that leaves decoder weights out, quantized experts, a matrix too large for memory."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from ..checkpoints.arch import MatrixName, default_modules, pattern_for, select_matrices, split_fused
from ..checkpoints.reader import Checkpoint
from ..config import DEFAULT_MODULES, DecomposeConfig
from ..dtypes import ITEMSIZE
from ..errors import ConfigError, TensorMismatchError


@dataclass(frozen=True)
class TransitionPlan:
    """One transition's checkpoints and the matrices paired and checked in them (a sweep's units are
    :class:`grrr_stream.sweep.Plan`)."""

    base: Checkpoint
    post: Checkpoint
    matrices: list[MatrixName]


def plan_transition(base: Checkpoint, post: Checkpoint, cfg: DecomposeConfig) -> TransitionPlan:
    """Pair and validate every decomposed tensor before any heavy work; all problems at once."""
    if base.model_type and post.model_type and base.model_type != post.model_type:
        raise TensorMismatchError(
            f"base is a '{base.model_type}' model ({base.folder}) but post is '{post.model_type}' ({post.folder}); "
            "a transition needs two checkpoints of the same architecture"
        )
    model_type = base.model_type or post.model_type
    pattern = pattern_for(model_type, cfg.module_pattern)
    _refuse_quantized_experts(base)
    modules = default_modules(model_type, cfg.modules, DEFAULT_MODULES)
    in_base = _selected_matrices(base, pattern, modules, cfg.split_fused)
    in_post = {m.name for m in _selected_matrices(post, pattern, modules, cfg.split_fused)}
    if not in_base and not in_post:
        raise TensorMismatchError(
            f"no tensor of {base.folder} matches the decomposition pattern for modules {list(modules)}; "
            f"pattern: {pattern}. Pass module_pattern (a regex with groups 'layer' and 'module') for this layout."
        )
    if cfg.module_pattern is None and tuple(cfg.modules) == DEFAULT_MODULES:  # the family's own selection
        _refuse_partial(base, in_base, model_type, pattern)
    problems: list[str] = []
    for name in sorted(in_post - {m.name for m in in_base}):
        problems.append(f"{name}: in post ({post.folder}) but not in base ({base.folder})")
    for m in in_base:
        b = base.tensors[m.source]
        p = post.tensors.get(m.source)
        if p is None or m.name not in in_post:
            problems.append(f"{m.name}: in base ({base.folder}) but not in post ({post.folder})")
            continue
        if b.shape != p.shape:
            problems.append(f"{m.source}: shape {list(b.shape)} in base but {list(p.shape)} in post")
        shape = base.matrix_shape(m)
        if len(shape) != 2:
            problems.append(
                f"{m.name}: expected a 2-D matrix (or a 3-D stack of expert matrices), got shape {list(b.shape)}"
            )
        elif 0 in shape:
            problems.append(
                f"{m.name}: shape {list(shape)} has a zero-size dimension; there is nothing to "
                "decompose (a broken export?)"
            )
        for side, info in (("base", b), ("post", p)):
            if not info.is_floating:
                problems.append(f"{m.name}: dtype {info.dtype} in {side} is not floating point")
    problems += _memory_problems(base, in_base, cfg.compute_dtype)
    if problems:
        shown = problems[:25]
        more = f"\n  ... and {len(problems) - 25} more" if len(problems) > 25 else ""
        raise TensorMismatchError(
            f"the two checkpoints do not pair up ({len(problems)} problem(s)):\n  " + "\n  ".join(shown) + more
        )
    return TransitionPlan(base=base, post=post, matrices=in_base)


def default_selection(ckpt: Checkpoint) -> list[MatrixName]:
    """The matrices a decomposition with the default settings selects in ``ckpt`` (its family's pattern and
    modules; fused tensors as stored, the default), e.g. for the sweep's forecast; raises ConfigError for an
    unknown family."""
    pattern = pattern_for(ckpt.model_type, None)
    return _selected_matrices(
        ckpt, pattern, default_modules(ckpt.model_type, DEFAULT_MODULES, DEFAULT_MODULES), split=False
    )


def _selected_matrices(ckpt: Checkpoint, pattern: str, modules, split: bool) -> list[MatrixName]:
    shapes = {n: i.shape for n, i in ckpt.tensors.items()}
    found = select_matrices(ckpt.tensors, pattern, modules, shapes=shapes)
    return split_fused(found, ckpt.config, shapes) if split else found


# decoder-layer weights a family's built-in selection must account for (biases and norms aside)
_DECODER_WEIGHT_RE = re.compile(
    r"^(?:model|language_model\.model|model\.language_model)\.layers\.\d+\."
    r"(?:self_attn|mlp|block_sparse_moe)\.(?!.*bias$)"
)


def _refuse_partial(ckpt: Checkpoint, selected: list[MatrixName], model_type: Optional[str], pattern: str) -> None:
    """A family's built-in pattern must take every matrix of the decoder's attention and MLP blocks: a weight
    it leaves out means the checkpoint is not laid out as its model_type says (a wrong model_type, a newer
    variant of the family), and decomposing the rest would be a partial result without notice."""
    taken = {m.source for m in selected}
    left = sorted(
        n for n, i in ckpt.tensors.items() if len(i.shape) >= 2 and n not in taken and _DECODER_WEIGHT_RE.match(n)
    )
    if left:
        raise ConfigError(
            f"{ckpt.folder}: the built-in pattern of model_type '{model_type}' leaves out {len(left)} decoder "
            f"weight(s), e.g. {', '.join(left[:3])}: the checkpoint is not laid out as that family. Check "
            "config.json's model_type, or pass module_pattern (a regex with named groups (?P<layer>\\d+) and "
            f"(?P<module>...)) and modules for this layout; the built-in pattern was '{pattern}'."
        )


def _refuse_quantized_experts(ckpt: Checkpoint) -> None:
    """gpt-oss ships its experts MXFP4-quantized (``*_blocks`` / ``*_scales`` uint8 tensors): no float
    matrix to decompose, and skipping them silently would leave out most of the model."""
    packed = [n for n in ckpt.tensors if n.endswith(("_proj_blocks", "_proj_scales"))]
    if packed:
        raise TensorMismatchError(
            f"{ckpt.folder} stores expert weights quantized ({packed[0]}, MXFP4 blocks and scales); dequantize "
            "it first (e.g. load with transformers, Mxfp4Config(dequantize=True), and save_pretrained), then "
            "decompose the bf16/float32 checkpoint"
        )


def _memory_problems(base: Checkpoint, matrices: list[MatrixName], compute_dtype: str) -> list[str]:
    """The largest matrix must fit: its SVD holds about four m×n buffers of the compute dtype at
    once (W0, ΔW, LAPACK's copy, U), refused before any allocation rather than failing mid-run."""
    import psutil

    shapes = [base.matrix_shape(m) for m in matrices if len(base.matrix_shape(m)) == 2]
    if not shapes:
        return []
    m, n = max(shapes, key=lambda s: s[0] * s[1])
    need = 4 * m * n * ITEMSIZE[compute_dtype]
    avail = psutil.virtual_memory().available + psutil.swap_memory().free
    if need > avail:
        return [
            f"the largest matrix ({m}×{n}) needs about {need / 2**30:.1f} GiB in {compute_dtype} for its SVD; "
            f"{avail / 2**30:.1f} GiB of memory is available. Free memory, or use a machine with more"
        ]
    return []

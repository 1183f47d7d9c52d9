"""The rest source of a composed variant: which checkpoint supplies the tensors that are not decomposed.

``rest_from: base`` (the default) needs a base with the post model's tensor names and
shapes; ``post`` takes them from the post model (proj then equals full); ``auto`` uses the
base when it can and falls back to the post model, on record.
"""

from __future__ import annotations

from typing import Optional

from ..checkpoints.reader import Checkpoint
from ..errors import ConfigError, TensorMismatchError

REST_FROM = ("base", "post", "auto")

# config.json keys that record how a file was saved, not how the model computes
CONFIG_BOOKKEEPING = frozenset({"torch_dtype", "dtype", "transformers_version", "_name_or_path", "use_cache"})


def config_differences(a: Optional[dict], b: Optional[dict]) -> list[str]:
    """Keys of two config.json dicts whose values differ, bookkeeping keys aside."""
    a, b = a or {}, b or {}
    return sorted(k for k in set(a) | set(b) if k not in CONFIG_BOOKKEEPING and a.get(k) != b.get(k))


def rest_problems(base: Checkpoint, post: Checkpoint) -> list[str]:
    """Why the base cannot supply the tensors of the post model's layout (empty: it can)."""
    problems = []
    for name, info in post.tensors.items():
        b = base.tensors.get(name)
        if b is None:
            problems.append(f"{name}: only in post")
        elif b.shape != info.shape:
            problems.append(f"{name}: {list(b.shape)} in base, {list(info.shape)} in post")
    problems += [f"{name}: only in base" for name in base.tensors if name not in post.tensors]
    return problems


def rest_refusal(problems: list[str], where: str = "") -> str:
    return (
        f"{where}rest_from: base cannot be used: the base and post checkpoints differ in tensor names or "
        "shapes (e.g. added tokens), so the base cannot supply the tensors that are not decomposed. Set "
        "rest_from: post (every non-decomposed tensor from the post model; proj then equals full) or "
        "rest_from: auto (base when possible, else post, recorded). Differences:\n  "
        + "\n  ".join(problems[:20])
        + (f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else "")
    )


def resolve_rest(requested: str, problems: list[str]) -> tuple[str, Optional[str]]:
    """(rest source used, the reason of a fallback or None) for a requested rest_from."""
    if requested not in REST_FROM:
        raise ConfigError(f"rest_from must be one of {', '.join(REST_FROM)}, got {requested!r}")
    if requested == "post" or not problems:
        return ("post" if requested == "post" else "base"), None
    if requested == "base":
        raise TensorMismatchError(rest_refusal(problems))
    return "post", f"auto: base cannot supply the rest ({len(problems)} difference(s), e.g. {problems[0]})"

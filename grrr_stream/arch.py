"""Tensor name → (layer, module) for the supported model families.

Llama, Mistral, Qwen2/2.5, Qwen3 and OLMo2 all name their decoder projections
``model.layers.<i>.self_attn.{q,k,v,o}_proj.weight`` and
``model.layers.<i>.mlp.{gate,up,down}_proj.weight``. Other families (fused qkv,
mixture-of-experts) do not fit that picture and are refused unless the user gives
a pattern, so that a silent partial decomposition cannot happen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Optional

from .errors import ConfigError

STANDARD_PATTERN = (
    r"^model\.layers\.(?P<layer>\d+)\.(?:self_attn|mlp)\."
    r"(?P<module>q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\.weight$"
)

FAMILIES: dict[str, str] = {
    "llama": STANDARD_PATTERN,
    "mistral": STANDARD_PATTERN,
    "qwen2": STANDARD_PATTERN,
    "qwen3": STANDARD_PATTERN,
    "olmo2": STANDARD_PATTERN,
}


@dataclass(frozen=True, order=True)
class MatrixName:
    """A decomposable weight matrix as named in the checkpoint."""

    layer: int
    module: str
    name: str


def pattern_for(model_type: Optional[str], custom: Optional[str]) -> str:
    """The name pattern to use for a checkpoint with ``config.json`` model_type."""
    if custom is not None:
        return custom
    if model_type is None:
        # No config.json: the standard layout is the only sensible guess, and
        # validation later fails loudly if nothing matches.
        return STANDARD_PATTERN
    if model_type in FAMILIES:
        return FAMILIES[model_type]
    raise ConfigError(
        f"model_type '{model_type}' is not a supported family ({', '.join(sorted(FAMILIES))}). "
        "If its projections are stored as separate 2-D weights, pass module_pattern: a regex "
        "with named groups (?P<layer>\\d+) and (?P<module>...), e.g. "
        f"'{STANDARD_PATTERN}'."
    )


def select_matrices(names: Iterable[str], pattern: str, modules: Iterable[str]) -> list[MatrixName]:
    """Names matching ``pattern`` whose module is in ``modules``, ordered by layer then module order."""
    rx = re.compile(pattern)
    order = {m: i for i, m in enumerate(modules)}
    found = []
    for name in names:
        m = rx.match(name)
        if m and m.group("module") in order:
            found.append(MatrixName(int(m.group("layer")), m.group("module"), name))
    found.sort(key=lambda x: (x.layer, order[x.module], x.name))
    return found

"""Tensor name → (layer, module, expert) for the supported model families.

Llama, Mistral, Qwen2/2.5, Qwen3, OLMo 2, OLMo 3, MiMo and Gemma/Gemma2/Gemma3 name their decoder
projections ``model.layers.<i>.self_attn.{q,k,v,o}_proj.weight`` and
``model.layers.<i>.mlp.{gate,up,down}_proj.weight``; Gemma3's multimodal checkpoints
(``model_type: gemma3``) put the same names under ``language_model.model.``. Tied
embeddings change nothing here: embeddings and ``lm_head`` are never decomposed.

MiMo (``model_type: mimo``, XiaomiMiMo's remote code) is a Qwen2 decoder plus multi-token-prediction
layers ``model.mtp_layers.<i>.*`` (a decoder block with its own q..down_proj, ``input_proj`` and norms).
They are left out by name: the standard pattern takes ``model.layers.`` only. They are a draft head
for speculative decoding, not part of the next-token forward the variants are evaluated with (vLLM's
MiMoForCausalLM drops them on load), so composed variants carry them from ``rest_from`` like any
other tensor that is not decomposed.

Other layouts, each a family of its own:

- Phi-3: fused ``self_attn.qkv_proj`` and ``mlp.gate_up_proj``, decomposed as stored (one
  matrix each) unless ``split_fused`` splits them into their logical row blocks
  (:func:`split_fused`), named ``<tensor>[q]``, ``[k]``, ``[v]``, ``[gate]``, ``[up]``.
- Mixture of experts with one 2-D tensor per expert (Qwen3-MoE
  ``mlp.experts.<e>.{gate,up,down}_proj``, Mixtral ``block_sparse_moe.experts.<e>.w1/w2/w3``):
  the pattern's ``expert`` group gives the expert index; the router (``mlp.gate`` /
  ``block_sparse_moe.gate``) is one more matrix without an expert.
- Fused 3-D expert tensors (gpt-oss ``mlp.experts.gate_up_proj`` E×hidden×2I,
  ``mlp.experts.down_proj`` E×I×hidden): any 3-D tensor the pattern matches is E stacked
  matrices; slice e (``tensor[e]`` along the first axis, exactly as stored, not transposed)
  is the matrix of expert e, keyed ``<tensor>[<e>]``.

Anything else is refused unless the user gives a pattern, so that a silent partial
decomposition cannot happen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from ..errors import ConfigError

STANDARD_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

STANDARD_PATTERN = (
    r"^model\.layers\.(?P<layer>\d+)\.(?:self_attn|mlp)\."
    r"(?P<module>q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\.weight$"
)
# Gemma3ForConditionalGeneration saves its text decoder as language_model.model.layers (transformers 4.5x and
# 5.x alike); model.language_model.layers is its in-memory name, accepted in case a tool saved that
GEMMA3_MM_PATTERN = (
    r"^(?:language_model\.model|model\.language_model)\.layers\.(?P<layer>\d+)\.(?:self_attn|mlp)\."
    r"(?P<module>q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\.weight$"
)
PHI3_PATTERN = (
    r"^model\.layers\.(?P<layer>\d+)\.(?:self_attn|mlp)\."
    r"(?P<module>qkv_proj|o_proj|gate_up_proj|down_proj)\.weight$"
)
QWEN3_MOE_PATTERN = (
    r"^model\.layers\.(?P<layer>\d+)\.(?:self_attn\.|mlp\.(?:experts\.(?P<expert>\d+)\.)?)"
    r"(?P<module>q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj|gate)\.weight$"
)
MIXTRAL_PATTERN = (
    r"^model\.layers\.(?P<layer>\d+)\.(?:self_attn\.|block_sparse_moe\.(?:experts\.(?P<expert>\d+)\.)?)"
    r"(?P<module>q_proj|k_proj|v_proj|o_proj|w1|w2|w3|gate)\.weight$"
)
# expert tensors carry no '.weight' suffix (3-D parameters, not Linear layers)
GPT_OSS_PATTERN = (
    r"^model\.layers\.(?P<layer>\d+)\.(?:self_attn\.(?P<module>q_proj|k_proj|v_proj|o_proj)\.weight"
    r"|mlp\.experts\.(?P<fused>gate_up_proj|down_proj)|mlp\.(?P<router>router)\.weight)$"
)


@dataclass(frozen=True)
class Family:
    """How one model family names its decomposable matrices; ``modules`` is its default selection."""

    pattern: str
    modules: tuple[str, ...]


FAMILIES: dict[str, Family] = {
    **{
        t: Family(STANDARD_PATTERN, STANDARD_MODULES)
        for t in ("llama", "mistral", "qwen2", "qwen3", "olmo2", "olmo3", "mimo", "gemma", "gemma2", "gemma3_text")
    },
    "gemma3": Family(GEMMA3_MM_PATTERN, STANDARD_MODULES),
    "phi3": Family(PHI3_PATTERN, ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")),
    "qwen3_moe": Family(QWEN3_MOE_PATTERN, STANDARD_MODULES + ("gate",)),
    "mixtral": Family(MIXTRAL_PATTERN, ("q_proj", "k_proj", "v_proj", "o_proj", "w1", "w2", "w3", "gate")),
    "gpt_oss": Family(GPT_OSS_PATTERN, ("q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj", "down_proj", "router")),
}
# families whose RMSNorm scales by (1 + weight): the effective gain of a stored norm weight w is 1 + w
ONE_PLUS_W_NORMS = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text"})
# Fused tensors and their logical parts, in row order (Phi-3: q, k, v and gate, up)
FUSED_PARTS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


@dataclass(frozen=True, order=True)
class MatrixName:
    """A decomposable weight matrix: a whole 2-D tensor of the checkpoint, or a part of one.

    ``name`` is the key everywhere (store node, metrics.csv, variants): the tensor name for
    a whole tensor, so dense models keep the keys they always had; ``<tensor>[<e>]`` for slice
    e of a 3-D expert tensor and ``<tensor>[<part>]`` for a row block of a split fused tensor.
    """

    layer: int
    module: str
    name: str
    expert: Optional[int] = None
    tensor: Optional[str] = None  # the checkpoint tensor when ``name`` is a part of it
    index: Optional[int] = None  # slice along the first axis of a 3-D tensor
    rows: Optional[tuple[int, int]] = None  # row block [start, stop) of a 2-D tensor

    @property
    def source(self) -> str:
        """The checkpoint tensor this matrix is read from."""
        return self.tensor or self.name

    def record(self) -> dict:
        """Fields a store completion record needs to find the matrix again (none for a whole tensor)."""
        out: dict = {}
        if self.expert is not None:
            out["expert"] = self.expert
        if self.tensor is not None:
            out["tensor"] = self.tensor
        if self.index is not None:
            out["index"] = self.index
        if self.rows is not None:
            out["rows"] = list(self.rows)
        return out


def family_for(model_type: Optional[str]) -> Optional[Family]:
    return FAMILIES.get(model_type) if model_type else None


def pattern_for(model_type: Optional[str], custom: Optional[str]) -> str:
    """The name pattern to use for a checkpoint with ``config.json`` model_type."""
    if custom is not None:
        return custom
    if model_type is None:
        # No config.json: the standard layout is the only sensible guess, and
        # validation later fails loudly if nothing matches.
        return STANDARD_PATTERN
    if model_type in FAMILIES:
        return FAMILIES[model_type].pattern
    raise ConfigError(
        f"model_type '{model_type}' is not a supported family ({', '.join(sorted(FAMILIES))}). "
        "If its projections are stored as separate 2-D weights (or 3-D stacks of experts), pass module_pattern: "
        "a regex with named groups (?P<layer>\\d+) and (?P<module>...), optionally (?P<expert>\\d+), e.g. "
        f"'{STANDARD_PATTERN}'."
    )


def default_modules(model_type: Optional[str], requested: tuple[str, ...], standard: tuple[str, ...]) -> tuple:
    """The modules to select: the family's own list when the user kept the standard default (Mixtral has
    no q..down_proj MLP), else the user's list."""
    fam = family_for(model_type)
    if fam is not None and tuple(requested) == tuple(standard):
        return fam.modules
    return tuple(requested)


def _module(m: re.Match) -> str:
    groups = m.groupdict()
    for key in ("module", "fused", "router"):  # gpt-oss spells the module group three ways (no duplicate names)
        if groups.get(key):
            return groups[key]
    raise ConfigError(f"pattern matched '{m.string}' without a module group")


def select_matrices(
    names: Iterable[str], pattern: str, modules: Iterable[str], shapes: Optional[Mapping[str, tuple]] = None
) -> list[MatrixName]:
    """Names matching ``pattern`` whose module is in ``modules``, ordered by layer, module order, expert.

    With ``shapes``, a matched 3-D tensor becomes one matrix per slice along its first axis (one
    per expert); without, every match is one matrix.
    """
    rx = re.compile(pattern)
    order = {m: i for i, m in enumerate(modules)}
    found = []
    for name in names:
        m = rx.match(name)
        if not m:
            continue
        module = _module(m)
        if module not in order:
            continue
        layer = int(m.group("layer"))
        expert = m.groupdict().get("expert")
        shape = tuple(shapes[name]) if shapes is not None and name in shapes else ()
        if len(shape) == 3 and expert is None:
            found += [
                MatrixName(layer, module, f"{name}[{e}]", expert=e, tensor=name, index=e) for e in range(shape[0])
            ]
        else:
            found.append(MatrixName(layer, module, name, expert=None if expert is None else int(expert)))
    found.sort(key=lambda x: (x.layer, order[x.module], -1 if x.expert is None else x.expert, x.name))
    return found


def split_fused(matrices: list[MatrixName], config: Optional[dict], shapes: Mapping[str, tuple]) -> list[MatrixName]:
    """Replace every whole fused ``qkv_proj`` / ``gate_up_proj`` matrix by its logical row blocks.

    Row counts come from the config: q = num_attention_heads·head_dim, k = v =
    num_key_value_heads·head_dim; gate = up = intermediate_size (Phi-3 order). A tensor whose
    rows do not add up is refused rather than split at a guess.
    """
    cfg = config or {}
    out = []
    for m in matrices:
        if m.module not in FUSED_PARTS or m.tensor is not None:
            out.append(m)
            continue
        rows = shapes[m.name][0]
        if m.module == "qkv_proj":
            heads = cfg.get("num_attention_heads")
            kv = cfg.get("num_key_value_heads", heads)
            hd = cfg.get("head_dim") or (cfg.get("hidden_size", 0) // heads if heads else 0)
            sizes = (heads * hd, kv * hd, kv * hd) if heads and kv and hd else None
        else:
            i = cfg.get("intermediate_size")
            sizes = (i, i) if i else None
        if sizes is None or sum(sizes) != rows:
            raise ConfigError(
                f"split_fused: cannot split {m.name} ({rows} rows) into {'/'.join(FUSED_PARTS[m.module])} from "
                f"config.json (head counts, head_dim, intermediate_size give {sizes}); decompose it as stored "
                "(split_fused: false)"
            )
        start = 0
        for part, size in zip(FUSED_PARTS[m.module], sizes):
            label = part.removesuffix("_proj")
            out.append(MatrixName(m.layer, part, f"{m.name}[{label}]", tensor=m.name, rows=(start, start + size)))
            start += size
    return out

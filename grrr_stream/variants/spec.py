"""What a variant is made of: its component weights, the built-in names and the variant-name parser.

``base`` and ``full`` *are* the two checkpoints; every other variant is composed on the
decomposed matrices, W0 + w_diag·ΔW_diag + w_off·ΔW_off + w_null·ΔW_null (optionally minus
a random core component, the control, or plus/minus a principal band of the off-diagonal
update); see :mod:`grrr_stream.variants.builder`. A *channel* variant keeps its update only on one set of
residual channels, the outlier channels of a channels.json or their complement
(:mod:`grrr_stream.variants.channels`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional, Sequence

from ..errors import ConfigError
from ..files import check_component


@dataclass(frozen=True)
class VariantSpec:
    """Component weights of a variant; ``random_removal_seed`` subtracts the random control.

    ``checkpoint`` ('base' or 'post') marks the two variants that *are* a checkpoint, bit
    for bit; every other variant is composed on the decomposed matrices, with the rest
    of its tensors from the rest source.
    """

    name: str
    diag: float = 0.0
    off: float = 0.0
    null: float = 0.0
    random_removal_seed: Optional[int] = None
    checkpoint: Optional[str] = None
    # principal-band variants: add band_weight × the off-diagonal update inside the top-k×top-k block
    # of P (U0[:, :k] P_off[:k, :k] V0[:, :k]ᵀ), e.g. +1 on the base ('off-principal-k')
    band: Optional[int] = None
    band_weight: float = 0.0
    # channel variants: the update kept only on the residual channels of this set, 'outlier' (the channels
    # of a channels.json) or 'rest' (every other channel); the set itself is given to the builder
    channels: Optional[str] = None

    @property
    def is_base(self) -> bool:
        return self.checkpoint == "base"

    @property
    def is_full(self) -> bool:
        return self.checkpoint == "post"

    @property
    def composed(self) -> bool:
        return self.checkpoint is None

    def components(self) -> dict:
        d: dict = {"diag": self.diag, "off": self.off, "null": self.null}
        if self.random_removal_seed is not None:
            d["random_removal_seed"] = self.random_removal_seed
        if self.checkpoint is not None:
            d["checkpoint"] = self.checkpoint
        if self.band is not None:
            d["band"], d["band_weight"] = self.band, self.band_weight
        if self.channels is not None:  # absent otherwise: the components (and sweep keys) of other variants stay
            d["channels"] = self.channels
        return d


BUILTIN = {
    "base": VariantSpec("base", checkpoint="base"),
    "full": VariantSpec("full", 1.0, 1.0, 1.0, checkpoint="post"),
    "proj": VariantSpec("proj", 1.0, 1.0, 1.0),
    "diag": VariantSpec("diag", diag=1.0),
    "off": VariantSpec("off", off=1.0),
    "null": VariantSpec("null", null=1.0),
    "offnull": VariantSpec("offnull", off=1.0, null=1.0),
}
DEFAULT_VARIANTS = ("base", "full", "proj", "diag", "off", "null", "offnull", "randrm-0", "randrm-1", "randrm-2")
_RANDRM_RE = re.compile(r"randrm-(\d+)")
# off-principal-K: base + the off-diagonal update in the top-K block; off-nonprincipal-K: base + the rest
# of the off-diagonal update; no-off-principal-K: proj minus the top-K block (the causal removal)
_BAND_RE = re.compile(r"(off-principal|off-nonprincipal|no-off-principal)-(\d+)")
_BAND_SPECS = {
    "off-principal": ((0.0, 0.0, 0.0), 1.0),
    "off-nonprincipal": ((0.0, 1.0, 0.0), -1.0),
    "no-off-principal": ((1.0, 1.0, 1.0), -1.0),
}
# channels-outlier / channels-rest: the whole update (as proj) on the outlier channels or on every other
# channel; channels-SET-COMPONENT: that component (diag, off, null, offnull) restricted the same way
CHANNEL_SETS = ("outlier", "rest")
_CHANNEL_COMPONENTS = {
    "": (1.0, 1.0, 1.0),
    "diag": (1.0, 0.0, 0.0),
    "off": (0.0, 1.0, 0.0),
    "null": (0.0, 0.0, 1.0),
    "offnull": (0.0, 1.0, 1.0),
}
_CHANNELS_RE = re.compile(r"channels-(outlier|rest)(?:-(diag|off|null|offnull))?")


def _reserved(name: str) -> bool:
    return bool(
        name in BUILTIN or _RANDRM_RE.fullmatch(name) or _BAND_RE.fullmatch(name) or _CHANNELS_RE.fullmatch(name)
    )


def parse_variant(text: str) -> VariantSpec:
    """'offnull', 'randrm-2' (proj minus a random core component, seed 2), 'channels-rest-offnull' (off + null
    on the channels outside the outlier set), or 'NAME=diag:0.5,off:1,null:1' for arbitrary weights (missing
    components weigh 0; ',channels:outlier' or ',channels:rest' restricts the mix to that channel set)."""
    text = text.strip()
    if text in BUILTIN:
        return BUILTIN[text]
    m = _RANDRM_RE.fullmatch(text)
    if m:
        return VariantSpec(text, 1.0, 1.0, 1.0, random_removal_seed=int(m.group(1)))
    m = _BAND_RE.fullmatch(text)
    if m:
        (wd, wo, wn), bw = _BAND_SPECS[m.group(1)]
        if int(m.group(2)) < 1:
            raise ConfigError(f"variant '{text}': the band edge must be at least 1")
        return VariantSpec(text, wd, wo, wn, band=int(m.group(2)), band_weight=bw)
    m = _CHANNELS_RE.fullmatch(text)
    if m:
        return VariantSpec(text, *_CHANNEL_COMPONENTS[m.group(2) or ""], channels=m.group(1))
    if "=" in text:
        name, _, body = text.partition("=")
        name = check_component(name.strip(), "variant name")
        if _reserved(name):
            raise ConfigError(f"variant name '{name}' is reserved for the built-in variants; choose another name")
        weights: dict = {}
        for part in body.split(","):
            key, _, val = part.partition(":")
            key = key.strip()
            if key == "channels":
                if val.strip() not in CHANNEL_SETS:
                    raise ConfigError(f"variant '{text}': channels must be one of {', '.join(CHANNEL_SETS)}")
                weights["channels"] = val.strip()
                continue
            if key not in ("diag", "off", "null"):
                raise ConfigError(f"variant '{text}': unknown component '{key}' (use diag, off, null, channels)")
            try:
                weights[key] = float(val)
            except ValueError:
                raise ConfigError(f"variant '{text}': weight of {key} is not a number") from None
            if not math.isfinite(weights[key]):
                raise ConfigError(f"variant '{text}': weight of {key} must be a finite number")
        return VariantSpec(name, **weights)
    raise ConfigError(
        f"unknown variant '{text}': use one of {', '.join(BUILTIN)}, randrm-SEED, off-principal-K, "
        "off-nonprincipal-K, no-off-principal-K, channels-outlier, channels-rest, channels-SET-COMPONENT "
        "(SET outlier or rest, COMPONENT diag, off, null or offnull), or NAME=diag:W,off:W,null:W[,channels:SET]"
    )


def parse_variants(texts: Sequence[str]) -> list[VariantSpec]:
    """Several variants for one build or evaluation; their names must differ (each names a folder)."""
    specs = [parse_variant(t) for t in texts]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"variant names must be unique, got {names}")
    return specs

"""Ablated variant models built from a decomposed transition, with a dtype fidelity report.

What each variant is (the paper adds components "to the pretrained checkpoint"):

- ``base`` is the base checkpoint and ``full`` the post checkpoint, bit for bit, every
  tensor, whatever else is configured;
- every other variant is *composed*: W0 + w_diag·ΔW_diag + w_off·ΔW_off + w_null·ΔW_null
  on the decomposed matrices (optionally minus a random component R = U0 Q V0ᵀ, the
  control), and every other tensor (embeddings, norms, lm_head, biases) from the *rest
  source*: the base by default. ``proj`` = base + the whole ΔW on the decomposed matrices
  only, the 100 % reference of the components; full − proj is what the other tensors carry.
  ``rest_from: post`` takes the other tensors from the post model instead (proj then
  equals full); ``auto`` takes them from the base when it can supply them and falls back to
  the post model, on record, when names or shapes differ (e.g. added tokens).

Tokenizer, chat template and generation config come from the post model for every
variant (one prompt format per transition); ``config.json`` from the checkpoint that
supplies the variant's tensor layout (base for ``base`` and base-rest variants).

A variant is built one matrix at a time from the two checkpoints and the store (cached
frame, P, null residual) and exposed as a stream of ``(name, tensor)`` pairs in
checkpoint naming, or written as a folder. Only one rank-r product is needed per
matrix: with ΔW exact from the checkpoints and ΔW_off = ΔW − ΔW_diag − ΔW_null,

    intended = w_off·ΔW + (w_diag − w_off)·U0 diag(P) V0ᵀ + (w_null − w_off)·ΔW_null.

The fidelity report compares the variant *after* its cast to the output dtype with the
intended update, in float64: a bf16 variant of an RL-sized update (‖ΔW‖ ≈ 3e-4 ‖W0‖,
below bf16's rounding of W0) silently loses most of it, and the report says so.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sys
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Optional

import torch

from .checkpoint import Checkpoint, tensor_digest
from .checkpoint_writer import TensorSpec, companion_files, write_checkpoint
from .dtypes import BY_CODE, FLOAT_NAMES, name_of, torch_dtype
from .errors import ConfigError, StoreMismatchError, TensorMismatchError
from .files import atomic_write_text, check_component, to_csv
from .frame import Frame, compute_frame, project, random_core_coefficients
from .phases import PhaseTimer
from .runtime import bound_heap_growth, resolve_device
from .store import StoredTransition

FIDELITY_WARN = 0.01  # warn when more than 1 % of an intended update is lost to the cast


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
REST_FROM = ("base", "post", "auto")
_RANDRM_RE = re.compile(r"randrm-(\d+)")
# off-principal-K: base + the off-diagonal update in the top-K block; off-nonprincipal-K: base + the rest
# of the off-diagonal update; no-off-principal-K: proj minus the top-K block (the causal removal)
_BAND_RE = re.compile(r"(off-principal|off-nonprincipal|no-off-principal)-(\d+)")
_BAND_SPECS = {"off-principal": ((0.0, 0.0, 0.0), 1.0), "off-nonprincipal": ((0.0, 1.0, 0.0), -1.0),
               "no-off-principal": ((1.0, 1.0, 1.0), -1.0)}


def parse_variant(text: str) -> VariantSpec:
    """'offnull', 'randrm-2' (proj minus a random core component, seed 2), or
    'NAME=diag:0.5,off:1,null:1' for arbitrary weights (missing components weigh 0)."""
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
    if "=" in text:
        name, _, body = text.partition("=")
        name = check_component(name.strip(), "variant name")
        if name in BUILTIN or _RANDRM_RE.fullmatch(name) or _BAND_RE.fullmatch(name):
            raise ConfigError(f"variant name '{name}' is reserved for the built-in variant; choose another name")
        weights = {}
        for part in body.split(","):
            key, _, val = part.partition(":")
            key = key.strip()
            if key not in ("diag", "off", "null"):
                raise ConfigError(f"variant '{text}': unknown component '{key}' (use diag, off, null)")
            try:
                weights[key] = float(val)
            except ValueError:
                raise ConfigError(f"variant '{text}': weight of {key} is not a number") from None
            if not math.isfinite(weights[key]):
                raise ConfigError(f"variant '{text}': weight of {key} must be a finite number")
        return VariantSpec(name, **weights)
    raise ConfigError(
        f"unknown variant '{text}': use one of {', '.join(BUILTIN)}, randrm-SEED, off-principal-K, "
        "off-nonprincipal-K, no-off-principal-K, or NAME=diag:W,off:W,null:W"
    )


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
    return (f"{where}rest_from: base cannot be used: the base and post checkpoints differ in tensor names or "
            "shapes (e.g. added tokens), so the base cannot supply the tensors that are not decomposed. Set "
            "rest_from: post (every non-decomposed tensor from the post model; proj then equals full) or "
            "rest_from: auto (base when possible, else post, recorded). Differences:\n  "
            + "\n  ".join(problems[:20]) + (f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""))


def resolve_rest(requested: str, problems: list[str]) -> tuple[str, Optional[str]]:
    """(rest source used, the reason of a fallback or None) for a requested rest_from."""
    if requested not in REST_FROM:
        raise ConfigError(f"rest_from must be one of {', '.join(REST_FROM)}, got {requested!r}")
    if requested == "post" or not problems:
        return ("post" if requested == "post" else "base"), None
    if requested == "base":
        raise TensorMismatchError(rest_refusal(problems))
    return "post", f"auto: base cannot supply the rest ({len(problems)} difference(s), e.g. {problems[0]})"


# Casts that keep every value: a base/full variant keeps its checkpoint's dtype where the
# requested variant dtype would round it (a float32 checkpoint asked for in bfloat16).
_EXACT_INTO = {
    torch.bfloat16: (torch.bfloat16, torch.float32, torch.float64),
    torch.float16: (torch.float16, torch.float32, torch.float64),
    torch.float32: (torch.float32, torch.float64),
    torch.float64: (torch.float64,),
}


@dataclass
class MatrixFidelity:
    name: str
    layer: int
    module: str
    intended_norm: float
    error_norm: float
    fidelity: float  # ‖cast(W_variant) − W0 − intended‖ / ‖intended‖ (0 when both are 0)
    energy_survived: float  # ⟨realised, intended⟩² / ‖intended‖⁴: share of the intended update kept
    removed_norm: float = 0.0  # ‖R‖ of the random control (= ‖diag P‖), or ‖band block‖ of a band variant
    expert: Optional[int] = None  # expert index of a mixture-of-experts matrix (empty otherwise)


@dataclass
class FidelityReport:
    variant: str
    dtype: str
    rows: list[MatrixFidelity] = field(default_factory=list)
    _dot: float = 0.0

    def summary(self) -> dict:
        i2 = sum(r.intended_norm ** 2 for r in self.rows)
        e2 = sum(r.error_norm ** 2 for r in self.rows)
        overall = math.sqrt(e2 / i2) if i2 > 0 else (0.0 if e2 == 0 else math.inf)
        return {
            "variant": self.variant, "dtype": self.dtype, "matrices": len(self.rows),
            "fidelity": overall,
            "fidelity_max": max((r.fidelity for r in self.rows), default=0.0),
            "energy_survived": (self._dot ** 2 / i2 ** 2) if i2 > 0 else 1.0,
            "intended_norm": math.sqrt(i2),
        }

    def add(self, row: MatrixFidelity, dot: float) -> None:
        self.rows.append(row)
        self._dot += dot

    def csv(self) -> str:
        return to_csv(asdict(r) for r in self.rows)


class VariantBuilder:
    """Builds one variant of one stored transition as a tensor stream.

    Refusals happen here, before anything is built or written: a dtype or rest source
    that does not exist, or ``rest_from='base'`` when the base cannot supply the rest.
    """

    def __init__(self, store: Path, spec: VariantSpec, *, dtype: str = "float32", rest_from: str = "base",
                 device: str = "auto"):
        if dtype not in FLOAT_NAMES:
            raise ConfigError(f"variant dtype must be one of {', '.join(FLOAT_NAMES)}")
        if rest_from not in REST_FROM:
            raise ConfigError(f"rest_from must be one of {', '.join(REST_FROM)}, got {rest_from!r}")
        bound_heap_growth()
        self.transition = StoredTransition(Path(store))
        self.spec = spec
        self.dtype = dtype
        self.device = resolve_device(device)
        m = self.transition.manifest
        self.base = Checkpoint.open(Path(m["base_folder"]))
        self.post = Checkpoint.open(Path(m["post_folder"]))
        self.compute_dtype = torch_dtype(m["settings"]["compute_dtype"])
        self.report = FidelityReport(spec.name, dtype)
        self.rest_requested = rest_from
        if spec.composed:
            self.rest_from, self.rest_fallback = resolve_rest(rest_from, rest_problems(self.base, self.post))
            self.home = self.base if self.rest_from == "base" else self.post
        else:  # a checkpoint itself: no rest to choose
            self.rest_from, self.rest_fallback = None, None
            self.home = self.base if spec.is_base else self.post
        self._layout: Optional[list[TensorSpec]] = None
        self.timer = PhaseTimer()  # seconds per step of the build (tools/bench_variants.py prints them)
        # checkpoint tensor → its decomposed parts (experts of a 3-D tensor, blocks of a split fused one): the
        # variant rebuilds each part and writes the tensor back whole, in the checkpoint's own layout
        self._parts: dict[str, list[tuple[str, dict]]] = {}
        for key, attrs in self.transition.matrices.items():
            if attrs.get("tensor"):
                self._parts.setdefault(attrs["tensor"], []).append((key, attrs))

    @property
    def home_side(self) -> str:
        """'base' or 'post': the checkpoint that supplies this variant's layout, config and other tensors."""
        return "base" if self.home is self.base else "post"

    def _out_dtype(self, stored: torch.dtype) -> torch.dtype:
        want = torch_dtype(self.dtype)
        if self.spec.composed or want in _EXACT_INTO.get(stored, ()):
            return want
        return stored  # base/full stay bit for bit: never round a checkpoint tensor

    def layout(self) -> list[TensorSpec]:
        """Every tensor of the output, in the home checkpoint's on-disk order."""
        if self._layout is None:
            infos = sorted(self.home.tensors.values(), key=lambda i: (str(i.shard), i.start))
            out = []
            for info in infos:
                dt = BY_CODE[info.dtype]
                out.append(TensorSpec(info.name, info.shape, self._out_dtype(dt.torch) if dt.floating else dt.torch))
            self._layout = out
        return self._layout

    def config(self) -> dict:
        """The home checkpoint's config.json, ``torch_dtype`` set to the widest floating dtype written."""
        cfg = dict(self.home.config or {})
        floats = {s.dtype for s in self.layout() if s.dtype.is_floating_point}
        name = self.dtype if floats <= {torch_dtype(self.dtype)} else \
            name_of(max(floats, key=lambda d: torch.finfo(d).bits))
        cfg["torch_dtype"] = name
        if "dtype" in cfg:
            cfg["dtype"] = name
        return cfg

    def config_differences(self) -> list[str]:
        """config.json keys (bookkeeping aside) in which the base and post models differ."""
        return config_differences(self.base.config, self.post.config)

    def runs_in_post_engine(self) -> bool:
        """True when an engine started on the post model computes this variant exactly: same tensor
        names and shapes as the post model, and an equivalent config."""
        if self.home is self.post:
            return True
        return not rest_problems(self.base, self.post) and not self.config_differences()

    def metadata(self) -> dict:
        return {"variant": self.spec.name, "components": self.spec.components(), "dtype": self.dtype,
                "rest_from": self.rest_from, "rest_from_requested": self.rest_requested,
                "rest_fallback": self.rest_fallback, "config_from": self.home_side,
                "prompt_format_from": "post", "config_differences": self.config_differences(),
                "store": str(self.transition.path), "transition": self.transition.manifest["identity"]}

    def tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        for spec in self.layout():
            attrs = self.transition.matrices.get(spec.name)
            parts = self._parts.get(spec.name)
            if parts:
                # start from the home tensor (any part not decomposed keeps it), then put every part in place
                out = self.home.read(spec.name).to(spec.dtype)
                for key, part in parts:
                    rebuilt = self._matrix(key, part, spec.dtype)
                    if part.get("index") is not None:
                        out[part["index"]] = rebuilt
                    else:
                        start, stop = part["rows"]
                        out[start:stop] = rebuilt
                yield spec.name, out
            elif attrs is None:
                with self.timer.phase("other_tensors"):
                    t = self.home.read(spec.name)
                    t = t.to(spec.dtype) if t.is_floating_point() else t
                yield spec.name, t
            else:
                yield spec.name, self._matrix(spec.name, attrs, spec.dtype)

    # -- one matrix ---------------------------------------------------------------------

    def _frame(self, name: str, attrs: dict, w0: torch.Tensor) -> Frame:
        cache = self.transition.frame_cache()
        frame = cache.get(attrs["frame_key"], self.compute_dtype, shape=tuple(w0.shape)) if cache else None
        if frame is None:
            warnings.warn(f"base frame of {name} not in the frame cache; recomputing its SVD", stacklevel=3)
            frame = compute_frame(w0.to(self.compute_dtype), self.transition.manifest["settings"]["core_rel_threshold"])
        return frame

    def _matrix(self, name: str, attrs: dict, out_dtype: torch.dtype) -> torch.Tensor:
        timer = self.timer
        with timer.phase("read"):
            w0, w1 = self.base.read_matrix(attrs), self.post.read_matrix(attrs)
        with timer.phase("verify"):
            for side, ckpt, t, key in (("base", self.base, w0, "base_digest"), ("post", self.post, w1, "post_digest")):
                _verify(ckpt, name, attrs, t, attrs[key], side, self.transition.path)
        s = self.spec
        layer, module = attrs["layer"], attrs["module"]
        weights = (s.diag, s.off, s.null)
        if s.random_removal_seed is None and s.band is None and weights in ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)):
            # W0 or W1 itself (base, full, proj, a zero mix): copied, never recomputed, so that
            # proj's decomposed matrices equal full's bit for bit
            src = w0 if weights == (0.0, 0.0, 0.0) else w1
            with timer.phase("cast"):
                out = src.to(out_dtype)
            if out_dtype in _EXACT_INTO.get(src.dtype, ()):
                # the cast keeps every value: the realised update is the intended one exactly, and its
                # norm, ‖W1 − W0‖ or 0, is on record from the decomposition (no pass over the matrix)
                norm = 0.0 if src is w0 else float(attrs["metrics"]["delta_fro"])
                self.report.add(MatrixFidelity(name, layer, module, norm, 0.0, 0.0, 1.0, 0.0,
                                               attrs.get("expert")), norm * norm)
            else:
                with timer.phase("fidelity"):
                    self._account(name, layer, module, w0, out, None, 0.0, source=src,
                                  expert=attrs.get("expert"))
            return out
        cd, dev = self.compute_dtype, self.device
        W0 = w0.to(device=dev, dtype=cd)
        if s.off != 0.0 or s.random_removal_seed is not None:
            intended = w1.to(device=dev, dtype=cd, copy=True).sub_(W0)
            if s.off != 1.0:
                intended.mul_(s.off)
        else:
            intended = torch.zeros_like(W0)
        # a store that kept only the null residual's norms (null_storage: norms): recomputed below from
        # ΔW and the frame, so W1 is kept until then
        recompute_null = s.null != s.off and not attrs.get("null_stored") and attrs.get("null_kept") == "norms"
        if not recompute_null:
            del w1
        needs_frame = s.diag != s.off or s.random_removal_seed is not None or s.band is not None
        removed = 0.0
        frame = None
        if needs_frame:
            with timer.phase("frame_read"):
                frame = self._frame(name, attrs, w0)
                U, V = frame.U.to(dev), frame.V.to(dev)
            with timer.phase("p_read"):
                P = self.transition.read_tensor(name, "P")
            # the honest CPU floor of a variant: m·r·n multiply-adds per rank-r product
            with timer.phase("rank_r_product"):
                p = torch.diagonal(P).to(device=dev, dtype=cd)
                if s.band is not None:
                    k = min(s.band, U.shape[1])
                    block = P[:k, :k].to(device=dev, dtype=cd).clone()
                    block.diagonal().zero_()
                    band = U[:, :k] @ block
                    removed = float(torch.linalg.vector_norm(block.double()))  # ‖U_k B V_kᵀ‖ = ‖B‖
                    intended.addmm_(band, V[:, :k].T, alpha=s.band_weight)
                    del band, block
                del P
                if s.diag != s.off:
                    intended.addmm_(U * p, V.T, alpha=s.diag - s.off)
                if s.random_removal_seed is not None:
                    removed = float(torch.linalg.vector_norm(p.double()))
                    gen = torch.Generator().manual_seed(_seed_for(s.random_removal_seed, name))
                    Q = random_core_coefficients(U.shape[1], removed, gen, dtype=cd, device=dev)
                    intended.addmm_(U @ Q, V.T, alpha=-1.0)
                del U, V, p
        if s.null != s.off and attrs.get("null_stored"):
            with timer.phase("null_read"):
                intended.add_(self.transition.read_tensor(name, "null").to(device=dev, dtype=cd), alpha=s.null - s.off)
        elif recompute_null:
            # exactly as the decomposition did: ΔW − U0 (U0ᵀ ΔW V0) V0ᵀ, from the checkpoints and the frame
            if frame is None:
                frame = self._frame(name, attrs, w0)
            delta = w1.to(device=dev, dtype=cd, copy=True).sub_(W0)
            del w1
            null = project(delta, Frame(U=frame.U.to(dev), S=frame.S.to(dev), V=frame.V.to(dev)), in_place=True).null
            intended.add_(null, alpha=s.null - s.off)
            del delta, null
        del frame
        del W0
        out = torch.empty(w0.shape, dtype=out_dtype)
        with timer.phase("fidelity"):  # also forms out = cast(W0 + intended)
            self._account(name, layer, module, w0, out, intended, removed, fill=True, expert=attrs.get("expert"))
        return out

    def _account(self, name: str, layer: int, module: str, w0: torch.Tensor, out: torch.Tensor,
                 intended: Optional[torch.Tensor], removed: float, source: Optional[torch.Tensor] = None,
                 fill: bool = False, expert: Optional[int] = None) -> None:
        """Fidelity of the cast variant against the intended update, in float64, by row blocks.

        ``intended`` is the update relative to W0; for copied matrices pass ``source`` (W0 or
        W1) instead, the intended update then being source − W0 exactly. With ``fill`` the
        same pass also writes out = cast(W0 + intended), formed in float64 (bounded memory).
        """
        i2 = e2 = dot = 0.0
        step = max(1, (1 << 22) // max(1, w0.shape[1]))
        if fill and intended is not None and out.dtype == torch.float32 and intended.dtype == torch.float32 \
                and w0.dtype in _EXACT_INTO and torch.float32 in _EXACT_INTO[w0.dtype]:
            # float32 out of float32 arithmetic: out = fl(W0 + intended), and its rounding error is
            # obtained exactly in float32 by Knuth's TwoSum (a + b = s + e, exactly), so no float64
            # pass is needed; only the sums are accumulated in float64
            for i in range(0, w0.shape[0], step):
                a = w0[i:i + step].float()
                b = intended[i:i + step].cpu()
                s_ = a + b
                bb = s_ - a
                e = (a - (s_ - bb)) + (b - bb)  # realised = s − a = b − e; error = −e
                out[i:i + step] = s_
                # per block, BLAS dot products (float32, blocked accumulation: relative error ~1e-7 on
                # blocks of 4 M entries), summed across blocks in float64; ⟨realised, b⟩ = ‖b‖² − ⟨e, b⟩
                b, e = b.reshape(-1), e.reshape(-1)
                bb2 = float(torch.dot(b, b))
                i2 += bb2
                e2 += float(torch.dot(e, e))
                dot += bb2 - float(torch.dot(e, b))
        else:
            i2, e2, dot = self._float64_pass(w0, out, intended, source, fill, step)
        fid = math.sqrt(e2 / i2) if i2 > 0 else (0.0 if e2 == 0 else math.inf)
        self.report.add(MatrixFidelity(name, layer, module, math.sqrt(i2), math.sqrt(e2), fid,
                                       (dot * dot / (i2 * i2)) if i2 > 0 else 1.0, removed, expert), dot)

    @staticmethod
    def _float64_pass(w0: torch.Tensor, out: torch.Tensor, intended: Optional[torch.Tensor],
                      source: Optional[torch.Tensor], fill: bool, step: int) -> tuple[float, float, float]:
        """‖intended‖², ‖realised − intended‖², ⟨realised, intended⟩ in float64, by row blocks (where a
        cast to a narrower dtype is measured)."""
        i2 = e2 = dot = 0.0
        for i in range(0, w0.shape[0], step):
            base = w0[i:i + step].double()
            if intended is None:
                want = source[i:i + step].double() - base
            else:
                want = intended[i:i + step].double().cpu()
            if fill:
                out[i:i + step] = (base + want).to(out.dtype)
            realised = out[i:i + step].double() - base
            err = realised - want
            i2 += float((want * want).sum())
            e2 += float((err * err).sum())
            dot += float((realised * want).sum())
        return i2, e2, dot


# Tensors whose digest was checked in this process, keyed by (shard, size, mtime, offset, digest): every
# variant of a transition reads the same tensors and an evaluation builds ten of them, so each is
# hashed once per process instead of once per variant (a file rewritten in place changes its mtime
# or size and is hashed again).
_VERIFIED: set[tuple] = set()


def _verify(ckpt: Checkpoint, name: str, attrs: dict, t: torch.Tensor, want: str, side: str, store: Path) -> None:
    info = ckpt.tensors[attrs.get("tensor") or name]  # an expert slice or fused block lives in its tensor
    st = os.stat(info.shard)
    key = (str(info.shard), st.st_size, st.st_mtime_ns, info.start, name, want)
    if key in _VERIFIED:
        return
    if tensor_digest(t) != want:
        raise StoreMismatchError(f"{name} in the {side} checkpoint differs from the one decomposed into {store}; "
                                 "decompose again before building variants")
    _VERIFIED.add(key)


def _seed_for(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"randrm:{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def variant_folder_done(folder: Path, metadata: dict) -> bool:
    """True if ``folder`` is a finished variant built with exactly these settings."""
    meta = Path(folder) / "grrr_variant.json"
    if not meta.is_file():
        return False
    try:
        return json.loads(meta.read_text()).get("settings") == metadata
    except json.JSONDecodeError:
        return False


def write_variant(builder: VariantBuilder, folder: Path, *, max_shard_bytes: int = 2 * 2**30,
                  overwrite: bool = False, stream=None, within: Optional[Path] = None) -> dict:
    """Write the variant as a Hugging Face folder plus ``<folder>.fidelity.csv`` beside it.

    Returns the fidelity summary. An existing finished folder with the same settings is
    kept (its stored summary returned); one with other settings needs ``overwrite``.
    ``within``: the folder that replacing ``folder`` may delete in (default its parent).
    """
    folder = Path(folder)
    meta = builder.metadata()
    if variant_folder_done(folder, meta) and folder.with_name(folder.name + ".fidelity.csv").is_file():
        return json.loads((folder / "grrr_variant.json").read_text())["fidelity"]
    if folder.exists() and not overwrite and not (folder / "grrr_variant.json").is_file():
        raise ConfigError(f"{folder} exists and is not a grrr_stream variant; choose another --out")
    if folder.exists() and not overwrite and not variant_folder_done(folder, meta):
        raise ConfigError(f"{folder} holds a variant built with other settings; pass --overwrite to rebuild it")
    # one prompt format per transition: tokenizer, chat template and generation config of the post model
    extra = companion_files(builder.post.folder)

    def tensors():
        yield from builder.tensors()
        # the summary is final only once every matrix went through; store it inside the folder
        extra["grrr_variant.json"] = json.dumps({"settings": meta, "fidelity": builder.report.summary()},
                                                indent=2).encode()

    write_checkpoint(folder, tensors(), layout=builder.layout(), config=builder.config(),
                     max_shard_bytes=max_shard_bytes, extra_files=extra, overwrite=True, within=within)
    atomic_write_text(folder.with_name(folder.name + ".fidelity.csv"), builder.report.csv())
    summary = builder.report.summary()
    warn_if_lossy(summary, stream)
    return summary


def warn_if_lossy(summary: dict, stream=None) -> None:
    if summary["fidelity"] > FIDELITY_WARN or summary["fidelity_max"] > FIDELITY_WARN:
        msg = (f"WARNING: variant '{summary['variant']}' in {summary['dtype']} loses "
               f"{100 * summary['fidelity']:.1f} % of its intended update to the cast (worst matrix "
               f"{100 * summary['fidelity_max']:.1f} %; energy kept {100 * summary['energy_survived']:.1f} %). "
               "Use variant dtype float32 to keep small updates.")
        warnings.warn(msg, stacklevel=2)
        print(msg, file=stream or sys.stderr)

"""Ablated variant models built from a decomposed transition, with a dtype fidelity report.

A variant is W0 + w_diag·ΔW_diag + w_off·ΔW_off + w_null·ΔW_null for every decomposed
matrix (optionally minus a random component R = U0 Q V0ᵀ, the control), and a copy of
the post (or base) model for every other tensor. It is built one matrix at a time from
the two checkpoints and the store (cached frame, P, null residual) and exposed as a
stream of ``(name, tensor)`` pairs in checkpoint naming, or written as a folder.

Only one rank-r product is needed per matrix: with ΔW exact from the checkpoints and
ΔW_off = ΔW − ΔW_diag − ΔW_null,

    intended = w_off·ΔW + (w_diag − w_off)·U0 diag(P) V0ᵀ + (w_null − w_off)·ΔW_null.

The fidelity report compares the variant *after* its cast to the output dtype with the
intended update, in float64: a bf16 variant of an RL-sized update (‖ΔW‖ ≈ 3e-4 ‖W0‖,
below bf16's rounding of W0) silently loses most of it, and the report says so.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Optional

import torch

from .checkpoint import Checkpoint, TensorSpec, companion_files, tensor_digest, write_checkpoint
from .errors import ConfigError, StoreMismatchError, TensorMismatchError
from .frame import Frame, compute_frame, random_core_coefficients
from .runtime import bound_heap_growth
from .store import StoredTransition, atomic_write_text, to_csv

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}
FIDELITY_WARN = 0.01  # warn when more than 1 % of an intended update is lost to the cast


@dataclass(frozen=True)
class VariantSpec:
    """Component weights of a variant; ``random_removal_seed`` subtracts the random control."""

    name: str
    diag: float = 0.0
    off: float = 0.0
    null: float = 0.0
    random_removal_seed: Optional[int] = None

    @property
    def is_base(self) -> bool:
        return (self.diag, self.off, self.null) == (0.0, 0.0, 0.0) and self.random_removal_seed is None

    @property
    def is_full(self) -> bool:
        return (self.diag, self.off, self.null) == (1.0, 1.0, 1.0) and self.random_removal_seed is None

    def components(self) -> dict:
        d = {"diag": self.diag, "off": self.off, "null": self.null}
        if self.random_removal_seed is not None:
            d["random_removal_seed"] = self.random_removal_seed
        return d


BUILTIN = {
    "base": VariantSpec("base"),
    "full": VariantSpec("full", 1.0, 1.0, 1.0),
    "diag": VariantSpec("diag", diag=1.0),
    "off": VariantSpec("off", off=1.0),
    "null": VariantSpec("null", null=1.0),
    "offnull": VariantSpec("offnull", off=1.0, null=1.0),
}
DEFAULT_VARIANTS = ("base", "full", "diag", "off", "null", "offnull", "randrm-0", "randrm-1", "randrm-2")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


def parse_variant(text: str) -> VariantSpec:
    """'offnull', 'randrm-2' (full minus a random core component, seed 2), or
    'NAME=diag:0.5,off:1,null:1' for arbitrary weights (missing components weigh 0)."""
    text = text.strip()
    if text in BUILTIN:
        return BUILTIN[text]
    m = re.fullmatch(r"randrm-(\d+)", text)
    if m:
        return VariantSpec(text, 1.0, 1.0, 1.0, random_removal_seed=int(m.group(1)))
    if "=" in text:
        name, _, body = text.partition("=")
        if not _NAME_RE.match(name):
            raise ConfigError(f"variant name '{name}' may only use letters, digits, '_', '.', '-'")
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
        return VariantSpec(name, **weights)
    raise ConfigError(
        f"unknown variant '{text}': use one of {', '.join(BUILTIN)}, randrm-SEED, or NAME=diag:W,off:W,null:W"
    )


@dataclass
class MatrixFidelity:
    name: str
    layer: int
    module: str
    intended_norm: float
    error_norm: float
    fidelity: float  # ‖cast(W_variant) − W0 − intended‖ / ‖intended‖ (0 when both are 0)
    energy_survived: float  # ⟨realised, intended⟩² / ‖intended‖⁴: share of the intended update kept
    removed_norm: float = 0.0  # ‖R‖ of the random control (= ‖diag P‖)


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

    def csv(self) -> str:
        return to_csv(asdict(r) for r in self.rows)


class VariantBuilder:
    """Builds one variant of one stored transition as a tensor stream."""

    def __init__(self, store: Path, spec: VariantSpec, *, dtype: str = "float32", rest_from: str = "post",
                 device: str = "cpu"):
        if dtype not in DTYPES:
            raise ConfigError(f"variant dtype must be one of {', '.join(DTYPES)}")
        if rest_from not in ("post", "base"):
            raise ConfigError("rest_from must be 'post' or 'base'")
        bound_heap_growth()
        self.transition = StoredTransition(Path(store))
        self.spec = spec
        self.dtype = dtype
        self.rest_from = rest_from
        self.device = torch.device(device)
        m = self.transition.manifest
        self.base = Checkpoint.open(Path(m["base_folder"]))
        self.post = Checkpoint.open(Path(m["post_folder"]))
        self.compute_dtype = DTYPES[m["settings"]["compute_dtype"]]
        self.report = FidelityReport(spec.name, dtype)
        self._rest = self.post if rest_from == "post" else self.base
        self._check_rest()

    def _check_rest(self) -> None:
        if self.rest_from == "post":
            return
        problems = []
        for name, info in self.post.tensors.items():
            b = self.base.tensors.get(name)
            if b is None:
                problems.append(f"{name}: only in post")
            elif b.shape != info.shape:
                problems.append(f"{name}: {list(b.shape)} in base, {list(info.shape)} in post")
        if problems:
            raise TensorMismatchError(
                "rest_from: base cannot be used: the post model's tensors differ in name or shape from the base's "
                "(e.g. added tokens), so the post tokenizer would not fit. Use rest_from: post. Differences:\n  "
                + "\n  ".join(problems[:20])
            )

    def layout(self) -> list[TensorSpec]:
        """Every tensor of the output, in the rest source's on-disk order."""
        infos = sorted(self._rest.tensors.values(), key=lambda i: (str(i.shard), i.start))
        from .checkpoint import DTYPES as CK

        out = []
        for info in infos:
            tdtype, _, floating = CK[info.dtype]
            out.append(TensorSpec(info.name, info.shape, DTYPES[self.dtype] if floating else tdtype))
        return out

    def config(self) -> dict:
        cfg = dict(self.post.config or {})
        cfg["torch_dtype"] = self.dtype
        if "dtype" in cfg:
            cfg["dtype"] = self.dtype
        return cfg

    def metadata(self) -> dict:
        return {"variant": self.spec.name, "components": self.spec.components(), "dtype": self.dtype,
                "rest_from": self.rest_from, "store": str(self.transition.path),
                "transition": self.transition.manifest["identity"]}

    def tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        out_dtype = DTYPES[self.dtype]
        for spec in self.layout():
            attrs = self.transition.matrices.get(spec.name)
            if attrs is None:
                t = self._rest.read(spec.name)
                yield spec.name, (t.to(out_dtype) if t.is_floating_point() else t)
            else:
                yield spec.name, self._matrix(spec.name, attrs, out_dtype)

    # -- one matrix ---------------------------------------------------------------------

    def _frame(self, name: str, attrs: dict, w0: torch.Tensor) -> Frame:
        cache = self.transition.frame_cache()
        frame = cache.get(attrs["frame_key"], self.compute_dtype) if cache else None
        if frame is None:
            warnings.warn(f"base frame of {name} not in the frame cache; recomputing its SVD", stacklevel=3)
            frame = compute_frame(w0.to(self.compute_dtype), self.transition.manifest["settings"]["core_rel_threshold"])
        return frame

    def _matrix(self, name: str, attrs: dict, out_dtype: torch.dtype) -> torch.Tensor:
        w0, w1 = self.base.read(name), self.post.read(name)
        for side, t, key in (("base", w0, "base_digest"), ("post", w1, "post_digest")):
            if tensor_digest(t) != attrs[key]:
                raise StoreMismatchError(
                    f"{name} in the {side} checkpoint differs from the one decomposed into {self.transition.path}; "
                    "decompose again before building variants"
                )
        s = self.spec
        layer, module = attrs["layer"], attrs["module"]
        if s.is_base or s.is_full:
            src = w0 if s.is_base else w1
            out = src.to(out_dtype)
            self._account(name, layer, module, w0, out, None, 0.0, source=src)
            return out
        cd, dev = self.compute_dtype, self.device
        W0 = w0.to(device=dev, dtype=cd)
        if s.off != 0.0 or s.random_removal_seed is not None:
            intended = w1.to(device=dev, dtype=cd, copy=True).sub_(W0)
            if s.off != 1.0:
                intended.mul_(s.off)
        else:
            intended = torch.zeros_like(W0)
        del w1
        needs_frame = s.diag != s.off or s.random_removal_seed is not None
        removed = 0.0
        if needs_frame:
            frame = self._frame(name, attrs, w0)
            U, V = frame.U.to(dev), frame.V.to(dev)
            p = torch.diagonal(self.transition.read_tensor(name, "P")).to(device=dev, dtype=cd)
            if s.diag != s.off:
                intended.addmm_(U * p, V.T, alpha=s.diag - s.off)
            if s.random_removal_seed is not None:
                removed = float(torch.linalg.vector_norm(p.double()))
                gen = torch.Generator().manual_seed(_seed_for(s.random_removal_seed, name))
                Q = random_core_coefficients(U.shape[1], removed, gen, dtype=cd, device=dev)
                intended.addmm_(U @ Q, V.T, alpha=-1.0)
            del U, V, p
        if s.null != s.off and attrs.get("null_stored"):
            intended.add_(self.transition.read_tensor(name, "null").to(device=dev, dtype=cd), alpha=s.null - s.off)
        del W0
        out = torch.empty(w0.shape, dtype=out_dtype)
        self._account(name, layer, module, w0, out, intended, removed, fill=True)
        return out

    def _account(self, name: str, layer: int, module: str, w0: torch.Tensor, out: torch.Tensor,
                 intended: Optional[torch.Tensor], removed: float, source: Optional[torch.Tensor] = None,
                 fill: bool = False) -> None:
        """Fidelity of the cast variant against the intended update, in float64, by row blocks.

        ``intended`` is the update relative to W0; for base/full pass ``source`` (W0 or W1)
        instead, the intended update then being source − W0 exactly. With ``fill`` the same
        pass also writes out = cast(W0 + intended), formed in float64 (bounded memory).
        """
        i2 = e2 = dot = 0.0
        step = max(1, (1 << 22) // max(1, w0.shape[1]))
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
        fid = math.sqrt(e2 / i2) if i2 > 0 else (0.0 if e2 == 0 else math.inf)
        self.report.rows.append(MatrixFidelity(name, layer, module, math.sqrt(i2), math.sqrt(e2), fid,
                                               (dot * dot / (i2 * i2)) if i2 > 0 else 1.0, removed))
        self.report._dot += dot


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
                  overwrite: bool = False, stream=None) -> dict:
    """Write the variant as a Hugging Face folder plus ``<folder>.fidelity.csv`` beside it.

    Returns the fidelity summary. An existing finished folder with the same settings is
    kept (its stored summary returned); one with other settings needs ``overwrite``.
    """
    folder = Path(folder)
    meta = builder.metadata()
    if variant_folder_done(folder, meta) and folder.with_name(folder.name + ".fidelity.csv").is_file():
        return json.loads((folder / "grrr_variant.json").read_text())["fidelity"]
    if folder.exists() and not overwrite and not (folder / "grrr_variant.json").is_file():
        raise ConfigError(f"{folder} exists and is not a grrr_stream variant; choose another --out")
    if folder.exists() and not overwrite and not variant_folder_done(folder, meta):
        raise ConfigError(f"{folder} holds a variant built with other settings; pass --overwrite to rebuild it")
    extra = companion_files(builder.post.folder)

    def tensors():
        yield from builder.tensors()
        # the summary is final only once every matrix went through; store it inside the folder
        extra["grrr_variant.json"] = json.dumps({"settings": meta, "fidelity": builder.report.summary()},
                                                indent=2).encode()

    write_checkpoint(folder, tensors(), layout=builder.layout(), config=builder.config(),
                     max_shard_bytes=max_shard_bytes, extra_files=extra, overwrite=True)
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

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
checkpoint naming, or written as a folder; :mod:`.compose` rebuilds each
decomposed matrix (one rank-r product per matrix).

A *channel variant* (``channels-outlier``, ``channels-rest``, ``channels-rest-offnull``, ...) keeps
its update only on the outlier residual channels of a channels.json, or on all the others
(:mod:`.channels`); its other tensors come from the rest source like any composed variant's.

The variant specs and their parser are in :mod:`.spec`, the choice of rest source
in :mod:`.rest`, and the dtype fidelity report (the variant *after* its cast to the
output dtype against the intended update) in :mod:`.fidelity`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, Optional

import torch

from ..checkpoints.reader import Checkpoint
from ..checkpoints.writer import TensorSpec, companion_files, write_checkpoint
from ..dtypes import BY_CODE, FLOAT_NAMES, name_of, torch_dtype
from ..errors import CheckpointError, ConfigError, StoreMismatchError
from ..files import atomic_write_text
from ..progress import Progress
from ..runtime.device import bound_heap_growth, resolve_device
from ..runtime.phases import PhaseTimer
from ..store.transition_store import StoredTransition
from .channels import ChannelSet, channel_restriction
from .compose import MatrixComposer
from .fidelity import FidelityReport, warn_if_lossy, warn_if_store_rounded
from .rest import REST_FROM, config_differences, resolve_rest, rest_problems
from .spec import VariantSpec

META_FILE = "grrr_variant.json"  # the variant's settings and fidelity, written last (its completion marker)


class VariantBuilder:
    """Builds one variant of one stored transition as a tensor stream.

    Refusals happen here, before anything is built or written: a dtype or rest source
    that does not exist, ``rest_from='base'`` when the base cannot supply the rest, or a channel
    variant without a channel set that fits the transition. ``channels``: the outlier channels (a
    :class:`.channels.ChannelSet` or the path of a channels.json), used by channel variants only.
    """

    def __init__(
        self,
        store: Path,
        spec: VariantSpec,
        *,
        dtype: str = "float32",
        rest_from: str = "base",
        device: str = "auto",
        channels: ChannelSet | Path | str | None = None,
    ):
        if dtype not in FLOAT_NAMES:
            raise ConfigError(f"variant dtype must be one of {', '.join(FLOAT_NAMES)}")
        if rest_from not in REST_FROM:
            raise ConfigError(f"rest_from must be one of {', '.join(REST_FROM)}, got {rest_from!r}")
        bound_heap_growth()
        self.transition = StoredTransition(Path(store))
        self.spec = spec
        self.channels = channel_restriction(spec.channels, channels, self.transition.matrices, spec.name)
        self.dtype = dtype
        self.device = resolve_device(device)
        m = self.transition.manifest
        self.base = Checkpoint.open(Path(m["base_folder"]))
        self.post = Checkpoint.open(Path(m["post_folder"]))
        _check_fingerprints(self.transition, self.base, self.post)
        self.compute_dtype = torch_dtype(m["settings"]["compute_dtype"])
        self.report = FidelityReport(
            spec.name,
            dtype,
            store_dtype=self.transition.store_dtype(),
            base_dtype=self._matrix_dtypes(self.base),
            post_dtype=self._matrix_dtypes(self.post),
            channels=self.channels.metadata() if self.channels else None,
        )
        self.rest_requested = rest_from
        if spec.composed:
            self.rest_from, self.rest_fallback = resolve_rest(rest_from, rest_problems(self.base, self.post))
            self.home = self.base if self.rest_from == "base" else self.post
        else:  # a checkpoint itself: no rest to choose
            self.rest_from, self.rest_fallback = None, None
            self.home = self.base if spec.is_base else self.post
        _refuse_uncopyable(self.home)
        self._layout: Optional[list[TensorSpec]] = None
        self.timer = PhaseTimer()  # seconds per step of the build (tools/bench_variants.py prints them)
        # checkpoint tensor → its decomposed parts (experts of a 3-D tensor, blocks of a split fused one): the
        # variant rebuilds each part and writes the tensor back whole, in the checkpoint's own layout
        self._parts: dict[str, list[tuple[str, dict]]] = {}
        for key, attrs in self.transition.matrices.items():
            if attrs.get("tensor"):
                self._parts.setdefault(attrs["tensor"], []).append((key, attrs))
        self._composer = MatrixComposer(
            spec,
            self.transition,
            self.base,
            self.post,
            self.compute_dtype,
            self.device,
            self.timer,
            self.report,
            self.channels,
        )

    @property
    def home_side(self) -> str:
        """'base' or 'post': the checkpoint that supplies this variant's layout, config and other tensors."""
        return "base" if self.home is self.base else "post"

    def _matrix_dtypes(self, ckpt: Checkpoint) -> str:
        """The dtype(s) of the decomposed matrices in one checkpoint ('bfloat16'; 'bfloat16+float32' if mixed)."""
        codes = {ckpt.tensors[a.get("tensor") or k].dtype for k, a in self.transition.matrices.items()}
        return "+".join(sorted(BY_CODE[c].name for c in codes))

    def _out_dtype(self, name: str, code: str) -> torch.dtype:
        """base/full: the checkpoint's own dtype, every tensor (bit for bit, whatever ``dtype`` is). A composed
        variant: its decomposed matrices in ``dtype``, other tensors of a variant dtype (float64/32/16,
        bfloat16) in ``dtype``, every other dtype (integers, float8, bool, complex) copied as it is."""
        own = BY_CODE[code]
        if not self.spec.composed:
            return own.torch
        if name in self.transition.matrices or name in self._parts or own.name in FLOAT_NAMES:
            return torch_dtype(self.dtype)
        return own.torch

    def layout(self) -> list[TensorSpec]:
        """Every tensor of the output, in the home checkpoint's on-disk order."""
        if self._layout is None:
            infos = sorted(self.home.tensors.values(), key=lambda i: (str(i.shard), i.start))
            self._layout = [TensorSpec(i.name, i.shape, self._out_dtype(i.name, i.dtype)) for i in infos]
        return self._layout

    def config(self) -> dict:
        """The home checkpoint's config.json, ``torch_dtype`` set to the widest floating dtype written."""
        cfg = dict(self.home.config or {})
        floats = {s.dtype for s in self.layout() if s.dtype.is_floating_point}
        name = (
            self.dtype
            if floats <= {torch_dtype(self.dtype)}
            else name_of(max(floats, key=lambda d: torch.finfo(d).bits))
        )
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
        meta = {
            "variant": self.spec.name,
            "components": self.spec.components(),
            "dtype": self.dtype,
            "rest_from": self.rest_from,
            "rest_from_requested": self.rest_requested,
            "rest_fallback": self.rest_fallback,
            "config_from": self.home_side,
            "prompt_format_from": "post",
            "config_differences": self.config_differences(),
            "store": str(self.transition.path),
            "transition": self.transition.manifest["identity"],
        }
        if self.channels is not None:  # only here: other variants' settings (and their MLflow keys) stay as they were
            meta["channels"] = self.channels.metadata()
        return meta

    def tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        for spec in self.layout():
            attrs = self.transition.matrices.get(spec.name)
            parts = self._parts.get(spec.name)
            if parts:
                # start from the home tensor (any part not decomposed keeps it), then put every part in place
                out = self.home.read(spec.name, mapped=False).to(spec.dtype)
                for key, part in parts:
                    rebuilt = self._composer.matrix(key, part, spec.dtype)
                    if part.get("index") is not None:
                        out[part["index"]] = rebuilt
                    else:
                        start, stop = part["rows"]
                        out[start:stop] = rebuilt
                yield spec.name, out
            elif attrs is None:
                with self.timer.phase("other_tensors"):
                    # read into the tensor, not copied from a memory map: the mapped pages would count in the
                    # RSS beside it, a second copy of an embedding while the engine holds its own
                    t = self.home.read(spec.name, mapped=False)
                    t = t if t.dtype == spec.dtype else t.to(spec.dtype)  # same dtype: the bytes as read
                yield spec.name, t
            else:
                yield spec.name, self._composer.matrix(spec.name, attrs, spec.dtype)


def _check_fingerprints(transition: StoredTransition, base: Checkpoint, post: Checkpoint) -> None:
    """Each checkpoint's sampled fingerprint (every shard's name, size and header, and blocks of its data) is the one
    the store recorded when it was decomposed, as ``decompose`` checks it: a variant copies the tensors that were not
    decomposed from these folders unread by any digest, so a checkpoint changed since is refused, not built from."""
    identity = transition.manifest.get("identity") or {}
    for side, ckpt in (("base", base), ("post", post)):
        want = identity.get(f"{side}_fingerprint")
        if want is not None and ckpt.fingerprint() != want:
            raise StoreMismatchError(
                f"the {side} checkpoint {ckpt.folder} differs from the one decomposed into {transition.path} "
                "(its fingerprint); decompose again before building variants"
            )


def _refuse_uncopyable(ckpt: Checkpoint) -> None:
    """Refuse, before anything is built, a checkpoint with a tensor whose dtype has no torch counterpart
    (the sub-byte safetensors codes F4, F6_*): a variant could neither copy nor write it."""
    bad = sorted((i.name, i.dtype) for i in ckpt.tensors.values() if i.dtype not in BY_CODE)
    if bad:
        listed = ", ".join(f"'{n}' ({d})" for n, d in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        codes = ", ".join(sorted({d for _, d in bad}))
        raise CheckpointError(
            f"{ckpt.folder}: variants cannot copy tensors of dtype {codes}: {listed}. Supported: {', '.join(BY_CODE)}"
        )


def variant_folder_done(folder: Path, metadata: dict) -> bool:
    """True if ``folder`` is a finished variant built with exactly these settings."""
    meta = Path(folder) / META_FILE
    if not meta.is_file():
        return False
    try:
        return json.loads(meta.read_text()).get("settings") == metadata
    except json.JSONDecodeError:
        return False


def write_variant(
    builder: VariantBuilder,
    folder: Path,
    *,
    max_shard_bytes: int = 2 * 2**30,
    overwrite: bool = False,
    stream=None,
    within: Optional[Path] = None,
    progress: bool = False,
) -> dict:
    """Write the variant as a Hugging Face folder plus ``<folder>.fidelity.csv`` beside it.

    Returns the fidelity summary. An existing finished folder with the same settings is
    kept (its stored summary returned); one with other settings needs ``overwrite``.
    ``within``: the folder that replacing ``folder`` may delete in (default its parent).
    """
    folder = Path(folder)
    meta = builder.metadata()
    if variant_folder_done(folder, meta) and folder.with_name(folder.name + ".fidelity.csv").is_file():
        return json.loads((folder / META_FILE).read_text())["fidelity"]
    if folder.exists() and not overwrite and not (folder / META_FILE).is_file():
        raise ConfigError(f"{folder} exists and is not a grrr_stream variant; choose another --out")
    if folder.exists() and not overwrite and not variant_folder_done(folder, meta):
        raise ConfigError(f"{folder} holds a variant built with other settings; pass --overwrite to rebuild it")
    # one prompt format per transition: tokenizer, chat template and generation config of the post model
    extra = companion_files(builder.post.folder)

    layout = builder.layout()
    shown = Progress(len(layout), label=f"  [variant {folder.name}] ", enabled=progress)

    def tensors():
        for name, t in builder.tensors():
            yield name, t
            shown.advance(name)  # tensors built and handed to the writer, with an ETA
        # the summary is final only once every matrix went through; store it inside the folder
        extra[META_FILE] = json.dumps({"settings": meta, "fidelity": builder.report.summary()}, indent=2).encode()

    write_checkpoint(
        folder,
        tensors(),
        layout=layout,
        config=builder.config(),
        max_shard_bytes=max_shard_bytes,
        extra_files=extra,
        overwrite=True,
        within=within,
    )
    atomic_write_text(folder.with_name(folder.name + ".fidelity.csv"), builder.report.csv())
    summary = builder.report.summary()
    warn_if_lossy(summary, stream)
    warn_if_store_rounded(summary, stream)
    return summary

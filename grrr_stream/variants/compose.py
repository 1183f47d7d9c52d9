"""One decomposed matrix of a variant, rebuilt from the two checkpoints and the store.

Only one rank-r product is needed per matrix: with ΔW exact from the checkpoints and
ΔW_off = ΔW − ΔW_diag − ΔW_null,

    intended = w_off·ΔW + (w_diag − w_off)·U0 diag(P) V0ᵀ + (w_null − w_off)·ΔW_null,

and the variant's matrix is cast(W0 + intended), measured against ``intended`` by the
fidelity report as it is formed. A channel variant keeps ``intended`` only on one set of residual
channels (:mod:`.channels`): M ⊙ intended, M the 0/1 mask of the set's columns or rows.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from ..checkpoints.reader import Checkpoint, tensor_digest
from ..config import DEGENERATE_GAP
from ..errors import StoreMismatchError
from ..geometry.frame import Frame, compute_frame, project, random_core_coefficients
from ..runtime.phases import PhaseTimer
from ..store.transition_store import StoredTransition
from .channels import ChannelRestriction
from .fidelity import FidelityReport, MatrixFidelity, casts_exactly
from .spec import VariantSpec
from .store_error import combine, rounding


@dataclass
class MatrixComposer:
    """Builds the decomposed matrices of one variant; shares the builder's timer and fidelity report."""

    spec: VariantSpec
    transition: StoredTransition
    base: Checkpoint
    post: Checkpoint
    compute_dtype: torch.dtype
    device: torch.device
    timer: PhaseTimer
    report: FidelityReport
    channels: Optional[ChannelRestriction] = None  # a channel variant's channel set (None: every channel)

    def _frame(self, name: str, attrs: dict, w0: torch.Tensor) -> Frame:
        return stored_frame(self.transition, name, attrs, w0, self.compute_dtype)

    def matrix(self, name: str, attrs: dict, out_dtype: torch.dtype) -> torch.Tensor:
        """The variant's matrix ``name`` in ``out_dtype``; its fidelity row is added to the report."""
        s = self.spec
        weights = (s.diag, s.off, s.null)
        if (
            self.channels is None
            and s.random_removal_seed is None
            and s.band is None
            and weights in ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
        ):
            # W0 or W1 itself (base, full, proj, a zero mix): copied, never recomputed, so that
            # proj's decomposed matrices equal full's bit for bit
            return self._copied(name, attrs, out_dtype, from_post=weights == (1.0, 1.0, 1.0))
        if (
            self.channels is not None
            and s.random_removal_seed is None
            and s.band is None
            and weights == (1.0, 1.0, 1.0)
        ):
            return self._copied_on_channels(name, attrs, out_dtype)
        return self._composed(name, attrs, out_dtype)

    def _read_verified(self, name: str, attrs: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """W0 and W1 of one matrix, checked against the digests the decomposition recorded."""
        with self.timer.phase("read"):
            w0, w1 = self.base.read_matrix(attrs), self.post.read_matrix(attrs)
        with self.timer.phase("verify"):
            for side, ckpt, t, key in (("base", self.base, w0, "base_digest"), ("post", self.post, w1, "post_digest")):
                _verify(ckpt, name, attrs, t, attrs[key], side, self.transition.path)
        return w0, w1

    def _copied(self, name: str, attrs: dict, out_dtype: torch.dtype, *, from_post: bool) -> torch.Tensor:
        w0, w1 = self._read_verified(name, attrs)
        src = w1 if from_post else w0
        with self.timer.phase("cast"):
            out = src.to(out_dtype)
        if casts_exactly(src.dtype, out_dtype):
            # the cast keeps every value: the realised update is the intended one exactly, and its
            # norm, ‖W1 − W0‖ or 0, is on record from the decomposition (no pass over the matrix)
            norm = 0.0 if src is w0 else float(attrs["metrics"]["delta_fro"])
            self.report.add(
                MatrixFidelity(name, attrs["layer"], attrs["module"], norm, 0.0, 0.0, 1.0, 0.0, attrs.get("expert"))
            )
        else:
            with self.timer.phase("fidelity"):
                self.report.account(
                    name, attrs["layer"], attrs["module"], w0, out, None, 0.0, source=src, expert=attrs.get("expert")
                )
        return out

    def _copied_on_channels(self, name: str, attrs: dict, out_dtype: torch.dtype) -> torch.Tensor:
        """channels-outlier / channels-rest: W1's entries on the kept channels and W0's on the others, copied,
        never recomputed, so that outlier + rest − W0 = W1 = proj entry by entry (before the cast)."""
        w0, w1 = self._read_verified(name, attrs)
        with self.timer.phase("cast"):
            src = self.channels.merge(name, w0, w1)
            out = src.to(out_dtype)
        self.report.unrestricted[name] = float(attrs["metrics"]["delta_fro"]) ** 2
        with self.timer.phase("fidelity"):  # also the restricted update's norm, needed for the channel share
            if casts_exactly(src.dtype, out_dtype):
                # the intended update is realised exactly: only its norm, from the kept channels alone
                norm = self.channels.kept_update_norm(name, w0, w1)
                self.report.add(
                    MatrixFidelity(name, attrs["layer"], attrs["module"], norm, 0.0, 0.0, 1.0, 0.0, attrs.get("expert"))
                )
            else:
                del w1
                self.report.account(
                    name, attrs["layer"], attrs["module"], w0, out, None, 0.0, source=src, expert=attrs.get("expert")
                )
        return out

    def _composed(self, name: str, attrs: dict, out_dtype: torch.dtype) -> torch.Tensor:
        """cast(W0 + intended), intended = w_off·ΔW + (w_diag − w_off)·U0 diag(P) V0ᵀ + (w_null − w_off)·ΔW_null
        (± a band block, − a random control); W1 and the intermediates are dropped as soon as they are used."""
        s, cd, dev = self.spec, self.compute_dtype, self.device
        w0, w1 = self._read_verified(name, attrs)
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
        removed = 0.0
        frame = None
        rounded: list = []  # (weight, store rounding) of each stored part used: see variant_store_error
        if s.diag != s.off or s.random_removal_seed is not None or s.band is not None:
            frame, removed = self._add_frame_terms(name, attrs, w0, intended, rounded)
        if s.null != s.off and attrs.get("null_stored"):
            with self.timer.phase("null_read"):
                null = self.transition.read_tensor(name, "null")
                intended.add_(null.to(device=dev, dtype=cd), alpha=s.null - s.off)
            with self.timer.phase("store_error"):  # of the entries the variant keeps
                kept = null if self.channels is None else self.channels.kept(name, null)
                rounded.append((s.null - s.off, rounding(kept, cd)))
            del null
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
        if self.channels is not None:
            self.channels.restrict(name, intended)
            m = attrs["metrics"]  # the components are orthogonal: ‖Σ w_c ΔW_c‖² = Σ w_c² e_c
            self.report.unrestricted[name] = s.diag**2 * m["e_diag"] + s.off**2 * m["e_off"] + s.null**2 * m["e_null"]
        out = torch.empty(w0.shape, dtype=out_dtype)
        with self.timer.phase("fidelity"):  # also forms out = cast(W0 + intended)
            self.report.account(
                name,
                attrs["layer"],
                attrs["module"],
                w0,
                out,
                intended,
                removed,
                fill=True,
                expert=attrs.get("expert"),
                store=combine(rounded),
            )
        return out

    def _add_frame_terms(
        self, name: str, attrs: dict, w0: torch.Tensor, intended: torch.Tensor, rounded: list
    ) -> tuple[Frame, float]:
        """Add to ``intended`` the terms in the base frame: the band block, (w_diag − w_off)·U0 diag(P) V0ᵀ and
        minus the random control. Returns the frame and the norm of what a band or control variant removes;
        appends to ``rounded`` the store's rounding of the parts of P used."""
        s, cd, dev, timer = self.spec, self.compute_dtype, self.device, self.timer
        removed = 0.0
        with timer.phase("frame_read"):
            frame = self._frame(name, attrs, w0)
            U, V = frame.U.to(dev), frame.V.to(dev)
        with timer.phase("p_read"):
            P = self.transition.read_tensor(name, "P")
        with timer.phase("store_error"):
            kept = None if self.channels is None else self.channels.frame_weights(name, U, V)
            rounded += _p_rounding(s, P, cd, kept)
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
        return frame, removed


def stored_frame(
    transition: StoredTransition, name: str, attrs: dict, w0: torch.Tensor, compute_dtype: torch.dtype
) -> Frame:
    """The base frame of matrix ``name`` as the decomposition used it: from the store's frame cache, or
    recomputed (with a warning) with the decomposition's settings when the cache lacks it."""
    cache = transition.frame_cache()
    frame = cache.get(attrs["frame_key"], compute_dtype, shape=tuple(w0.shape)) if cache else None
    if frame is None:
        warnings.warn(f"base frame of {name} not in the frame cache; recomputing its SVD", stacklevel=3)
        settings = transition.manifest["settings"]
        frame = compute_frame(
            w0.to(compute_dtype),
            settings["core_rel_threshold"],
            degenerate_gap=settings.get("degenerate_gap", DEGENERATE_GAP),
        )
    return frame


def _p_rounding(s: VariantSpec, P: torch.Tensor, cd: torch.dtype, kept: Optional[torch.Tensor] = None) -> list:
    """(weight, store rounding) of the parts of the stored P a variant uses: its diagonal (weighted
    w_diag − w_off), the band block off its diagonal, and ‖diag P‖ that scales the random control (an error
    of ⟨p, δp⟩/‖p‖, at most ‖δp‖). ``kept``: a channel variant's weight of each diagonal entry in its
    restricted update (:meth:`.channels.ChannelRestriction.frame_weights`)."""
    out = []
    p = torch.diagonal(P)
    if s.diag != s.off:
        out.append((s.diag - s.off, rounding(p, cd, kept)))
    if s.band is not None:
        k = min(s.band, P.shape[0])
        off_diagonal = 1.0 - torch.eye(k, dtype=torch.float64)
        out.append((s.band_weight, rounding(P[:k, :k], cd, off_diagonal)))
    if s.random_removal_seed is not None:
        norm = float(torch.linalg.vector_norm(p.double()))
        if norm > 0:
            expected = rounding(p, cd, p.double() / norm)[0]
            out.append((1.0, (expected, rounding(p, cd)[1])))
    return out


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
        raise StoreMismatchError(
            f"{name} in the {side} checkpoint differs from the one decomposed into {store}; "
            "decompose again before building variants"
        )
    _VERIFIED.add(key)


def _seed_for(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"randrm:{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)

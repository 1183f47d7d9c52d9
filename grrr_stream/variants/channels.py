"""Channel variants: an update kept only on one set of residual channels .

The set is the outlier channels of a ``channels.json`` (written by ``grrr-stream channels``:
``result["base"]["channels"]``, a list of residual channel indices) or their complement. A decomposed
matrix touches the residual stream along one axis, the one :func:`grrr_stream.geometry.channel_energy.residual_axis`
names (readers — q/k/v, fused qkv, gate/up, fused gate_up, experts' gate/up, routers — along their input,
the columns of a Linear weight; writers — o, down — along their output, its rows; a slice of a 3-D expert
tensor the other way round, as stored). Restricting an update X to a channel set C along that axis is
M ⊙ X with M the 0/1 mask of C's columns (or rows): the kept entries are X's own values, the others 0,
so the ``outlier`` and ``rest`` restrictions of one update add up to it exactly.

Only decomposed matrices are restricted; the tensors that are not decomposed (embeddings, norms,
``lm_head``, biases) come from the rest source, as for every composed variant.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

import torch

from ..checkpoints.arch import MatrixName
from ..errors import ConfigError
from ..geometry.channel_energy import residual_axis

ROLES = ("base", "post")


@dataclass(frozen=True)
class ChannelSet:
    """The outlier channels of one model, as read from a channels.json."""

    channels: tuple[int, ...]  # sorted, distinct, non-negative
    source: str  # the file they were read from
    role: str = "base"  # which model of the file: 'base' or 'post'
    hidden_size: Optional[int] = None  # the hidden size the file records, when it does

    @property
    def digest(self) -> str:
        """What identifies the set (not the file it came from): a hash of the sorted channel list."""
        return hashlib.sha256(json.dumps(list(self.channels)).encode()).hexdigest()[:16]

    def describe(self) -> dict:
        return {"file": self.source, "role": self.role, "count": len(self.channels), "digest": self.digest}


def load_channels(path: Path | str, role: str = "base") -> ChannelSet:
    """The channel set ``result[role]["channels"]`` of a channels.json; refused with the fix when the file is
    missing, not JSON, has no such list, or the list holds anything but distinct non-negative integers."""
    if role not in ROLES:
        raise ConfigError(f"channels role must be one of {', '.join(ROLES)}, got {role!r}")
    path = Path(path)
    where = f"channels file {path}"
    if not path.is_file():
        raise ConfigError(f"{where} does not exist; write one with `grrr-stream channels` (its channels.json)")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{where} is not JSON ({e})") from None
    record = data.get(role) if isinstance(data, dict) else None
    if not isinstance(record, dict) or "channels" not in record:
        raise ConfigError(f"{where} has no {role}.channels list (the format `grrr-stream channels` writes)")
    raw = record["channels"]
    if not isinstance(raw, list) or not all(isinstance(c, int) and not isinstance(c, bool) for c in raw):
        raise ConfigError(f"{where}: {role}.channels must be a list of integers")
    bad = sorted(c for c in raw if c < 0)
    if bad:
        raise ConfigError(f"{where}: negative channel indices {bad[:10]}")
    if len(set(raw)) != len(raw):
        raise ConfigError(f"{where}: {role}.channels lists a channel twice")
    hidden = record.get("hidden_size")
    return ChannelSet(tuple(sorted(raw)), str(path), role, hidden if isinstance(hidden, int) else None)


def matrix_axis(name: str, attrs: Mapping) -> Optional[int]:
    """The residual axis of a stored matrix from its store attributes (the decomposition's own rule)."""
    return residual_axis(MatrixName(attrs["layer"], attrs["module"], name, index=attrs.get("index")))


@dataclass
class ChannelRestriction:
    """Keeps a variant's update on one channel set of every decomposed matrix: ``keep`` 'outlier' (the set's
    channels) or 'rest' (all others)."""

    keep: str
    channel_set: ChannelSet
    hidden: int  # the residual dimension of the transition's matrices
    axes: dict[str, int]  # matrix key → its residual axis
    _index: dict[tuple[str, str], torch.Tensor] = field(default_factory=dict, repr=False)

    def _indices(self, which: str, device: torch.device) -> torch.Tensor:
        """Sorted channel indices of ``which`` ('kept' or 'dropped') on ``device``."""
        key = (which, str(device))
        if key not in self._index:
            mask = torch.zeros(self.hidden, dtype=torch.bool)
            mask[list(self.channel_set.channels)] = True
            if (which == "kept") != (self.keep == "outlier"):
                mask = ~mask
            self._index[key] = torch.nonzero(mask).flatten().to(device)
        return self._index[key]

    def restrict(self, name: str, update: torch.Tensor) -> None:
        """In place: zero ``update``'s entries on the channels this restriction drops."""
        axis = self.axes[name]
        update.index_fill_(axis, self._indices("dropped", update.device), 0.0)

    def merge(self, name: str, w0: torch.Tensor, w1: torch.Tensor) -> torch.Tensor:
        """W1's entries on the kept channels, W0's on the others (in the wider of their dtypes: exact)."""
        axis, dtype = self.axes[name], torch.promote_types(w0.dtype, w1.dtype)
        idx = self._indices("kept", w0.device)
        return w0.to(dtype, copy=True).index_copy_(axis, idx, w1.index_select(axis, idx).to(dtype))

    def kept_update_norm(self, name: str, w0: torch.Tensor, w1: torch.Tensor) -> float:
        """‖M ⊙ (W1 − W0)‖ in float64, from the kept channels' entries only."""
        a, b = self.kept(name, w0).double(), self.kept(name, w1).double()
        return float(torch.linalg.vector_norm(b.sub_(a)))

    def kept(self, name: str, t: torch.Tensor) -> torch.Tensor:
        """The entries of an m×n matrix ``t`` (e.g. a stored null residual) on the kept channels."""
        return t.index_select(self.axes[name], self._indices("kept", t.device))

    def frame_weights(self, name: str, U: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        """w_i = ‖F[C, i]‖ for each frame direction i, F = V (channels along columns) or U (along rows), C the
        kept channels: ‖M ⊙ (U diag(δ) Vᵀ)‖² = Σ_i δ_i² w_i² (U, V orthonormal), so a rounding δ of diag P
        weighs w_i in the restricted update."""
        F = V if self.axes[name] == 1 else U
        return torch.linalg.vector_norm(F.index_select(0, self._indices("kept", F.device)).double(), dim=0)

    def metadata(self) -> dict:
        return {"set": self.keep, "hidden": self.hidden, **self.channel_set.describe()}


def channel_restriction(
    keep: Optional[str], channel_set: ChannelSet | Path | str | None, matrices: Mapping[str, dict], variant: str
) -> Optional[ChannelRestriction]:
    """The restriction of a variant on a transition's stored ``matrices``; None for a variant without one.

    Refused before anything is built: a channel variant without a channel set, a store with matrices outside
    the residual stream (a custom module_pattern's modules: no channel to restrict them to), matrices whose
    residual dimensions differ, a set recorded for another hidden size, or channels out of range."""
    if keep is None:
        return None
    if channel_set is None:
        raise ConfigError(
            f"variant '{variant}' keeps the update on the {keep} channels: give the outlier channels "
            "(a channels.json written by `grrr-stream channels`: --channels PATH, or variants.channels "
            "in a sweep)"
        )
    if not isinstance(channel_set, ChannelSet):
        channel_set = load_channels(channel_set)
    axes = {name: matrix_axis(name, a) for name, a in matrices.items()}
    outside = sorted({a["module"] for name, a in matrices.items() if axes[name] is None})
    if outside:
        raise ConfigError(
            f"variant '{variant}': modules {', '.join(outside)} neither read nor write the residual "
            "stream, so no residual channel restricts them; decompose without them (modules) to "
            "build channel variants"
        )
    dims = {int(a["shape"][axes[name]]) for name, a in matrices.items()}
    if len(dims) != 1:
        raise ConfigError(
            f"variant '{variant}': the decomposed matrices disagree on the residual dimension "
            f"({sorted(dims)}); channel variants need one hidden size"
        )
    hidden = dims.pop()
    where = f"variant '{variant}': channels file {channel_set.source}"
    if channel_set.hidden_size is not None and channel_set.hidden_size != hidden:
        raise ConfigError(
            f"{where} is for hidden size {channel_set.hidden_size}, this transition's residual stream "
            f"has {hidden} channels: use the channels.json of this transition's base model"
        )
    out_of_range = [c for c in channel_set.channels if c >= hidden]
    if out_of_range:
        raise ConfigError(
            f"{where} lists channels {out_of_range[:10]} out of range for hidden size {hidden} (0..{hidden - 1})"
        )
    return ChannelRestriction(keep, channel_set, hidden, axes)

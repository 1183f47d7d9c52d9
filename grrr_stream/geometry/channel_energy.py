"""Per residual channel, the energy each component of one matrix's update puts on that channel.

Every decomposed matrix reads the residual stream or writes it. A *reader* (q/k/v and fused
qkv, gate/up and fused gate_up, MoE experts' gate/up — Mixtral's w1/w3 — and the routers) takes the
residual stream as its input: its residual channel j is column j of W (torch's Linear layout, out×in).
A *writer* (o, down, Mixtral's w2) adds its output to the stream: channel i is row i of W. A slice of a
3-D expert tensor is stored the other way round (gpt-oss: gate_up E×hidden×2I, down E×I×hidden, sliced
as stored: :mod:`grrr_stream.checkpoints.arch`), so there a reader's channels are rows and a writer's columns.

With W0 = U0 Σ0 V0ᵀ, P = U0ᵀ ΔW V0, D = diag P and N the null residual, for channels along the columns
(n of them) of an m×n matrix:

    diag   ‖U0 D V0[j,:]ᵀ‖²       = Σ_i p_i² V0[j,i]²          (U0 has orthonormal columns)
    off    ‖U0 (P−D) V0[j,:]ᵀ‖²   = ‖row j of V0 (P−D)ᵀ‖²
    null   ‖N[:, j]‖²

and symmetrically along the rows with U0 (rows of U0 (P−D)). Summed over channels they give exactly
the metrics' ‖diag P‖², ‖P − diag P‖² and ‖ΔW_null‖² (V0 and U0 have orthonormal columns). The cost is
one r×r-by-n product per matrix, next to the projection's two, unless the frame's side along the channels is
complete (untruncated core; the columns of a tall matrix, the rows of a wide one, either of a square one): then
the projection's own intermediate is V0 Pᵀ (or U0 P), and the off rows are V0 Pᵀ − V0 D, one subtraction
(``Projection.lifted``). On Qwen2.5-1.5B shapes that took the channels' cost from 2.2 to 0.6 CPU s a transition.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..checkpoints.arch import MatrixName

COMPONENTS = ("diag", "off", "null")
ROWS = 1024  # channels per block of the products below
READERS = frozenset(
    {"q_proj", "k_proj", "v_proj", "qkv_proj", "gate_proj", "up_proj", "gate_up_proj", "gate", "router", "w1", "w3"}
)
WRITERS = frozenset({"o_proj", "down_proj", "w2"})


def side(module: str) -> Optional[str]:
    """'reader', 'writer', or None for a module outside the residual stream (none of the supported
    families has one; a custom module_pattern's unknown modules get no channel energies)."""
    return "reader" if module in READERS else "writer" if module in WRITERS else None


def residual_axis(m: MatrixName) -> Optional[int]:
    """The axis of the stored matrix that indexes residual channels: 1 (columns) or 0 (rows), or None."""
    s = side(m.module)
    if s is None:
        return None
    linear = 1 if s == "reader" else 0  # Linear weights are out×in
    return 1 - linear if m.index is not None else linear  # 3-D expert slices are in×out


def channel_energies(
    P: torch.Tensor,
    null: torch.Tensor,
    U: torch.Tensor,
    V: torch.Tensor,
    axis: int,
    lifted: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """(channels, 3) float64: diag, off and null energy per channel along ``axis`` (see the module doc).

    P is r×r in the frame (U m×r, V n×r); ``null`` the m×n null residual, in the compute dtype. ``lifted``:
    V Pᵀ (axis 1) or U P (axis 0), where the projection kept it (``Projection.lifted`` of project(lift=axis))."""
    F = V if axis == 1 else U
    d = torch.diagonal(P)
    p2 = d.square()
    off = None
    if lifted is None:
        off = P.clone()
        off.diagonal().zero_()
        off = off.mT if axis == 1 else off  # rows of V0 (P−D)ᵀ, or of U0 (P−D)
    e_diag, e_off = torch.empty_like(F[:, 0]), torch.empty_like(F[:, 0])
    for a in range(0, F.shape[0], ROWS):  # blocks of channels: no n×r temporary beside the frame (14B: 100 MB)
        block = F[a : a + ROWS]
        e_diag[a : a + ROWS] = block.square() @ p2
        if lifted is None:
            e_off[a : a + ROWS] = (block @ off).square().sum(dim=1)  # the one r×r-by-n product, in blocks
        else:
            e_off[a : a + ROWS] = torch.sub(lifted[a : a + ROWS], block * d).square().sum(dim=1)  # F P − F D
    e_null = squared_norms(null, axis)
    return torch.stack([e_diag, e_off, e_null], dim=1).to(torch.float64)


NULL_ROWS = 256  # rows of the null residual per block of squares (1.5 MiB of a 1536-wide float32 matrix)


def squared_norms(X: torch.Tensor, axis: int) -> torch.Tensor:
    """Squared norms of X's columns (axis 1) or rows (axis 0), in X's dtype, no m×n temporary. Along the rows
    ``vector_norm(dim=1)`` reads contiguous memory (1536 × 8960 float32: 2.3 ms on one thread, relative error
    8e-7); down the strided columns it took 101 ms on 8960 × 1536, with 6e-6 error, so the columns' squares
    are summed a block of rows at a time (5 ms, 3e-7; the temporaries stay in the CPU's cache)."""
    if axis == 0:
        return torch.linalg.vector_norm(X, dim=1).square()
    out = X.new_zeros(X.shape[1])
    for a in range(0, X.shape[0], NULL_ROWS):
        out += X[a : a + NULL_ROWS].square().sum(dim=0)
    return out

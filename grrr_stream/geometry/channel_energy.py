"""Per residual channel, the energy each component of one matrix's update puts on that channel.

Every decomposed matrix reads the residual stream or writes it (issue 24). A *reader* (q/k/v and fused
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
one r×r-by-n product per matrix, next to the projection's two.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..checkpoints.arch import MatrixName

COMPONENTS = ("diag", "off", "null")
ROWS = 1024  # channels per block of the products below
READERS = frozenset({"q_proj", "k_proj", "v_proj", "qkv_proj", "gate_proj", "up_proj", "gate_up_proj",
                     "gate", "router", "w1", "w3"})
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


def channel_energies(P: torch.Tensor, null: torch.Tensor, U: torch.Tensor, V: torch.Tensor,
                     axis: int) -> torch.Tensor:
    """(channels, 3) float64: diag, off and null energy per channel along ``axis`` (see the module doc).

    P is r×r in the frame (U m×r, V n×r); ``null`` the m×n null residual, in the compute dtype."""
    F = V if axis == 1 else U
    p2 = torch.diagonal(P).square()
    off = P.clone()
    off.diagonal().zero_()
    off = off.mT if axis == 1 else off  # rows of V0 (P−D)ᵀ, or of U0 (P−D)
    e_diag, e_off = torch.empty_like(F[:, 0]), torch.empty_like(F[:, 0])
    for a in range(0, F.shape[0], ROWS):  # blocks of channels: no n×r temporary beside the frame (14B: 100 MB)
        block = F[a:a + ROWS]
        e_diag[a:a + ROWS] = block.square() @ p2
        e_off[a:a + ROWS] = (block @ off).square().sum(dim=1)  # the one r×r-by-n product, in blocks
    e_null = torch.linalg.vector_norm(null, dim=0 if axis == 1 else 1).square()  # a reduction, no m×n temporary
    return torch.stack([e_diag, e_off, e_null], dim=1).to(torch.float64)

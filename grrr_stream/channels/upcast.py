"""Decoder linear maps of a 16-bit checkpoint computed in float32/float64 without a float32 copy.

An offloaded bf16 checkpoint computed in float32: accelerate reads each offloaded linear's bf16
weight for its forward; a float32 copy of it (340 MiB for a 14B MLP matrix) would sit next to
those pages. Instead y = x·Wᵀ (+ b) is computed in the compute dtype with W upcast a slice of
rows at a time. Used by :func:`.activations.load_model`; the embedding and LM head are read by
slices from the checkpoint instead (:mod:`.sliced`) when their tensors can be located.
"""

from __future__ import annotations

from typing import Callable

import torch

_HALF = (torch.bfloat16, torch.float16)
HEAD_CHUNK_BYTES = 64 * 2**20  # rows of a kept Linear (LM head, decoder linears) upcast at a time


def storage_dtype_modules(
    model: torch.nn.Module, layers: torch.nn.ModuleList, dtype: torch.dtype
) -> list[torch.nn.Module]:
    """The modules that can keep a 16-bit checkpoint's weights while computing in float32/float64
    with the same values: the input embedding and LM head (vocab × hidden, the largest blocks of an
    LLM: 2.9 GiB each in float32 for a 14B model) and the decoder layers' linear maps (q/k/v/o,
    gate/up/down: a float32 copy of one, 340 MiB for a 14B MLP matrix, would sit next to its bf16
    pages, and the layer's cast weights would add up while it runs).

    Only plain ``nn.Embedding`` / ``nn.Linear`` modules qualify (a subclass may compute on its weight
    in its own dtype, e.g. an embedding scaled in bf16), the embedding and LM head bias-free, every
    parameter 16-bit; a weight tied to any other module qualifies only if that module is kept too
    (tied embeddings: one stored tensor)."""
    if dtype not in (torch.float32, torch.float64):
        return []
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    io = [
        m
        for m in (emb, head)
        if m is not None and type(m) in (torch.nn.Embedding, torch.nn.Linear) and getattr(m, "bias", None) is None
    ]
    linears = [m for layer in layers for m in layer.modules() if type(m) is torch.nn.Linear]
    kept = [m for m in dict.fromkeys(io + linears) if all(p.dtype in _HALF for p in m.parameters(recurse=False))]
    while True:  # drop a module whose weight another module (outside the kept ones) also holds
        ids = {id(p) for m in kept for p in m.parameters(recurse=False)}
        shared = {
            id(p)
            for m in model.modules()
            if all(m is not k for k in kept)
            for p in m._parameters.values()
            if p is not None and id(p) in ids
        }
        if not shared:
            return kept
        kept = [m for m in kept if not any(id(p) in shared for p in m.parameters(recurse=False))]


def compute_in(modules: list[torch.nn.Module], dtype: torch.dtype) -> None:
    """Make the kept 16-bit modules return ``dtype`` with the values of a ``dtype`` copy.

    Embedding: rows are looked up in the stored dtype and upcast (exact, so bit-identical to a
    lookup in an upcast copy). Linear (LM head, decoder linears): y = x @ Wᵀ (+ b) in ``dtype``, W
    upcast a slice of rows at a time, so at most one slice of one module's weight exists upcast
    (each output is the same dot product as with an upcast copy; only BLAS blocking may differ, and
    a weight within one slice is upcast whole: the same call as on an upcast copy)."""
    for m in modules:
        if isinstance(m, torch.nn.Embedding):
            m.register_forward_hook(lambda mod, args, out: out.to(dtype))
            continue
        forward = chunked_upcast_linear(m, dtype)
        # accelerate's hook on an offloaded module loads the weight, calls ``_old_forward``, drops it
        if hasattr(m, "_hf_hook") and hasattr(m, "_old_forward"):
            m._old_forward = forward
        else:
            m.forward = forward


def chunked_upcast_linear(m: torch.nn.Linear, dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    rows = max(1, HEAD_CHUNK_BYTES // (m.in_features * torch.empty((), dtype=dtype).element_size()))

    def forward(x: torch.Tensor) -> torch.Tensor:
        x = x.to(dtype)
        w, b = m.weight, m.bias
        if w.shape[0] <= rows:  # one slice: exactly F.linear on the upcast weight and bias
            return torch.nn.functional.linear(x, w.to(dtype), None if b is None else b.to(dtype))
        out = x.new_empty(*x.shape[:-1], w.shape[0])
        for s in range(0, w.shape[0], rows):
            out[..., s : s + rows] = torch.nn.functional.linear(
                x, w[s : s + rows].to(dtype), None if b is None else b[s : s + rows].to(dtype)
            )
        return out

    return forward

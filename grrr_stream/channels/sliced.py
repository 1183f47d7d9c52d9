"""The input embedding and the LM head of an offloaded model, read from the checkpoint a slice of rows at a time.

They are the largest blocks of an LLM (vocab × hidden: 1.45 GiB each in bf16 for a 14B model with a
152k vocabulary). accelerate's hook on an offloaded block reads its whole weight for every forward,
so one of them set the calibration pass's peak. Here neither is ever materialised:

- **Embedding**: the rows of the batch's distinct token ids only (read as runs of consecutive ids),
  upcast to the compute dtype into a small table; the module's own ``forward`` (a subclass's too,
  e.g. Gemma3's scaled embedding) runs on that table with the ids renumbered into it, so the result
  is the lookup an upcast copy of the whole table gives, value for value.
- **LM head** (a plain ``nn.Linear``): y = x·Wᵀ (+ b) in the compute dtype, W read and upcast
  ``SLICE_BYTES`` of rows at a time into a preallocated output (each logit is the same dot
  product; only BLAS blocking may differ from one call on the whole matrix).

The tensors are located through accelerate's offload index (what transformers built: the original
safetensors file and tensor name of every "disk" weight, a tied LM head pointing at the embedding's
tensor) and read with :meth:`grrr_stream.checkpoints.reader.Checkpoint.read_part` as a plain file read of each slice
(``mapped=False``: a memory map counted the copied pages twice in the peak RSS), so no page of the table
stays resident between slices.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from ..checkpoints.reader import Checkpoint

SLICE_BYTES = 16 * 2**20  # LM head rows read and upcast at a time (in the compute dtype)


class RowSource:
    """Row blocks [start, stop) of one 2-D checkpoint tensor, read on demand in the stored dtype."""

    def __init__(self, checkpoint, name: str):
        self.checkpoint, self.name = checkpoint, name
        self.shape = tuple(checkpoint.tensors[name].shape)

    def rows(self, start: int, stop: int) -> torch.Tensor:
        return self.checkpoint.read_part(self.name, rows=(start, stop), mapped=False)

    def gather(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` (sorted, distinct), one read per run of consecutive ids."""
        ids = ids.tolist()
        parts, start = [], 0
        for i in range(1, len(ids) + 1):
            if i == len(ids) or ids[i] != ids[i - 1] + 1:
                parts.append(self.rows(ids[start], ids[i - 1] + 1))
                start = i
        return torch.cat(parts) if len(parts) > 1 else parts[0]


def offloaded_from_safetensors(model: torch.nn.Module):
    """(qualified name, parameter, tensor name in the checkpoint, its safetensors file) for every parameter
    that accelerate left on disk in a checkpoint's own safetensors file (its offload hook's weights map);
    a weight re-saved into the offload folder is not among them."""
    for module in model.modules():
        wm = getattr(getattr(module, "_hf_hook", None), "weights_map", None)
        index = getattr(getattr(wm, "dataset", None), "index", None)
        if not index:
            continue
        for pname, p in module._parameters.items():
            info = index.get(f"{wm.prefix}{pname}")
            if p is not None and info and "safetensors_file" in info:
                yield (
                    f"{wm.prefix}{pname}",
                    p,
                    info.get("weight_name", f"{wm.prefix}{pname}"),
                    info["safetensors_file"],
                )


def offload_sources(model: torch.nn.Module, model_dir: Path) -> dict[int, RowSource]:
    """id(parameter) → its tensor in the checkpoint, for every 2-D parameter accelerate offloaded
    from a safetensors file (a weight re-saved into the offload folder is not in the map)."""
    ckpt, found = None, {}
    for _, p, name, file in offloaded_from_safetensors(model):
        if p.dim() != 2:
            continue
        ckpt = ckpt or Checkpoint.open(Path(model_dir))
        t = ckpt.tensors.get(name)
        if t is not None and Path(t.shard).resolve() == Path(file).resolve() and tuple(t.shape) == tuple(p.shape):
            found[id(p)] = RowSource(ckpt, name)
    return found


def sliced_modules(model: torch.nn.Module, sources: dict[int, RowSource]) -> list[torch.nn.Module]:
    """The input embedding (any ``nn.Embedding``) and the LM head (a plain ``nn.Linear`` without
    bias) whose weight is in ``sources``; a weight tied to a module outside them keeps them out."""
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    chosen = [
        m
        for m in dict.fromkeys((emb, head))
        if m is not None
        and id(m.weight) in sources
        and (isinstance(m, torch.nn.Embedding) or (type(m) is torch.nn.Linear and m.bias is None))
        and all(n == "weight" for n, p in m.named_parameters())
    ]
    ids = {id(m.weight) for m in chosen}
    for m in model.modules():
        if all(m is not c for c in chosen) and any(id(p) in ids for p in m._parameters.values() if p is not None):
            return []
    return chosen


def install(modules: list[torch.nn.Module], sources: dict[int, RowSource], dtype: torch.dtype) -> None:
    """Replace each module's accelerate hook by a forward that reads its rows from the checkpoint;
    its parameter stays on the meta device."""
    from accelerate.hooks import remove_hook_from_module

    for m in modules:
        remove_hook_from_module(m)
        src = sources[id(m.weight)]
        m.forward = (
            _embedding_forward(m, src, dtype) if isinstance(m, torch.nn.Embedding) else _linear_forward(src, dtype)
        )


def _embedding_forward(m: torch.nn.Embedding, src: RowSource, dtype: torch.dtype) -> Callable:
    own = type(m).forward

    def forward(ids: torch.Tensor) -> torch.Tensor:
        distinct, inverse = torch.unique(ids, sorted=True, return_inverse=True)
        table = torch.nn.Parameter(src.gather(distinct).to(dtype), requires_grad=False)
        saved, padding = m._parameters["weight"], m.padding_idx
        # padding_idx only masks gradients; it indexes the whole table, not this one
        m._parameters["weight"], m.padding_idx = table, None
        try:
            return own(m, inverse)
        finally:
            m._parameters["weight"], m.padding_idx = saved, padding

    return forward


def _linear_forward(src: RowSource, dtype: torch.dtype) -> Callable:
    n_out, n_in = src.shape
    rows = max(1, SLICE_BYTES // (n_in * torch.empty((), dtype=dtype).element_size()))

    def forward(x: torch.Tensor) -> torch.Tensor:
        x = x.to(dtype)
        out = x.new_empty(*x.shape[:-1], n_out)
        for s in range(0, n_out, rows):
            e = min(s + rows, n_out)
            out[..., s:e] = torch.nn.functional.linear(x, src.rows(s, e).to(dtype))
        return out

    return forward

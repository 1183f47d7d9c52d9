"""Per-channel activation RMS of the residual stream at every decoder layer's input.

The model is loaded by transformers' ``from_pretrained`` with an explicit accelerate ``device_map``
(one entry per decoder layer and per other top-level block): blocks stay in memory while their
weights fit a resident-weights budget (``max_memory``), the rest are "disk". For a safetensors
checkpoint, accelerate's offload index points at the original files, so nothing is copied and no
"disk" weight is materialised while loading; accelerate's ``AlignDevicesHook`` reads each
offloaded module's weights for its own forward and drops them afterwards. Once anything is
offloaded, the embedding and LM head (vocab × hidden, the largest blocks) are never loaded at all:
:mod:`.sliced` reads the looked-up rows and the head a slice of rows at a time from the checkpoint.
A 16-bit checkpoint computed in float32 keeps its decoder layers' plain linear maps in its own
dtype, upcast a slice of rows at a time (:mod:`.upcast`); every other weight is
cast to the compute dtype. Peak RSS: the process baseline + the resident blocks + the largest
offloaded module + one batch's activations and logits (tools/bench_channels.py, docs/channels.md).
No forward pass is written here: the model's own ``forward`` runs; forward pre-hooks on the
decoder layers read their input (the residual stream) and accumulate Σx² per channel in float64.
"""

from __future__ import annotations

import contextlib
import copy
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np
import torch

from ..errors import CheckpointError, CheckpointNotFoundError, ConfigError
from ..files import atomic_write_text, to_csv
from . import logprobs, sliced, validate
from .defaults import DEFAULT_MAX_MEMORY

# the model's config and layer list, shared with validate.py (a leaf, so validate need not import this module)
from .model_config import config_from, decoder_layers, need, text_config
from .upcast import compute_in, storage_dtype_modules


def checkpoint_bytes(model_dir: Path) -> int:
    return sum(p.stat().st_size for p in Path(model_dir).glob("*.safetensors"))


def parse_bytes(text: str) -> int:
    units = {"gib": 2**30, "mib": 2**20, "kib": 2**10, "gb": 10**9, "mb": 10**6, "kb": 10**3, "b": 1}
    t = str(text).strip().lower()
    for u, f in units.items():
        if t.endswith(u) and t[: -len(u)].strip().replace(".", "", 1).isdigit():
            return int(float(t[: -len(u)]) * f)
    if t.isdigit():
        return int(t)
    raise ConfigError(f"memory size {text!r}: write e.g. 1GiB, 512MiB or a number of bytes")


@dataclass
class Loaded:
    model: torch.nn.Module
    layers: torch.nn.ModuleList
    final_norm: torch.nn.Module
    offloaded: bool
    config: object
    offload_copied_bytes: int = 0  # bytes written to the offload folder (0: weights read from the checkpoint)
    sliced: tuple[str, ...] = ()  # modules read from the checkpoint a slice of rows at a time (.sliced)
    head: Optional[logprobs.HeadRows] = None  # the LM head's rows: log-probabilities without full logits
    dtype: torch.dtype = torch.float32  # the compute dtype


def module_name(model: torch.nn.Module, module: torch.nn.Module | None) -> str | None:
    return next((n for n, m in model.named_modules() if m is module), None) if module is not None else None


def layerwise_device_map(
    model: torch.nn.Module, budget: int, dtype: torch.dtype, layers_name: str, on_disk: tuple[str, ...] = ()
) -> dict[str, str]:
    """One entry per decoder layer (of the list ``layers_name``), per module named in ``on_disk`` and
    per other top-level block; blocks stay on "cpu" in order while their weights fit ``budget``
    bytes, the rest go to "disk" (read by accelerate when they run). The ``on_disk`` modules are
    "disk" whatever the budget and do not count in it (the embedding and LM head, read a slice of
    rows at a time by :mod:`.sliced`, never whole).

    accelerate's ``infer_auto_device_map`` returns ``{"": "disk"}`` when nothing fits, which would
    load the whole model for every forward; this map keeps the unit of loading one layer.
    """
    from accelerate.utils import compute_module_sizes

    sizes = compute_module_sizes(model, dtype=dtype)
    blocks: list[str] = []

    def walk(prefix: str, module: torch.nn.Module) -> None:
        for name, child in module.named_children():
            full = f"{prefix}{name}"
            if full == layers_name:
                blocks.extend(f"{full}.{i}" for i in range(len(child)))
            elif any(n.startswith(full + ".") for n in (layers_name, *on_disk)):
                walk(full + ".", child)
            else:
                blocks.append(full)

    walk("", model)
    device_map, used = {}, 0
    for b in blocks:
        if b in on_disk:
            device_map[b] = "disk"
            continue
        used += sizes.get(b, 0)
        device_map[b] = "cpu" if used <= budget else "disk"
    # A weight tied across blocks (tied embeddings: lm_head.weight is embed_tokens.weight) is stored
    # once, under the first name: every block holding it follows the first one's device (accelerate's
    # offload index has no entry under the other name, so a "disk" lm_head next to a resident
    # embedding failed with KeyError 'lm_head.weight'); it costs no memory, being the same tensor.
    from accelerate.utils import find_tied_parameters

    def block_of(param: str) -> str | None:
        return next((b for b in blocks if param == b or param.startswith(b + ".")), None)

    for group in find_tied_parameters(model):
        owners = [b for b in dict.fromkeys(map(block_of, group)) if b is not None]
        first = min(owners, key=blocks.index) if owners else None
        for b in owners:
            device_map[b] = device_map[first]
    return device_map


@contextlib.contextmanager
def load_model(
    model_dir: Path, *, max_memory: str | int | None = DEFAULT_MAX_MEMORY, dtype: torch.dtype = torch.float32
) -> Iterator[Loaded]:
    """The model of ``model_dir``, in memory if it fits ``max_memory`` (None: always), else offloaded."""
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise CheckpointNotFoundError(f"{model_dir}: no config.json (a Hugging Face model folder is needed)")
    if not list(model_dir.glob("*.safetensors")):
        raise CheckpointNotFoundError(f"{model_dir}: no .safetensors files")
    need("accelerate")  # its own install hint, before the import below fails without one
    transformers = need("transformers")
    from accelerate import init_empty_weights

    config = config_from(transformers, model_dir)
    with init_empty_weights():
        # a copy: from_config records ``dtype`` in the config, which from_pretrained's "auto" would then read
        model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=dtype)
    model.tie_weights()
    budget = None if max_memory is None else parse_bytes(max_memory) if isinstance(max_memory, str) else max_memory
    with tempfile.TemporaryDirectory(prefix="grrr-offload-") as offload:
        device_map = {"": "cpu"} if budget is None else _device_map(model, budget, dtype, config)
        offloaded = "disk" in set(device_map.values())
        del model  # only its shapes were needed; transformers loads tensor by tensor and dispatches
        model = _from_pretrained(transformers, model_dir, config, device_map, offload, dtype)
        layers, norm = decoder_layers(model, text_config(config).num_hidden_layers)
        io: list[torch.nn.Module] = []
        sources: dict[int, sliced.RowSource] = {}
        if offloaded:
            io, sources = _read_offloaded_by_slices(model, model_dir, layers, dtype)
        model.eval()
        head = logprobs.head_mode(model, _head_rows(model, io, sources, dtype), text_config(config))
        # Non-zero only when transformers had to convert an offloaded weight at load time (its
        # WeightConverter families) and so re-saved it: then the disk holds a copy, RAM still does not.
        copied = sum(f.stat().st_size for f in Path(offload).rglob("*") if f.is_file())
        yield Loaded(
            model, layers, norm, offloaded, config, copied, tuple(module_name(model, m) for m in io), head, dtype
        )


def _from_pretrained(
    transformers, model_dir: Path, config, device_map: dict[str, str], offload: str, dtype: torch.dtype
) -> torch.nn.Module:
    """transformers' ``from_pretrained`` with ``device_map``, the "disk" blocks read from the checkpoint through
    accelerate (dispatch_model: AlignDevicesHook per offloaded module, weights read on use); refused when the
    loading met any problem (:func:`.validate.raise_loading_problems`)."""
    offloaded = "disk" in set(device_map.values())
    # Offloaded, transformers loads in the checkpoint's own dtype ("auto"): asked for another dtype,
    # it materialises and converts every weight, the "disk" ones too, during loading (a bf16
    # checkpoint loaded as float32 peaked at 1.5x the whole checkpoint). The parameters are then
    # cast (meta ones only change dtype) and accelerate's hook casts each offloaded weight it reads
    # to its parameter's dtype (set_module_tensor_to_device), so the forward runs in ``dtype``
    # with the same values as an in-memory load.
    # Mismatched shapes are reported, not raised (validate.loading_problems lists them all at once,
    # with the missing and unexpected tensors); the model is never run when there are any.
    try:
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            str(model_dir),
            config=config,
            device_map=device_map,
            offload_folder=offload,
            dtype="auto" if offloaded else dtype,
            output_loading_info=True,
            ignore_mismatched_sizes=True,
        )
    except (RuntimeError, ValueError, KeyError, TypeError, AttributeError, OSError) as e:
        raise CheckpointError(
            f"transformers could not load {model_dir} as it stands "
            f"({type(e).__name__}: {validate.first_line(e)}); check that config.json describes the "
            "weights beside it (--debug shows the traceback)"
        ) from e
    validate.raise_loading_problems(model_dir, model, info, config)
    return model


def _read_offloaded_by_slices(
    model: torch.nn.Module, model_dir: Path, layers: torch.nn.ModuleList, dtype: torch.dtype
) -> tuple[list[torch.nn.Module], dict[int, sliced.RowSource]]:
    """Set an offloaded model up to compute in ``dtype``: its embedding and LM head read a slice of rows at a
    time from the checkpoint (:mod:`.sliced`), its decoder layers' 16-bit linear maps kept in their own dtype
    (:mod:`.upcast`), every other weight cast. Returns (the sliced modules, their row sources by weight id)."""
    sources = sliced.offload_sources(model, model_dir)
    io = sliced.sliced_modules(model, sources)
    kept = [m for m in storage_dtype_modules(model, layers, dtype) if all(m is not x for x in io)]
    _cast_floating(model, dtype, keep={id(p) for m in kept for p in m.parameters()})
    compute_in(kept, dtype)
    sliced.install(io, sources, dtype)
    return io, sources


def _head_rows(model: torch.nn.Module, io: list[torch.nn.Module], sources: dict, dtype: torch.dtype):
    """The LM head's rows for :mod:`.logprobs`: read by slices from the checkpoint (an offloaded head of
    :mod:`.sliced`) or views of its in-memory weight (a plain ``nn.Linear``); None otherwise."""
    head = model.get_output_embeddings()
    if head is None or not isinstance(head, torch.nn.Linear):
        return None
    n_out, n_in = head.weight.shape
    per_slice = max(1, logprobs.SLICE_BYTES // (n_in * torch.empty((), dtype=dtype).element_size()))
    if any(head is m for m in io):
        src = sources[id(head.weight)]
        return logprobs.HeadRows(lambda s, e: (src.rows(s, e).to(dtype), None), n_out, n_in, per_slice)
    if type(head) is not torch.nn.Linear or head.weight.device.type == "meta" or hasattr(head, "_hf_hook"):
        return None
    w, b = head.weight, head.bias
    return logprobs.HeadRows(
        lambda s, e: (w[s:e].to(dtype), None if b is None else b[s:e].to(dtype)), n_out, n_in, per_slice
    )


def _device_map(model: torch.nn.Module, budget: int, dtype: torch.dtype, config) -> dict[str, str]:
    """The layer-wise map; once anything is offloaded, the embedding and LM head go to disk too and
    are read a slice of rows at a time (:mod:`.sliced`), so they hold no resident budget."""
    layers_name = module_name(model, decoder_layers(model, text_config(config).num_hidden_layers)[0])
    device_map = layerwise_device_map(model, budget, dtype, layers_name)
    if "disk" not in device_map.values():
        return device_map
    io = (model.get_input_embeddings(), model.get_output_embeddings())
    on_disk = tuple(n for n in dict.fromkeys(module_name(model, m) for m in io) if n)
    return layerwise_device_map(model, budget, dtype, layers_name, on_disk)


def _cast_floating(model: torch.nn.Module, dtype: torch.dtype, keep: set[int] = frozenset()) -> None:
    """Floating parameters (but those whose id is in ``keep``) and buffers to ``dtype`` in place
    (accelerate forbids ``model.to`` on an offloaded model); ``param.data`` is replaced, so tied
    parameters stay one object."""
    for module in model.modules():
        for p in module._parameters.values():
            if p is not None and p.is_floating_point() and p.dtype != dtype and id(p) not in keep:
                p.data = p.data.to(dtype)
        for name, b in module._buffers.items():
            if b is not None and b.is_floating_point() and b.dtype != dtype:
                module._buffers[name] = b.to(dtype)


def _hidden(args, kwargs) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


@contextlib.contextmanager
def residual_hooks(loaded: Loaded, fn: Callable[[int, torch.Tensor], torch.Tensor | None]):
    """Call ``fn(depth, x)`` on the residual stream x at each decoder layer's input (depth 0..L-1)
    and at the final norm's input (depth L); a returned tensor replaces x."""

    def make(depth):
        def pre(module, args, kwargs):
            x = _hidden(args, kwargs)
            y = fn(depth, x)
            if y is None:
                return None
            if args:
                return (y, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": y}

        return pre

    handles = [layer.register_forward_pre_hook(make(i), with_kwargs=True) for i, layer in enumerate(loaded.layers)]
    handles.append(loaded.final_norm.register_forward_pre_hook(make(len(loaded.layers)), with_kwargs=True))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@dataclass
class PassResult:
    rms: np.ndarray  # (layers, hidden) float64: RMS over all calibration tokens at each layer's input
    nll_sum: float  # Σ −log p(next token), float64
    n_predicted: int

    @property
    def perplexity(self) -> float:
        return float(np.exp(self.nll_sum / self.n_predicted))


@torch.no_grad()
def calibration_pass(
    loaded: Loaded,
    ids: torch.Tensor,
    *,
    batch_size: int = 1,
    zero_channels: np.ndarray | None = None,
    on_layer: Callable[[int, int], None] | None = None,
) -> PassResult:
    """One pass over ``ids``: RMS at every layer input and the next-token NLL.

    With ``zero_channels``, those residual channels are set to 0 at every decoder layer's input
    (= after the embedding and after every layer but the last) and at the final norm's input
    (= after the last layer), so the channel is absent from everything the model reads.
    The recorded RMS is taken before the zeroing. ``on_layer(batch, layer)`` is called as each decoder
    layer of each batch ends (progress: for an offloaded model, a layer includes reading its weights).
    The NLL comes from the LM head's input by vocabulary slices (:mod:`.logprobs`) when ``loaded.head``
    allows, else from the model's full logits.
    """
    n_layers = len(loaded.layers)
    hidden = text_config(loaded.config).hidden_size
    sq = torch.zeros(n_layers, hidden, dtype=torch.float64)
    counts = [0]
    zero = None if zero_channels is None or len(zero_channels) == 0 else torch.as_tensor(np.asarray(zero_channels))
    current = [0]

    def on_residual(depth, x):
        if depth < n_layers:
            sq[depth] += x.detach().to(torch.float64).pow(2).reshape(-1, x.shape[-1]).sum(0).cpu()
        if depth > 0 and on_layer is not None:
            on_layer(current[0], depth - 1)
        if zero is None:
            return None
        y = x.clone()
        y[..., zero.to(x.device)] = 0
        return y

    nll, n_pred = 0.0, 0
    capture = logprobs.captured_head_input(loaded.model) if loaded.head is not None else contextlib.nullcontext(None)
    with residual_hooks(loaded, on_residual), capture as seen:
        for start in range(0, ids.shape[0], batch_size):
            current[0] = start // batch_size
            batch = ids[start : start + batch_size]
            counts[0] += batch.numel()
            out = loaded.model(input_ids=batch, use_cache=False)
            if seen is not None:
                picked = logprobs.next_token_logp(seen.pop(), batch, loaded.head, loaded.dtype)
                seen.clear()
            else:
                picked = _next_token_logp(out.logits, batch)
            nll -= float(picked.double().sum())
            n_pred += picked.numel()
            del out
    rms = np.sqrt(sq.numpy() / counts[0])
    return PassResult(rms, nll, n_pred)


LOGP_CHUNK_BYTES = 16 * 2**20


def _next_token_logp(logits: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
    """log p(next token) at every position but the last, (batch, seq-1) float32. log_softmax is taken
    over a few positions at a time: it is row-wise, so the values are those of one call on all the
    logits, without a float32 copy of them (3 × 148 MiB per 256-token sequence at a 152k vocabulary)."""
    per_row = logits.shape[-1] * 4
    step = max(1, LOGP_CHUNK_BYTES // (per_row * logits.shape[0]))
    target, n = batch[:, 1:, None].to(logits.device), logits.shape[1] - 1
    parts = [
        torch.log_softmax(logits[:, s : min(s + step, n)].float(), dim=-1)
        .gather(-1, target[:, s : s + step])
        .squeeze(-1)
        for s in range(0, n, step)
    ]
    return torch.cat(parts, dim=1)


def write_rms_csv(path: Path, rms: np.ndarray) -> None:
    """One row per channel: channel, rms_layer0 … rms_layer{L-1}."""
    rows = [
        {"channel": c, **{f"rms_layer{layer}": float(rms[layer, c]) for layer in range(rms.shape[0])}}
        for c in range(rms.shape[1])
    ]
    atomic_write_text(path, to_csv(rows))

"""Per-channel activation RMS of the residual stream at every decoder layer's input.

The model is loaded by transformers' ``from_pretrained`` with an explicit accelerate
``device_map`` (one entry per decoder layer and per other top-level block): blocks stay in
memory while their weights fit a resident-weights budget (``max_memory``), the rest are "disk".
For a safetensors checkpoint, transformers points accelerate's offload index at the original
files (``{"safetensors_file", "weight_name"}`` per weight, one or many shards), so nothing is
copied into the offload folder and the "disk" weights are never materialised while loading;
accelerate's ``AlignDevicesHook`` then reads each offloaded block's weights (memory-mapped) for
its own forward and drops them afterwards. The peak is therefore the process baseline (python,
torch, transformers' imports: ~0.55 GB here) + the resident blocks + the largest offloaded block
+ the activations and logits of one batch; see tools/bench_channels.py. A 16-bit checkpoint computed
in float32 keeps its embedding and LM head (vocab × hidden, the largest blocks of an LLM) in its own
dtype, upcast row by row / a slice of rows at a time, and so do the decoder layers' plain linear maps
(:func:`_storage_dtype_modules`); every other weight (norms, ...) is cast to the compute dtype.
No forward pass is written here: the model's own ``forward`` runs; forward pre-hooks on the
decoder layers read their input (the residual stream) and accumulate Σx² per channel in
float64.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch

from ..errors import CheckpointNotFoundError, ConfigError, MissingDependencyError

DEFAULT_MAX_MEMORY = "1GiB"  # resident weights; the rest is offloaded to disk layer by layer


def _need(module: str):
    try:
        return __import__(module)
    except ImportError as e:
        raise MissingDependencyError(f"'grrr-stream channels' needs {module} "
                                     f"(pip install 'grrr-stream[channels]'): {e}") from e


def checkpoint_bytes(model_dir: Path) -> int:
    return sum(p.stat().st_size for p in Path(model_dir).glob("*.safetensors"))


def _parse_bytes(text: str) -> int:
    units = {"gib": 2**30, "mib": 2**20, "kib": 2**10, "gb": 10**9, "mb": 10**6, "kb": 10**3, "b": 1}
    t = str(text).strip().lower()
    for u, f in units.items():
        if t.endswith(u) and t[:-len(u)].strip().replace(".", "", 1).isdigit():
            return int(float(t[:-len(u)]) * f)
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


def decoder_layers(model: torch.nn.Module, n_layers: int) -> tuple[torch.nn.ModuleList, torch.nn.Module]:
    """The decoder's layer list (the ModuleList named ``*layers`` of length n_layers) and its final norm."""
    for name, mod in model.named_modules():
        if name.endswith("layers") and isinstance(mod, torch.nn.ModuleList) and len(mod) == n_layers:
            parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
            norm = getattr(parent, "norm", None)
            if norm is None:
                raise ConfigError(f"{type(model).__name__}: no final norm next to {name}")
            return mod, norm
    raise ConfigError(f"{type(model).__name__}: no decoder layer list of {n_layers} layers found")


def layerwise_device_map(model: torch.nn.Module, budget: int, dtype: torch.dtype) -> dict[str, str]:
    """One entry per decoder layer and per other top-level block; blocks stay on "cpu" in order while
    their weights fit ``budget`` bytes, the rest go to "disk" (read by accelerate when they run).

    accelerate's ``infer_auto_device_map`` returns ``{"": "disk"}`` when nothing fits, which would
    load the whole model for every forward; this map keeps the unit of loading one layer.
    """
    from accelerate.utils import compute_module_sizes

    sizes = compute_module_sizes(model, dtype=dtype)
    layers_name = next(n for n, m in model.named_modules()
                       if n.endswith("layers") and isinstance(m, torch.nn.ModuleList) and len(m) > 0)
    blocks: list[str] = []

    def walk(prefix: str, module: torch.nn.Module) -> None:
        for name, child in module.named_children():
            full = f"{prefix}{name}"
            if full == layers_name:
                blocks.extend(f"{full}.{i}" for i in range(len(child)))
            elif layers_name.startswith(full + "."):
                walk(full + ".", child)
            else:
                blocks.append(full)

    walk("", model)
    device_map, used = {}, 0
    for b in blocks:
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


def text_config(config):
    return config.get_text_config() if hasattr(config, "get_text_config") else config


@contextlib.contextmanager
def load_model(model_dir: Path, *, max_memory: str | int | None = DEFAULT_MAX_MEMORY,
               dtype: torch.dtype = torch.float32) -> Iterator[Loaded]:
    """The model of ``model_dir``, in memory if it fits ``max_memory`` (None: always), else offloaded."""
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise CheckpointNotFoundError(f"{model_dir}: no config.json (a Hugging Face model folder is needed)")
    if not list(model_dir.glob("*.safetensors")):
        raise CheckpointNotFoundError(f"{model_dir}: no .safetensors files")
    accelerate = _need("accelerate")
    transformers = _need("transformers")
    from accelerate import init_empty_weights

    config = transformers.AutoConfig.from_pretrained(str(model_dir))
    with init_empty_weights():
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.tie_weights()
    budget = None if max_memory is None else _parse_bytes(max_memory) if isinstance(max_memory, str) else max_memory
    with tempfile.TemporaryDirectory(prefix="grrr-offload-") as offload:
        device_map = {"": "cpu"} if budget is None else layerwise_device_map(model, budget, dtype)
        offloaded = "disk" in set(device_map.values())
        del model  # only its shapes were needed; transformers loads tensor by tensor and dispatches
        # through accelerate (dispatch_model: AlignDevicesHook per offloaded module, weights read on use)
        # Offloaded, transformers loads in the checkpoint's own dtype ("auto"): asked for another dtype,
        # it materialises and converts every weight, the "disk" ones too, during loading (a bf16
        # checkpoint loaded as float32 peaked at 1.5x the whole checkpoint). The parameters are then
        # cast (meta ones only change dtype) and accelerate's hook casts each offloaded weight it reads
        # to its parameter's dtype (set_module_tensor_to_device), so the forward runs in ``dtype``
        # with the same values as an in-memory load.
        model = transformers.AutoModelForCausalLM.from_pretrained(str(model_dir), device_map=device_map,
                                                                  offload_folder=offload,
                                                                  dtype="auto" if offloaded else dtype)
        tc = text_config(config)
        layers, norm = decoder_layers(model, tc.num_hidden_layers)
        if offloaded:
            kept = _storage_dtype_modules(model, layers, dtype)
            _cast_floating(model, dtype, keep={id(p) for m in kept for p in m.parameters()})
            _compute_in(kept, dtype)
        model.eval()
        del accelerate
        # Non-zero only when transformers had to convert an offloaded weight at load time (its
        # WeightConverter families) and so re-saved it: then the disk holds a copy, RAM still does not.
        copied = sum(f.stat().st_size for f in Path(offload).rglob("*") if f.is_file())
        yield Loaded(model, layers, norm, offloaded, config, copied)


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


_HALF = (torch.bfloat16, torch.float16)
HEAD_CHUNK_BYTES = 64 * 2**20  # rows of a kept Linear (LM head, decoder linears) upcast at a time


def _storage_dtype_modules(model: torch.nn.Module, layers: torch.nn.ModuleList,
                           dtype: torch.dtype) -> list[torch.nn.Module]:
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
    io = [m for m in (emb, head) if m is not None and type(m) in (torch.nn.Embedding, torch.nn.Linear)
          and getattr(m, "bias", None) is None]
    linears = [m for layer in layers for m in layer.modules() if type(m) is torch.nn.Linear]
    kept = [m for m in dict.fromkeys(io + linears)
            if all(p.dtype in _HALF for p in m.parameters(recurse=False))]
    while True:  # drop a module whose weight another module (outside the kept ones) also holds
        ids = {id(p) for m in kept for p in m.parameters(recurse=False)}
        shared = {id(p) for m in model.modules() if all(m is not k for k in kept)
                  for p in m._parameters.values() if p is not None and id(p) in ids}
        if not shared:
            return kept
        kept = [m for m in kept if not any(id(p) in shared for p in m.parameters(recurse=False))]


def _compute_in(modules: list[torch.nn.Module], dtype: torch.dtype) -> None:
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
        forward = _chunked_upcast_linear(m, dtype)
        # accelerate's hook on an offloaded module loads the weight, calls ``_old_forward``, drops it
        if hasattr(m, "_hf_hook") and hasattr(m, "_old_forward"):
            m._old_forward = forward
        else:
            m.forward = forward


def _chunked_upcast_linear(m: torch.nn.Linear, dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    rows = max(1, HEAD_CHUNK_BYTES // (m.in_features * torch.empty((), dtype=dtype).element_size()))

    def forward(x: torch.Tensor) -> torch.Tensor:
        x = x.to(dtype)
        w, b = m.weight, m.bias
        if w.shape[0] <= rows:  # one slice: exactly F.linear on the upcast weight and bias
            return torch.nn.functional.linear(x, w.to(dtype), None if b is None else b.to(dtype))
        out = x.new_empty(*x.shape[:-1], w.shape[0])
        for s in range(0, w.shape[0], rows):
            out[..., s:s + rows] = torch.nn.functional.linear(
                x, w[s:s + rows].to(dtype), None if b is None else b[s:s + rows].to(dtype))
        return out
    return forward


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
    nll_sum: float   # Σ −log p(next token), float64
    n_predicted: int

    @property
    def perplexity(self) -> float:
        return float(np.exp(self.nll_sum / self.n_predicted))


@torch.no_grad()
def calibration_pass(loaded: Loaded, ids: torch.Tensor, *, batch_size: int = 1,
                     zero_channels: np.ndarray | None = None) -> PassResult:
    """One pass over ``ids``: RMS at every layer input and the next-token NLL.

    With ``zero_channels``, those residual channels are set to 0 at every decoder layer's input
    (= after the embedding and after every layer but the last) and at the final norm's input
    (= after the last layer), so the channel is absent from everything the model reads.
    The recorded RMS is taken before the zeroing.
    """
    n_layers = len(loaded.layers)
    hidden = text_config(loaded.config).hidden_size
    sq = torch.zeros(n_layers, hidden, dtype=torch.float64)
    counts = [0]
    zero = None if zero_channels is None or len(zero_channels) == 0 else torch.as_tensor(np.asarray(zero_channels))

    def on_residual(depth, x):
        if depth < n_layers:
            sq[depth] += x.detach().to(torch.float64).pow(2).reshape(-1, x.shape[-1]).sum(0).cpu()
        if zero is None:
            return None
        y = x.clone()
        y[..., zero.to(x.device)] = 0
        return y

    nll, n_pred = 0.0, 0
    with residual_hooks(loaded, on_residual):
        for start in range(0, ids.shape[0], batch_size):
            batch = ids[start:start + batch_size]
            counts[0] += batch.numel()
            logits = loaded.model(input_ids=batch, use_cache=False).logits
            logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
            picked = logp.gather(-1, batch[:, 1:, None].to(logp.device)).squeeze(-1)
            nll -= float(picked.double().sum())
            n_pred += picked.numel()
            del logits, logp
    rms = np.sqrt(sq.numpy() / counts[0])
    return PassResult(rms, nll, n_pred)


def write_rms_csv(path: Path, rms: np.ndarray) -> None:
    """One row per channel: channel, rms_layer0 … rms_layer{L-1}."""
    from ..files import atomic_write_text, to_csv

    rows = [{"channel": c, **{f"rms_layer{l}": float(rms[l, c]) for l in range(rms.shape[0])}}
            for c in range(rms.shape[1])]
    atomic_write_text(path, to_csv(rows))


def config_summary(model_dir: Path) -> dict:
    return json.loads((Path(model_dir) / "config.json").read_text())

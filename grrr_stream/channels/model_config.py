"""What the channels pass reads of a model before it loads it: its config (``config_summary``, ``config_from``:
MiMo through its Qwen2 decoder), the text config of a multimodal one, its decoder layer list and final norm, and
the optional imports it needs. A leaf of ``channels/``: ``activations.py`` (the pass) and ``validate.py`` (the
refusals before it) both read these."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..errors import ConfigError, MissingDependencyError


def need(module: str):
    try:
        return __import__(module)
    except ImportError as e:
        raise MissingDependencyError(
            f"'grrr-stream channels' needs {module} (pip install 'grrr-stream[channels]'): {e}"
        ) from e


def decoder_layers(model: torch.nn.Module, n_layers: int) -> tuple[torch.nn.ModuleList, torch.nn.Module]:
    """The decoder's layer list (the ModuleList named ``*layers`` of length n_layers next to a final
    ``norm``) and that norm. A multimodal model's vision tower also has a ``layers`` list (Gemma3's
    ``vision_tower.encoder.layers``), without a ``norm`` beside it: it is skipped."""
    for name, mod in model.named_modules():
        if name.endswith("layers") and isinstance(mod, torch.nn.ModuleList) and len(mod) == n_layers:
            parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
            norm = getattr(parent, "norm", None)
            if norm is not None:
                return mod, norm
    raise ConfigError(f"{type(model).__name__}: no decoder layer list of {n_layers} layers with a final norm found")


def text_config(config):
    return config.get_text_config() if hasattr(config, "get_text_config") else config


# Remote-code families whose next-token model is a transformers class: MiMo is a Qwen2 decoder plus
# multi-token-prediction layers (a speculative-decoding head, not in the next-token forward; vLLM drops
# them too), which the Qwen2 class leaves unloaded (checkpoints/arch.py)
REMOTE_DECODERS = {"mimo": "qwen2"}


def config_from(transformers, model_dir: Path):
    raw = config_summary(model_dir)
    if raw.get("model_type") in REMOTE_DECODERS:
        keys = {k: v for k, v in raw.items() if k not in ("model_type", "architectures", "auto_map")}
        return transformers.AutoConfig.for_model(REMOTE_DECODERS[raw["model_type"]], **keys)
    return transformers.AutoConfig.from_pretrained(str(model_dir))


def config_summary(model_dir: Path) -> dict:
    return json.loads((Path(model_dir) / "config.json").read_text())

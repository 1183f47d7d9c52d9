"""The channels pass's preflight: every model folder and setting checked before any work, every problem of all
of them reported at once (``grrr-stream channels`` runs it first, ``--dry-run`` stops after it)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from ..errors import ConfigError, GrrrError


def channels_preflight(
    model: Path, post: Optional[Path] = None, *, sequences: int, seq_len: int, batch_size: int = 1
) -> list[Path]:
    """The model folders to analyse (``model``, then ``post`` if given), each checked as the pass will read it
    (:func:`.validate.preflight`: checkpoint, transformers config, calibration text of ``sequences`` ×
    ``seq_len`` tokens); one error names every problem of both folders."""
    if batch_size < 1:
        raise ConfigError("--batch-size must be at least 1")
    models = [Path(m) for m in (model, post) if m is not None]
    problems = _problems(models, sequences=sequences, seq_len=seq_len)
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise ConfigError(" ".join(map(str, problems)))
    return models


def _problems(models: Sequence[Path], *, sequences: int, seq_len: int) -> list[GrrrError]:
    from .validate import preflight

    problems = []
    for m in models:
        try:
            preflight(m, sequences=sequences, seq_len=seq_len)
        except GrrrError as e:
            problems.append(e)
    return problems

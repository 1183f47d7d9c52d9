"""The settings of the statistics over stores (``run_stats``, ``run_comparisons``), validated in one place so
that the API and the command line refuse the same values with the same message."""

from __future__ import annotations

from typing import TypeVar

from pydantic import Field, ValidationError

from ..config import MAX_DRAWS, Seed, StrictModel, format_validation_error
from ..errors import ConfigError

MIN_DRAWS = 100  # fewer bootstrap resamples or null draws give intervals too coarse to read


class BootstrapSettings(StrictModel):
    """``run_stats``: the bootstrap of the per-transition summaries."""

    resamples: int = Field(10_000, ge=MIN_DRAWS, le=MAX_DRAWS)
    seed: Seed = 0


class ComparisonSettings(BootstrapSettings):
    """``run_comparisons``: the paired bootstrap, the Monte Carlo null and the verdict's level."""

    null_draws: int = Field(10_000, ge=MIN_DRAWS, le=MAX_DRAWS)
    alpha: float = Field(0.05, gt=0.0, lt=1.0)


S = TypeVar("S", bound=StrictModel)


def checked(model: type[S], source: str, **values) -> S:
    """``values`` validated as ``model``; every problem at once as one ConfigError naming ``source``."""
    try:
        return model.model_validate(values)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, source)) from None

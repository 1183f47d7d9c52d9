"""A sweep config with a math subset (``--math-subset N``): one more evaluation suite, the five math benchmarks of
the paper's Table 5 with the first N problems of each, added beside the config's own evaluations."""

from __future__ import annotations

from ..errors import ConfigError
from ..evaluation.benchmarks import FIVE
from .config import SweepConfig, SweepEvaluation


def with_math_subset(config: SweepConfig, limit: int, bench_dir: str = "bundled") -> SweepConfig:
    """``config`` with an extra evaluation of the five math benchmarks, ``limit`` problems each, read from
    ``bench_dir`` ('bundled': the copies shipped with the package); its other settings are the main evaluation's."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"--math-subset must be at least 1 (the problems of each math benchmark; got {limit!r})")
    extra = SweepEvaluation.model_validate(
        {
            **config.evaluation.model_dump(),
            "suite": "math",
            "benchmarks": list(FIVE),
            "bench_dir": str(bench_dir),
            "limit": limit,
        }
    )
    return config.model_copy(update={"extra_evaluations": [*config.extra_evaluations, extra]})

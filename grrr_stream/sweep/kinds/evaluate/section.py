"""The evaluate kind's sections of the sweep YAML: ``evaluation`` (the main suite) and ``extra_evaluations``."""

from __future__ import annotations

from typing import Optional

from pydantic import Field, field_validator

from ....evaluation.settings import EvaluationOptions
from ...sections import Section, TransitionSelector, component, selector, yaml_variant_names


class SweepEvaluation(EvaluationOptions):
    """One suite of benchmarks evaluated over transitions: the evaluation's own options (limit, lenient, template,
    engine, sampling, metric, ...: :class:`~grrr_stream.evaluation.settings.EvaluationOptions`) and what the
    sweep evaluates with them."""

    enabled: bool = True
    # None for the main evaluation; extra evaluations need a name (their units are evaluate/<transition>/<suite>)
    suite: Optional[str] = None
    transitions: TransitionSelector = "cumulative"
    variants: Optional[list[str]] = None  # None: the variants section's names
    benchmarks: list[str] = Field(
        default_factory=lambda: ["math500", "aime24", "amc23", "minerva_math", "olympiadbench"]
    )
    # folder with <name>/test.jsonl, 'bundled' (the five math benchmarks shipped with the package),
    # 'tinychain' (the generated chain's own benchmark), or 'hub[:OWNER/REPO]'
    bench_dir: str = "bundled"

    _names = field_validator("variants", mode="before")(yaml_variant_names)
    _transitions = field_validator("transitions", mode="before")(selector)

    @field_validator("suite")
    @classmethod
    def _suite(cls, v: Optional[str]) -> Optional[str]:
        return v if v is None else component(v)

    @field_validator("benchmarks")
    @classmethod
    def _benchmarks(cls, v: list[str]) -> list[str]:
        for b in v:
            component(b)
        return v


SECTIONS = (Section("evaluation", SweepEvaluation), Section("extra_evaluations", list[SweepEvaluation], list))

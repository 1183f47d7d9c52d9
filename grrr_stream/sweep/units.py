"""What a sweep is made of: transitions, units, and one typed parameter model per kind of unit.

A unit's *key* is a hash of exactly what its result depends on (:meth:`UnitParams.key_content`),
never of everything it is run with: the device, the shard size or where the bundled benchmarks
are installed are parameters of the run, not of the result. Each model below says which of its
fields enter the key and which do not. The key contents are the ones the sweep has always
hashed (results on disk are found by them), so they must not change shape: a field added to a
key invalidates every finished result of that kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict

from ..config import DecomposeConfig, DecompositionSettings, build_config, result_settings, stable_hash
from ..evaluation.settings import EngineSettings, SamplingSettings

SWEEP_FORMAT = 1
WORKER_KINDS = ("generate", "decompose", "channels", "variant", "evaluate")  # the heavy, GPU-bound kinds
KIND_ORDER = ("generate", "decompose", "channels", "channel-stats", "stats", "compare", "variant", "evaluate")
KEY_LENGTH = 24


@dataclass(frozen=True)
class Transition:
    id: str
    chain: str
    parent: str       # model id (W0)
    child: str        # model id (W1)
    kind: str         # 'cumulative' (from the chain's base) or 'incremental' (from an intermediate model)
    method: Optional[str]
    domain: Optional[str]


@dataclass(frozen=True)
class PlannedModel:
    """One checkpoint of a planned sweep: a config's model with its chain and lineage resolved."""

    source: str               # local folder, Hub repo id or tinychain:NAME
    revision: Optional[str]
    chain: str                # the name of its chain
    parent: Optional[str]     # model id of its parent (None: it is the chain's base)
    base: str                 # model id of its chain's base
    method: Optional[str]
    domain: Optional[str]
    confirmed: bool


class UnitParams(BaseModel):
    """What a unit needs to run, validated when it is planned; frozen, since its key is taken from it.

    Values come from an already validated :class:`~grrr_stream.sweep.config.SweepConfig`; fields that enter
    a key are typed ``Any`` where a coercion (an int weight read back as a float) would change the
    hashed text."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: ClassVar[str]

    def key_content(self) -> dict:
        raise NotImplementedError

    def key(self) -> str:
        return stable_hash(self.key_content(), KEY_LENGTH)


class GenerateParams(UnitParams):
    """Train the built-in tiny chain (its models and its benchmark)."""

    kind: ClassVar[str] = "generate"
    seed: int
    quick: bool
    chain_version: int  # tinychain.CHAIN_VERSION: a new training recipe gets new results
    retrain: bool = False  # trained here, never the shipped copy: weights of this machine, results of their own

    def key_content(self) -> dict:
        # the shipped chain keeps the key the chain trained here had before it shipped
        return {"tinychain": self.chain_version, "seed": self.seed, "quick": self.quick,
                **({"retrain": True} if self.retrain else {})}


class DecomposeParams(UnitParams):
    """One transition W0 → W1. Keyed by what identifies the two checkpoints and the result settings;
    the paths, revisions and labels only say where to read and how to label the run."""

    kind: ClassVar[str] = "decompose"
    transition: str
    base: str                          # path or Hub id handed to the decomposition
    post: str
    base_id: dict[str, Any]            # what identifies W0 in keys (see plan.Sources)
    post_id: dict[str, Any]
    base_revision: Optional[str]
    post_revision: Optional[str]
    frame_cache: str
    method: Optional[str]
    chain: str
    settings: DecompositionSettings    # the sweep's decomposition section, less its transition choice

    def key_content(self) -> dict:
        return {"base": self.base_id, "post": self.post_id, "settings": result_settings(self.settings)}

    def config(self, store: str, source: str = "arguments", **run: Any) -> DecomposeConfig:
        """The one-transition config this unit runs (``run``: progress, tracking, device)."""
        values = {**self.settings.model_dump(mode="json"), "base": self.base, "post": self.post,
                  "base_revision": self.base_revision, "post_revision": self.post_revision,
                  "frame_cache": self.frame_cache, "method": self.method, "chain": self.chain,
                  "store": store, **run}
        return build_config(values, source=source)


class StatsParams(UnitParams):
    """Bootstrap summaries over every decomposed transition."""

    kind: ClassVar[str] = "stats"
    transitions: tuple[str, ...]
    store_keys: tuple[str, ...]        # the keys of those transitions' decompositions
    resamples: int
    seed: int

    def key_content(self) -> dict:
        return {"stores": sorted(self.store_keys), "resamples": self.resamples, "seed": self.seed}


class CompareParams(UnitParams):
    """One comparison of two transitions (sequential, or independent from a common ancestor)."""

    kind: ClassVar[str] = "compare"
    comparison: Literal["sequential", "independent"]
    a: str
    b: str
    ancestor: Optional[str]            # transition to the nearest common ancestor; None: the base
    a_key: str
    b_key: str
    ancestor_key: Optional[str]
    resamples: int
    null_draws: int
    seed: int
    alpha: float

    def key_content(self) -> dict:
        anc = {} if self.comparison == "sequential" else {"ancestor": self.ancestor_key or "base"}
        return {"kind": self.comparison, "a": self.a_key, "b": self.b_key, **anc, "resamples": self.resamples,
                "null_draws": self.null_draws, "seed": self.seed, "alpha": self.alpha}


class VariantParams(UnitParams):
    """One variant folder of a transition. Keyed by its components, not its name; the shard size and
    device change neither the tensors nor the files' content."""

    kind: ClassVar[str] = "variant"
    transition: str
    variant: str                       # as written in the config (NAME=diag:...,): parsed again to run
    store_key: str
    components: dict[str, Any]
    dtype: str
    rest_from: str
    shard_gb: float
    device: str
    # a channel variant only: the channels.json it reads and what identifies its channel set (the set's digest,
    # or the key of the unit that writes the file); None for every other variant, whose key stays as it was
    channels: Optional[str] = None
    channels_key: Optional[str] = None

    def key_content(self) -> dict:
        return {"store": self.store_key, "components": self.components, "dtype": self.dtype,
                "rest_from": self.rest_from, **({"channels": self.channels_key} if self.channels_key else {})}


class EvaluateParams(UnitParams):
    """One transition's variants on one suite of benchmarks, one engine. Keyed by the benchmarks'
    identity (``bench_id``), not by where they are read (``bench_dir``: the bundled copy moves with
    the installation); the table metric, pass@k, maj@k and memory knobs change no generation."""

    kind: ClassVar[str] = "evaluate"
    transition: str
    suite: Optional[str]
    store_key: str
    variants: tuple[str, ...]
    components: dict[str, Any]         # variant name → components, for the names that parse
    benchmarks: tuple[str, ...]
    bench_dir: str
    bench_id: Any
    limit: Optional[int]
    lenient: bool
    template: str
    instruction: Optional[str]
    materialize: str
    rest_from: str
    engine: EngineSettings
    sampling: SamplingSettings
    metric: str
    channels: Optional[str] = None       # as in VariantParams: set only when channel variants are evaluated
    channels_key: Optional[str] = None

    def key_content(self) -> dict:
        sampling = self.sampling.key_fields()
        return {"store": self.store_key, "variants": self.components, "benchmarks": list(self.benchmarks),
                "bench": self.bench_id, "limit": self.limit,
                **({"lenient": True} if self.lenient else {}),  # absent when off: keys stay as they were
                "template": self.template, "instruction": self.instruction, "rest_from": self.rest_from,
                "engine": self.engine.result_fields(),
                **({"channels": self.channels_key} if self.channels_key else {}),
                # how answers are drawn; pass@k, maj@k and the table metric are computed from the
                # answers and never regenerate them (see records.output_complete)
                **({"sampling": sampling} if sampling else {})}


class ChannelsParams(UnitParams):
    """One model's outlier residual channels (``grrr-stream channels`` on it alone): keyed by the model's
    identity, the rule, the calibration text and its cut, and the ablation's seeds (when it is run); where
    the model is read, the batch size and the memory budget change no result."""

    kind: ClassVar[str] = "channels"
    model: str                         # model id
    source: str                        # path or Hub id of the checkpoint
    revision: Optional[str]
    model_id: dict[str, Any]           # what identifies it in keys (see plan.Sources)
    threshold: Any
    aggregate: str
    sequences: int
    seq_len: int
    text_sha256: str                   # the calibration text's checksum: another text, other channels
    ablation_seeds: Optional[tuple[int, ...]]  # None: no ablation
    batch_size: int
    max_memory: str

    def key_content(self) -> dict:
        return {"channels": self.model_id, "rule": {"threshold": self.threshold, "aggregate": self.aggregate},
                "calibration": {"sequences": self.sequences, "seq_len": self.seq_len, "text": self.text_sha256},
                **({"ablation": list(self.ablation_seeds)} if self.ablation_seeds is not None else {})}


class ChannelStatsParams(UnitParams):
    """One transition's update energy on its W0's outlier channels: keyed by its decomposition's and that
    channels unit's keys and the resampling; ``channels_out`` only says where the channels file is."""

    kind: ClassVar[str] = "channel-stats"
    transition: str
    store_key: str
    channels_key: str
    channels_out: str
    post_channels_out: Optional[str]   # W1's channels unit, for the Jaccard of the two sets (not in the key)
    resamples: int
    seed: int

    def key_content(self) -> dict:
        return {"store": self.store_key, "channels": self.channels_key, "resamples": self.resamples,
                "seed": self.seed}


AnyParams = Union[GenerateParams, DecomposeParams, StatsParams, CompareParams, VariantParams, EvaluateParams,
                  ChannelsParams, ChannelStatsParams]


@dataclass(frozen=True)
class Unit:
    id: str              # e.g. 'decompose/base-to-sft'
    label: str           # one line for humans
    key: str             # params.key(): hash of everything its result depends on
    out: str             # its result folder
    params: AnyParams
    deps: tuple[str, ...] = ()
    # order only: start after these have ended, whatever their outcome (the first
    # decomposition from a base computes the frames the others then read from the cache)
    after: tuple[str, ...] = ()

    @classmethod
    def of(cls, uid: str, label: str, params: AnyParams, folder: Callable[[str], Path],
           deps: tuple[str, ...] = (), after: tuple[str, ...] = ()) -> "Unit":
        """The unit with its key taken from ``params`` and its result folder named from that key."""
        key = params.key()
        return cls(uid, label, key, str(folder(key)), params, tuple(deps), tuple(after))

    @property
    def kind(self) -> str:  # one of KIND_ORDER
        return self.params.kind

    @property
    def on_worker(self) -> bool:
        return self.kind in WORKER_KINDS

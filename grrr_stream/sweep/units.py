"""What a sweep is made of: transitions, units, and the base of each kind's typed parameters.

Each kind of unit defines its own parameter model in its module (:mod:`.kinds`).

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
from typing import Callable, ClassVar, Optional

from pydantic import BaseModel, ConfigDict

from ..config import stable_hash

SWEEP_FORMAT = 1
KEY_LENGTH = 24


@dataclass(frozen=True)
class Transition:
    id: str
    chain: str
    parent: str  # model id (W0)
    child: str  # model id (W1)
    kind: str  # 'cumulative' (from the chain's base) or 'incremental' (from an intermediate model)
    method: Optional[str]
    domain: Optional[str]


@dataclass(frozen=True)
class PlannedModel:
    """One checkpoint of a planned sweep: a config's model with its chain and lineage resolved."""

    source: str  # local folder, Hub repo id or tinychain:NAME
    revision: Optional[str]
    chain: str  # the name of its chain
    parent: Optional[str]  # model id of its parent (None: it is the chain's base)
    base: str  # model id of its chain's base
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


@dataclass(frozen=True)
class Unit:
    id: str  # e.g. 'decompose/base-to-sft'
    label: str  # one line for humans
    key: str  # params.key(): hash of everything its result depends on
    out: str  # its result folder
    params: UnitParams
    deps: tuple[str, ...] = ()
    # order only: start after these have ended, whatever their outcome (the first
    # decomposition from a base computes the frames the others then read from the cache)
    after: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        uid: str,
        label: str,
        params: UnitParams,
        folder: Callable[[str], Path],
        deps: tuple[str, ...] = (),
        after: tuple[str, ...] = (),
    ) -> "Unit":
        """The unit with its key taken from ``params`` and its result folder named from that key."""
        key = params.key()
        return cls(uid, label, key, str(folder(key)), params, tuple(deps), tuple(after))

    @property
    def kind(self) -> str:  # a name of the registry (kinds.KINDS)
        return self.params.kind

"""``generate/tinychain``: copy a tiny chain the package ships (checksums verified) or train it (its models and
its benchmark) for configs whose models are ``tinychain:NAME`` (the ``tinychain`` section's seed) or
``tinychain:seedN/NAME`` (seed N's chain, a unit of its own), or whose evaluation reads the tiny chain's
benchmark. The one kind that imports
:mod:`grrr_stream.fixtures` (the demo's chain is a fixture the sweep can build)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import ClassVar, Optional

from ...config import Seed, StrictModel
from ...errors import GrrrError
from ...files import atomic_write_text
from ...fixtures import tinychain
from ...fixtures.tinychain import build_chain, shipped_available
from ...fixtures.tinychain_shipped import MARKER  # the chain's record, written last
from ...forecast import work
from ..context import PlanContext, Problems, RunContext
from ..estimate import UnitForecast
from ..sections import Section
from ..units import Unit, UnitParams
from .base import Kind

NAME = "generate"  # the kind's name: its units' ``kind``, the registry's key; spelled only here

FOLDER = "tinychain"
UNIT_ID = "generate/tinychain"
FILES = "files.json"  # every file of the chain with its size and SHA-256, written when the unit finishes
# measured on the demo (2 CPU cores): not modelled by flops
SECONDS, QUICK_SECONDS, SHIPPED_SECONDS = 200.0, 90.0, 1.0


class TinyChainSpec(StrictModel):
    """The ``tinychain`` section: which tiny chain a config's ``tinychain:`` models and benchmark come from."""

    seed: Seed = 0
    quick: bool = False
    retrain: bool = False  # train here even where the package ships the chain (seed 0, full)


class GenerateParams(UnitParams):
    """Train the built-in tiny chain (its models and its benchmark)."""

    kind: ClassVar[str] = NAME
    seed: int
    quick: bool
    chain_version: int  # tinychain.CHAIN_VERSION: a new training recipe gets new results
    retrain: bool = False  # trained here, never the shipped copy: weights of this machine, results of their own

    def key_content(self) -> dict:
        # the shipped chain keeps the key the chain trained here had before it shipped
        return {
            "tinychain": self.chain_version,
            "seed": self.seed,
            "quick": self.quick,
            **({"retrain": True} if self.retrain else {}),
        }


def chain_of(spec: str, default_seed: int) -> tuple[int, str]:
    """The seed and model name a ``tinychain:`` source names: ``NAME`` is the ``tinychain`` section's chain,
    ``seedN/NAME`` the chain trained with seed N (raises ValueError for anything else)."""
    seed, sep, name = spec.rpartition("/")
    if not sep:
        return default_seed, spec
    m = re.fullmatch(r"seed(\d{1,6})", seed)
    if m is None:
        raise ValueError(f"tinychain:{spec}: expected tinychain:NAME or tinychain:seedN/NAME")
    return int(m.group(1)), name


def plan(ctx: PlanContext) -> tuple[list[Unit], Problems]:
    """One unit per tiny chain the config reads: the ``tinychain`` section's (its models, or its benchmark when an
    evaluation reads it) and each other seed that a ``tinychain:seedN/NAME`` source names."""
    cfg = ctx.cfg
    tc = cfg.tinychain or TinyChainSpec()
    uses_tiny_bench = any(e.enabled and e.bench_dir == "tinychain" for e in (cfg.evaluation, *cfg.extra_evaluations))
    problems: Problems = []
    wanted: dict[str, tuple[int, str]] = {}  # model id → (seed, model name)
    for mid, spec in ctx.generated.items():
        try:
            seed, name = chain_of(spec, tc.seed)
        except ValueError as e:
            problems.append(f"model {mid}: {e}")
            continue
        if name not in tinychain.MODELS:
            problems.append(f"model {mid}: tinychain sources name models {tinychain.MODELS}; got {name!r}")
            continue
        wanted[mid] = seed, name
    seeds = {s for s, _ in wanted.values()} | ({tc.seed} if uses_tiny_bench else set())
    units: dict[int, Unit] = {}
    for seed in sorted(seeds, key=lambda s: (s != tc.seed, s)):  # the section's chain first
        params = GenerateParams(seed=seed, quick=tc.quick, chain_version=tinychain.CHAIN_VERSION, retrain=tc.retrain)
        folder = (
            ctx.workdir.folder(FOLDER) / f"seed{seed}{'-quick' if tc.quick else ''}{'-retrained' if tc.retrain else ''}"
        )
        verb = "copy the shipped" if not tc.retrain and tinychain.shipped_available(seed, tc.quick) else "train the"
        label = f"{verb} tiny chain (seed {seed}{', quick' if tc.quick else ''})"
        # the section's chain keeps the id it always had; another seed's is named by its seed
        uid = UNIT_ID if seed == tc.seed else f"{UNIT_ID}-seed{seed}"
        units[seed] = Unit.of(uid, label, params, lambda key, folder=folder: folder)
    ctx.gen = units.get(tc.seed)  # whose benchmark a `bench_dir: tinychain` evaluation reads
    ctx.made = {mid: (units[seed], name) for mid, (seed, name) in wanted.items()}  # the sources key models by them
    return list(units.values()), problems


def planned(units: list[Unit]) -> list[Unit]:
    """The units that make tiny chains, among a plan's units."""
    return [u for u in units if u.kind == NAME]


def _digests(folder: Path) -> dict[str, list]:
    """Every file of the chain (relative path → [size, SHA-256]); the chain is a few MB, so a full hash is cheap."""
    import hashlib

    return {
        p.relative_to(folder).as_posix(): [p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest()]
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != FILES
    }


def _recorded(u: Unit) -> Optional[dict]:
    """The file list the unit recorded when it finished under its key (None: none, another key's, or unreadable)."""
    try:
        d = json.loads((Path(u.out) / FILES).read_text())
    except (OSError, ValueError):
        return None
    return d["files"] if isinstance(d, dict) and d.get("key") == u.key and isinstance(d.get("files"), dict) else None


def changed_files(u: Unit) -> Optional[list[str]]:
    """The chain's files that differ from what the unit recorded (changed, missing or added; None: no record). The
    units downstream are keyed by this unit's key, not by these bytes: they rest on the files staying as written."""
    recorded = _recorded(u)
    if recorded is None:
        return None
    now = _digests(Path(u.out))
    return sorted(rel for rel in set(recorded) | set(now) if recorded.get(rel) != now.get(rel))


def complete(u: Unit) -> bool:
    """Its chain record and its file list are there and every file is as the unit wrote it (size and full SHA-256):
    a model changed in place, or a file list deleted, makes the unit damaged, and the next run writes the chain
    again (and refuses it when it differs from the files the results downstream rest on)."""
    return (Path(u.out) / MARKER).is_file() and changed_files(u) == []


def run(u: Unit, ctx: RunContext) -> dict:
    p: GenerateParams = u.params
    before = _recorded(u)
    listless = before is None and (Path(u.out) / MARKER).is_file() and not (Path(u.out) / FILES).exists()
    if listless:
        before = _digests(Path(u.out))  # a finished chain whose file list is gone: the files as they are now
    if listless or changed_files(u):
        (Path(u.out) / MARKER).unlink(missing_ok=True)  # the chain is written again, not reused
    build_chain(Path(u.out), seed=p.seed, quick=p.quick, progress=ctx.progress, retrain=p.retrain)
    files = _digests(Path(u.out))
    differ = sorted(
        rel for rel in set(before or {}) | set(files) if before is not None and before.get(rel) != files.get(rel)
    )
    if differ:  # results downstream were computed from the chain as it was recorded
        raise GrrrError(
            f"the tiny chain written again in {u.out} differs from the one this sweep's results rest on "
            f"({', '.join(differ[:3])}); delete {u.out} and the workdir's results to start over"
        )

    atomic_write_text(Path(u.out) / FILES, json.dumps({"key": u.key, "files": files}, indent=1))
    meta = json.loads((Path(u.out) / MARKER).read_text())
    return {
        "accuracy": meta.get("accuracy"),
        "seconds": meta.get("seconds", {}).get("total"),
        "origin": meta.get("origin", "trained"),
    }


def estimate(u: Unit, facts) -> UnitForecast:
    p: GenerateParams = u.params
    seconds = QUICK_SECONDS if p.quick else SECONDS
    if not p.retrain and shipped_available(p.seed, p.quick):
        seconds = SHIPPED_SECONDS  # a verified copy of the shipped chain
    return UnitForecast(u.id, u.kind, 0, facts.write(u), work.BASELINE_RAM, seconds, "constant (demo, 2 cores)")


KIND = Kind(
    name=NAME,
    params=GenerateParams,
    plan=plan,
    run=run,
    marker=MARKER,
    config=(Section("tinychain", TinyChainSpec, optional=True),),
    on_worker=True,
    estimate=estimate,
    complete=complete,
)

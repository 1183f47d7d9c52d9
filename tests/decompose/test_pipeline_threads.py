"""The pipeline's threads: the reader and writer do their tensor work on one torch thread each, while the
math keeps the run's compute threads (issue 26: each side thread otherwise started its own OpenMP team)."""

from __future__ import annotations

import torch
from helpers.common import no_track_config

from grrr_stream.decompose import stages, streaming
from grrr_stream.decompose.run import run_transition


def test_side_threads_use_one_torch_thread_and_math_keeps_its_count(planted_f64, tmp_path, monkeypatch):
    seen: dict[str, set[int]] = {"read": set(), "compute": set(), "write": set()}
    read, compute, write = stages.Pipeline.read, stages.Pipeline.compute, stages.Pipeline.write

    def spy(name, fn):
        def wrapped(self, *a, **k):
            seen[name].add(torch.get_num_threads())
            return fn(self, *a, **k)

        return wrapped

    monkeypatch.setattr(stages.Pipeline, "read", spy("read", read))
    monkeypatch.setattr(stages.Pipeline, "compute", spy("compute", compute))
    monkeypatch.setattr(stages.Pipeline, "write", spy("write", write))
    before = torch.get_num_threads()
    base, post = planted_f64
    res = run_transition(no_track_config(base=str(base), post=str(post), store=tmp_path / "s", cpu_threads=2))
    assert res.computed == 14
    assert seen == {"read": {1}, "compute": {2}, "write": {1}}
    assert torch.get_num_threads() == before  # the caller's count is restored after the run


def test_lanes_give_the_same_store_as_one_matrix_at_a_time(planted_f64, tmp_path, monkeypatch):
    """Small matrices run in lanes (several at once, one torch thread each); each matrix's math is the same
    one-thread computation, so every stored array and metric equals a one-lane run's bit for bit, and the
    lanes really ran side by side on their own threads."""
    import threading

    import numpy as np
    import zarr

    from grrr_stream.store.xarray_view import read_metrics

    real = torch.get_num_threads()
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)  # as on a 2-core machine, whatever this one has
    names: set[str] = set()
    compute = stages.Pipeline.compute

    def spy(self, item):
        names.add(threading.current_thread().name)
        return compute(self, item)

    monkeypatch.setattr(stages.Pipeline, "compute", spy)
    base, post = planted_f64
    lanes = run_transition(no_track_config(base=str(base), post=str(post), store=tmp_path / "lanes"))
    assert {n.rsplit("_", 1)[0] for n in names} == {"grrr-lane"} and len(names) == 2
    names.clear()
    one = run_transition(no_track_config(base=str(base), post=str(post), store=tmp_path / "one", cpu_threads=1))
    monkeypatch.undo()
    torch.set_num_threads(real)  # the runs restored the patched count
    assert names == {threading.main_thread().name}
    assert lanes.computed == one.computed == 14
    a, b = zarr.open_group(str(tmp_path / "lanes"), mode="r"), zarr.open_group(str(tmp_path / "one"), mode="r")
    paths = _array_paths(a)
    assert paths == _array_paths(b) and len(paths) >= 14 * 3, paths
    for path in paths:
        np.testing.assert_array_equal(np.asarray(a[path]), np.asarray(b[path]), err_msg=path)
    ma, mb = read_metrics(tmp_path / "lanes"), read_metrics(tmp_path / "one")
    assert ma.sort_values("name").reset_index(drop=True).equals(mb.sort_values("name").reset_index(drop=True))


def _array_paths(group, prefix: str = "") -> list[str]:
    out = []
    for name, member in group.members():
        path = f"{prefix}{name}"
        out.extend(_array_paths(member, path + "/") if hasattr(member, "members") else [path])
    return sorted(out)


def test_finiteness_check_finds_every_kind_of_bad_entry():
    """The reader's check: one NaN, +Inf or −Inf anywhere is found and counted, in every checkpoint dtype, and
    a finite matrix whose sum overflows the dtype is still finite (the cheap sum test is only a first pass)."""
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        ok = torch.randn(64, 48).to(dtype)
        assert stages._nonfinite(ok, "m", "base") is None
        big = torch.full((64, 48), torch.finfo(dtype).max / 2, dtype=dtype)  # the sum overflows, the entries do not
        assert stages._nonfinite(big, "m", "base") is None
        for bad, want in (
            (float("nan"), "1 NaN and 0 Inf"),
            (float("inf"), "0 NaN and 1 Inf"),
            (float("-inf"), "0 NaN and 1 Inf"),
        ):
            t = ok.clone()
            t[37, 11] = bad
            assert want in stages._nonfinite(t, "m", "base"), (dtype, bad)
        two = ok.clone()
        two[0, 0], two[1, 1] = float("inf"), float("-inf")  # their sum is NaN: still two Inf entries
        assert "0 NaN and 2 Inf" in stages._nonfinite(two, "m", "post")
    assert stages._nonfinite(torch.empty(0, 3), "m", "base") is None


def test_lanes_follow_cores_and_memory():
    """One lane per core for small matrices, at most MAX_LANES (the cores left over go to each lane), and no
    more lanes than LANES_RAM holds: Qwen2.5-1.5B's largest matrix (8960×1536) runs two lanes on 2 cores,
    Qwen2.5-7B's (18944×3584) and Qwen3-14B's (17408×5120) one, as before lanes; float64 halves the room."""
    L = streaming.lanes_for
    assert L(1536 * 576, 4, 2) == streaming.ComputeLayout(2, 1)
    assert L(1536 * 576, 4, 1) == streaming.ComputeLayout(1, 1)
    assert L(1536 * 576, 4, 16) == streaming.ComputeLayout(streaming.MAX_LANES, 16 // streaming.MAX_LANES)
    assert L(8960 * 1536, 4, 2) == streaming.ComputeLayout(2, 1)
    assert L(18944 * 3584, 4, 2) == streaming.ComputeLayout(1, 2)
    assert L(17408 * 5120, 4, 16) == streaming.ComputeLayout(1, 16)
    lanes_f32, lanes_f64 = L(8960 * 1536, 4, 16).lanes, L(8960 * 1536, 8, 16).lanes
    assert lanes_f64 < lanes_f32 and lanes_f64 * streaming.LANE_BUFFERS * 8960 * 1536 * 8 <= streaming.LANES_RAM

"""The pipeline's threads: the reader and writer do their tensor work on one torch thread each, while the
math keeps the run's compute threads (issue 26: each side thread otherwise started its own OpenMP team)."""

from __future__ import annotations

import torch

from conftest import no_track_config
from grrr_stream.decompose import streaming
from grrr_stream.decompose.run import run_transition


def test_side_threads_use_one_torch_thread_and_math_keeps_its_count(planted_f64, tmp_path, monkeypatch):
    seen: dict[str, set[int]] = {"read": set(), "compute": set(), "write": set()}
    read, compute, write = streaming._Pipeline.read, streaming._Pipeline.compute, streaming._Pipeline.write

    def spy(name, fn):
        def wrapped(self, *a, **k):
            seen[name].add(torch.get_num_threads())
            return fn(self, *a, **k)
        return wrapped

    monkeypatch.setattr(streaming._Pipeline, "read", spy("read", read))
    monkeypatch.setattr(streaming._Pipeline, "compute", spy("compute", compute))
    monkeypatch.setattr(streaming._Pipeline, "write", spy("write", write))
    before = torch.get_num_threads()
    base, post = planted_f64
    res = run_transition(no_track_config(base=str(base), post=str(post), store=tmp_path / "s", cpu_threads=2))
    assert res.computed == 14
    assert seen == {"read": {1}, "compute": {2}, "write": {1}}
    assert torch.get_num_threads() == before  # the caller's count is restored after the run

"""The progress reporter off a terminal: a line once `every` seconds have passed, the last item when an earlier
line was printed, nothing for a short step."""

from __future__ import annotations

import io
import sys

from grrr_stream import progress as progress_module
from grrr_stream.progress import Progress


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_lines_are_throttled_and_the_last_is_printed(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    s = io.StringIO()
    p = Progress(5, label="[m] ", stream=s, every=10.0)
    for i in range(5):
        clock.now += 4.0  # items end at 4, 8, 12, 16, 20 s
        p.advance(f"matrix {i}")
    lines = s.getvalue().splitlines()
    assert [ln.split(" | ")[1] for ln in lines] == ["matrix 2", "matrix 4"]  # 12 s ≥ 10 s; then the last
    assert lines[-1].startswith("[m] [5/5] 100.0%") and "4.00 s/it" in lines[-1] and "ETA 0s" in lines[-1]
    assert "ETA 8s" in lines[0]  # 2 items left at 4 s each


def test_a_short_step_prints_nothing_off_a_terminal(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    s = io.StringIO()
    p = Progress(3, stream=s, every=10.0)
    for i in range(3):
        clock.now += 1.0
        p.advance(str(i))
    assert s.getvalue() == ""


def test_vllm_prompt_bar_adapter_counts_prompts(monkeypatch, capsys):
    """The object handed to vLLM as use_tqdm: the generation loop's bar becomes a progress line; the bar over
    requests being added passes the iterable through; nothing at all unless the engine's progress is on."""
    from grrr_stream.evaluation.engine import Engine

    clock = _Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    engine = Engine.__new__(Engine)  # no vLLM needed: only the progress hook
    assert engine._progress_bar() is False
    engine.progress = True
    make = engine._progress_bar()
    items = [1, 2, 3]
    assert make(items, desc="Adding requests") is items
    bar = make(total=4, desc="Processed prompts", dynamic_ncols=True, postfix="")
    for _ in range(4):
        clock.now += 6.0
        bar.update(1)
        assert bar.format_dict["elapsed"] > 0
    bar.refresh()
    bar.close()
    err = capsys.readouterr().err
    assert bar.n == 4 and "  generating [2/4]  50.0% | problems" in err and "  generating [4/4] 100.0%" in err
    # a benchmark's line handed in: vLLM's updates count problems there (once per finished request, whatever n
    # samples it carries), over several generate calls; no bar of the engine's own
    engine.bar = Progress(3, label="  [evaluate full / arith] ", every=0.0)
    for _ in range(2):
        bar = engine._progress_bar()(total=6, desc="Processed prompts")
        bar.update(2)
    err = capsys.readouterr().err
    assert engine.bar.done == 2 and "generating" not in err and "  [evaluate full / arith] [2/3]" in err


def test_eta_leaves_out_items_done_before_and_skipped(monkeypatch):
    """A resumed run: 4 of 10 done before, 1 found done while running; 2 items take 5 s each → 3 left at 5 s."""
    clock = _Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    s = io.StringIO()
    p = Progress(10, done=4, stream=s, every=0.0)
    p.skip()
    for i in range(2):
        clock.now += 5.0
        p.advance(f"m{i}")
    last = s.getvalue().splitlines()[-1]
    assert last.startswith("[ 7/10]  70.0% | m1 | 5.00 s/it | ETA 15s"), last


def test_track_counts_each_item_once_the_next_is_asked_and_advance_to_does_not_count_twice(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    s = io.StringIO()
    p = Progress(3, stream=s, every=0.0)
    seen = []
    for x in p.track(["a", "b", "c"], item=str.upper):
        seen.append((x, p.done))  # the item being consumed is not counted yet
        clock.now += 1.0
    assert seen == [("a", 0), ("b", 1), ("c", 2)] and p.done == 3
    p.advance_to(3, "again")  # another caller counted them: nothing more, no line
    p.advance_to(2, "back")
    lines = s.getvalue().splitlines()
    assert [ln.split(" | ")[1] for ln in lines] == ["A", "B", "C"] and lines[-1].endswith("ETA 0s")


def test_a_disabled_reporter_prints_nothing(monkeypatch):
    s = io.StringIO()
    p = Progress(2, stream=s, enabled=False, every=0.0)
    p.message("hello")
    list(p.track([1, 2]))
    assert s.getvalue() == "" and p.done == 2


def test_dask_tasks_counts_the_tasks_of_each_graph_computed_locally(monkeypatch, capsys):
    """Every task of a local graph is an item; a second graph adds its tasks to the total; off."""
    dask = __import__("pytest").importorskip("dask")
    from grrr_stream.progress import dask_tasks

    clock = _Clock()

    def tick():
        clock.now += 11.0  # past the 10 s between lines: every task prints
        return clock.now

    monkeypatch.setattr(progress_module.time, "monotonic", tick)
    parts = [dask.delayed(lambda i: i * i)(i) for i in range(4)]
    with dask_tasks("[t] ") as bar:
        assert dask.compute(dask.delayed(sum)(parts), scheduler="synchronous")[0] == 14
        first = bar.total
        dask.compute(*parts[:2], scheduler="threads")
    err = capsys.readouterr().err.splitlines()
    lines = [ln for ln in err if ln.startswith("[t] [")]
    assert first == 5 and bar.total == 7 and bar.done == 7  # 4 squares + the sum; then 2 more
    assert len(lines) == 7 and lines[4].startswith("[t] [5/5] 100.0% | tasks") and lines[4].endswith("ETA 0s")
    with dask_tasks("[t] ", enabled=False) as off:
        dask.compute(*parts, scheduler="synchronous")
    assert off.done == 0 and "[t]" not in capsys.readouterr().err


def test_hub_download_bars_are_drawn_on_the_console_also_inside_a_sweep_unit(monkeypatch, tmp_path):
    """A sweep unit's output goes to its log; huggingface_hub's bars of a model download go to the terminal."""
    import huggingface_hub

    from grrr_stream import unit_log
    from grrr_stream.checkpoints.reader import resolve_source

    seen = {}

    def fake_download(**kwargs):
        seen.update(kwargs)
        return str(tmp_path)

    terminal = io.StringIO()
    # huggingface_hub's bars can be switched off process-wide (HF_HUB_DISABLE_PROGRESS_BARS, or a library
    # calling disable_progress_bars(), which an earlier test's imports may have done): on for this test
    from huggingface_hub.utils import tqdm as hf_tqdm

    monkeypatch.setattr(sys.modules[hf_tqdm.__module__], "are_progress_bars_disabled", lambda name=None: False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    monkeypatch.setattr(unit_log, "_console", terminal)
    assert resolve_source("owner/model") == tmp_path
    bar = seen["tqdm_class"](total=2, desc="Fetching 2 files", disable=False)
    bar.update(2)
    bar.close()
    assert "Fetching 2 files" in terminal.getvalue() and "2/2" in terminal.getvalue()

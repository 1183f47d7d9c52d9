"""The progress reporter off a terminal: a line once `every` seconds have passed, the last item when an earlier
line was printed, nothing for a short step."""

from __future__ import annotations

import io

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
    assert bar.n == 4 and "  generating [2/4]  50.0% | prompts" in err and "  generating [4/4] 100.0%" in err

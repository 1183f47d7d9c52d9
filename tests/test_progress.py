"""The progress reporter off a terminal: at most one line per interval, and always the last item."""

from __future__ import annotations

import io

from grrr_stream.progress import Progress


def test_off_a_terminal_lines_are_throttled_and_the_last_is_printed():
    s = io.StringIO()
    p = Progress(5, label="[m] ", stream=s, every=1000.0)
    for i in range(5):
        p.advance(f"matrix {i}")
    lines = s.getvalue().splitlines()
    assert [ln.split(" | ")[1] for ln in lines] == ["matrix 0", "matrix 4"]
    assert lines[-1].startswith("[m] [5/5] 100.0%") and "ETA 0s" in lines[-1]


def test_every_zero_prints_each_update():
    s = io.StringIO()
    p = Progress(3, stream=s, every=0.0)
    for i in range(3):
        p.advance(str(i))
    assert len(s.getvalue().splitlines()) == 3


def test_vllm_prompt_bar_adapter_counts_prompts(capsys):
    """The object handed to vLLM as use_tqdm: the generation loop's bar becomes a progress line; the bar over
    requests being added passes the iterable through; nothing at all unless the engine's progress is on."""
    from grrr_stream.evaluation.engine import Engine

    engine = Engine.__new__(Engine)  # no vLLM needed: only the progress hook
    assert engine._progress_bar() is False
    engine.progress = True
    make = engine._progress_bar()
    items = [1, 2, 3]
    assert make(items, desc="Adding requests") is items
    bar = make(total=4, desc="Processed prompts", dynamic_ncols=True, postfix="")
    for _ in range(4):
        bar.update(1)
        assert bar.format_dict["elapsed"] > 0
    bar.refresh()
    bar.close()
    err = capsys.readouterr().err
    assert bar.n == 4 and "  generating [4/4] 100.0% | prompts" in err

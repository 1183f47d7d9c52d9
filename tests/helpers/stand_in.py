"""What evaluation tests share: a deterministic stand-in for the vLLM engine and a decomposed tiny pair with
a 'sums' benchmark (imported by name from tests in several folders and by tests/helpers/mlflow_ui.py and
tests/helpers/report_sweep.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from grrr_stream.decompose.run import run_transition
from grrr_stream.evaluation.settings import EngineSettings
from grrr_stream.fixtures.synthetic import TINY, Update, make_transition
from helpers.common import no_track_config

SETTINGS = EngineSettings(max_new_tokens=32)


class StandInEngine:
    """Answers 'a+b' problems: right or wrong, cut off or not, with some 'Wait's, as a function of the
    weights it holds and the problem, so that variants differ and reruns agree."""

    started: list[tuple[Path, Path]] = []

    def __init__(self, model, settings, *, prompt_format=None):
        StandInEngine.started.append((Path(model), Path(prompt_format)))
        self.settings, self.digest, self.loads = settings, "", []

    def load_weights(self, tensors, **_):
        h = hashlib.sha256()
        for name, t in tensors:
            h.update(name.encode() + t.double().sum().item().hex().encode())
        self.digest = h.hexdigest()
        self.loads.append(self.digest)

    def prompts(self, problems, template, instruction):
        return [p.question for p in problems]

    calls = 0

    def generate(self, prompts, sampling=None):
        from grrr_stream.evaluation.engine import Generation

        StandInEngine.calls += 1
        n = sampling.n if sampling is not None else 1
        out = []
        for p in prompts:
            answers = []
            for s in range(n):
                h = int(hashlib.sha256((self.digest + p + (f"#{s}" if s else "")).encode()).hexdigest(), 16)
                answer = eval(p) if h % 3 else -1  # noqa: S307 - our own 'a+b' strings
                capped = h % 7 == 0
                answers.append(
                    Generation(
                        f"Wait, {'Wait, ' * (h % 4)}\\boxed{{{answer}}}",
                        32 if capped else 5,
                        "length" if capped else "stop",
                    )
                )
            out.append(answers)
        return out

    def close(self):
        pass


def sums_transition(root, n_a: int = 7, n_b: int = 9, *, update: Update = Update(r_delta=2e-2), dtype: str = "float32"):
    """A decomposed tiny pair (``update`` planted, both checkpoints in ``dtype``) and a 'sums' benchmark of
    n_a × n_b problems: (base, post, store, bench folder)."""
    base, post = make_transition(root / "m", TINY, family="qwen2", dtype=dtype, update=update)
    store = root / "s"
    run_transition(no_track_config(base=str(base), post=str(post), store=store))
    bench = root / "bench" / "sums"
    bench.mkdir(parents=True)
    bench.joinpath("test.jsonl").write_text(
        "".join(
            json.dumps({"problem": f"{a}+{b}", "answer": str(a + b)}) + "\n" for a in range(n_a) for b in range(n_b)
        )
    )
    return base, post, store, root / "bench"

"""Answers shared across the evaluations of a sweep: a model that several transitions evaluate (a chain's base is
the base of base → sft, base → rl and base → sibling; sft is full of one and base of the next) is decoded once per
setting, and its answers serve every evaluation that asks for it.

A variant that *is* a checkpoint (base, full) is keyed by what determines its answers: a digest over every tensor
the engine would be given (name, dtype, shape, bytes), the config it runs with, the engine's result settings, the
prompt format, the template and instruction, the sampling and the benchmark file. Its answers are kept under that
key in ``<root>/<key>/<benchmark>.jsonl``, chained as every answers file is (:mod:`.answers`): a changed or moved
line there is found and not reused. An evaluation copies the verified answers it lacks into its own file under its
own key before it scores the variant (what is there then counts as answered: nothing is generated for it), and
adds what it generated afterwards. Composed variants are keyed by their transition and are not shared.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable

from ..config import stable_hash
from ..locks import FileLock
from .answers import AnswersFile, answered

FOLDER = "answers"  # under a sweep's workdir
REUSED = "reused_from"  # a copied record names the shared key it came from


def weights_digest(builder: Any) -> str:
    """SHA-256 over every tensor the variant's engine is given, in order: its name, dtype, shape and bytes."""
    import torch  # the builder's tensors (the rest of this module is read without torch)

    h = hashlib.sha256()
    for name, t in builder.tensors():
        t = t.detach().contiguous().cpu()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def model_key(evaluation: Any, name: str, bench: Any, weights: str) -> str:
    """What determines the answers of checkpoint variant ``name`` on ``bench`` (see the module's docstring)."""
    opts = evaluation.options
    fields = {
        "weights": weights,
        "config": stable_hash(evaluation.builders[name].config(), 24),
        "engine": opts.engine.result_fields(),
        "template": opts.template,
        "instruction": evaluation.instruction,
        "prompt_format": evaluation.prompt["digest"],
        "sampling": opts.sampling.key_fields(),
        "benchmark": {"name": bench.name, "sha256": bench.sha256, "n": len(bench.problems)},
    }
    return stable_hash(fields, 24)


class SharedAnswers:
    """The shared answers of one sweep, in ``root``; the keys of an evaluation's checkpoint variants are computed
    once per variant (a read of its weights)."""

    def __init__(self, root: Path, log: Callable[[str], None] = print):
        self.root, self.log = Path(root), log
        self._weights: dict[tuple[int, str], str] = {}

    @staticmethod
    def shares(evaluation: Any, name: str) -> bool:
        """Whether variant ``name`` is a checkpoint, bit for bit (the only variants another transition can have)."""
        return not evaluation.builders[name].spec.composed

    def keys(self, evaluation: Any, name: str) -> dict[str, str]:
        """Benchmark → the shared key of variant ``name``'s answers on it."""
        cache = (id(evaluation), name)
        if cache not in self._weights:
            self._weights[cache] = weights_digest(evaluation.builders[name])
        return {b.name: model_key(evaluation, name, b, self._weights[cache]) for b in evaluation.benches}

    def path(self, key: str, bench: str) -> Path:
        return self.root / key / f"{bench}.jsonl"

    def take(self, evaluation: Any, name: str, keys_of: dict[str, str]) -> int:
        """Copy the verified shared answers variant ``name`` lacks into its own files (under its keys,
        ``keys_of``: benchmark → key); how many were copied."""
        taken = 0
        for b, shared in self.keys(evaluation, name).items():
            source = self.path(shared, b)
            if not source.is_file():
                continue
            with FileLock(source.with_suffix(".lock"), wait=True):
                have = answered(source, shared, self.log)
            own = AnswersFile(evaluation.out / name / f"{b}.jsonl", keys_of[b], self.log)
            new = [{**r, "key": keys_of[b], REUSED: shared} for i, r in sorted(have.items()) if i not in own.done]
            if new:
                own.append(new)
                taken += len(new)
        if taken:
            self.log(f"{name}: {taken} answer(s) reused from the same model evaluated elsewhere in the sweep")
        return taken

    def give(self, evaluation: Any, name: str, keys_of: dict[str, str]) -> int:
        """Add the answers variant ``name`` has under its keys to the shared files; how many were added."""
        given = 0
        for b, shared in self.keys(evaluation, name).items():
            mine = answered(evaluation.out / name / f"{b}.jsonl", keys_of[b], self.log)
            if not mine:
                continue
            target = self.path(shared, b)
            target.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(target.with_suffix(".lock"), wait=True):
                pool = AnswersFile(target, shared, self.log)
                new = [_rekeyed(r, shared) for i, r in sorted(mine.items()) if i not in pool.done]
                if new:
                    pool.append(new)
                    given += len(new)
        return given


def _rekeyed(record: dict, key: str) -> dict:
    out = {k: v for k, v in record.items() if k != REUSED}
    out["key"] = key
    return out

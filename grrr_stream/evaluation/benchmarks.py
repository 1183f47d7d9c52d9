"""Math benchmarks: the bundled copies, loading a ``test.jsonl`` into problems, and fetching from the Hub."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from ..errors import BenchmarkNotFoundError, ConfigError, MissingDependencyError
from .grading import last_boxed

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
BUNDLED = Path(__file__).resolve().parent.parent / "benchmarks"


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
    from ..files import check_component

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
            raise ConfigError(
                bad + "; fix the file, or skip such lines with `grrr-stream evaluate "
                "--lenient-benchmarks` (`evaluation.lenient: true` in a sweep config)"
            )
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
        raise BenchmarkNotFoundError(
            f"could not fetch benchmark {name} from the Hub ({repo}): {e}; the same "
            "five benchmarks ship with grrr_stream (leave --bench-dir unset)"
        ) from None
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
            log(
                f"WARNING: {b} from the Hub ({repo}) differs from the copy shipped with grrr_stream "
                f"(sha256 {digest[:12]}… vs {sums[b][:12]}…); evaluating the Hub's file"
            )
    return root

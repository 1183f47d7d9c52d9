"""The five math benchmarks shipped with the package: checksums, provenance records, the
default --bench-dir, and `--bench-dir hub` against an offline Hugging Face cache."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from grrr_stream.evaluation import benchmarks as ev
from grrr_stream.evaluation.benchmarks import BUNDLED, FIVE, bundled_checksums, load_benchmark, resolve_bench_dir

ROOT = Path(__file__).resolve().parents[2]


def test_bundled_files_match_their_recorded_sha256_and_git_blob_ids():
    sums = bundled_checksums()
    assert sorted(sums) == sorted(FIVE)
    readme = (BUNDLED / "README.md").read_text()
    for name in FIVE:
        data = (BUNDLED / name / "test.jsonl").read_bytes()
        assert hashlib.sha256(data).hexdigest() == sums[name], name
        # the README's provenance row: size, the source's git blob id and the sha256 of this very file
        row = next(line for line in readme.splitlines() if line.startswith(f"| `{name}/`"))
        blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        assert f"{len(data):,}" in row and f"`{blob}`" in row and f"`{sums[name]}`" in row, name
    for lic in ("LICENSE-simpleRL-reason", "LICENSE-math-evaluation-harness"):
        assert (BUNDLED / lic).read_text().startswith("MIT License")


def test_nothing_reads_the_shared_folder_outside_the_project():
    """A fresh clone without ../shared must work: no code, test, config or CI script points there."""
    files = [
        p
        for d in ("grrr_stream", "tests", "tools", "configs", ".ci")
        for p in (ROOT / d).rglob("*")
        if p.is_file() and p.suffix in ("", ".py", ".yaml", ".sh", ".toml") and "benchmarks" not in p.parts
    ]
    files += [ROOT / "pyproject.toml"]
    pattern = re.compile(r"\.\./shared|parents\[2\]\s*/\s*[\"']shared|GRRR_BENCHMARKS")
    assert not [str(p) for p in files if p != Path(__file__) and pattern.search(p.read_text(errors="replace"))]


def test_default_bench_dir_is_the_bundled_copy_and_keys_do_not_depend_on_where_it_lives(tmp_path, monkeypatch):
    from grrr_stream.sweep import plan_sweep
    from grrr_stream.sweep.config import SweepEvaluation, load_sweep_config

    assert resolve_bench_dir(None, FIVE, tmp_path) == resolve_bench_dir("bundled", FIVE, tmp_path) == BUNDLED
    assert resolve_bench_dir(tmp_path / "mine", FIVE, tmp_path) == tmp_path / "mine"
    assert SweepEvaluation().bench_dir == "bundled"

    def math_unit():
        cfg = load_sweep_config(ROOT / "configs" / "demo.yaml", workdir=tmp_path / "w")
        extra = SweepEvaluation.model_validate(
            {
                **cfg.evaluation.model_dump(),
                "suite": "math",
                "benchmarks": list(FIVE),
                "bench_dir": "bundled",
                "limit": 3,
            }
        )
        plan = plan_sweep(cfg.model_copy(update={"extra_evaluations": [extra]}))
        return plan.unit("evaluate/base-to-rl/math")

    here = math_unit()
    assert here.params.bench_dir == str(BUNDLED)
    moved = tmp_path / "site-packages" / "benchmarks"  # the same files installed elsewhere
    shutil.copytree(BUNDLED, moved)
    monkeypatch.setattr(ev, "BUNDLED", moved)
    there = math_unit()
    assert there.params.bench_dir == str(moved) and there.key == here.key
    (moved / "amc23" / "test.jsonl").write_bytes(b'{"problem": "1+1", "answer": 2}\n')
    assert math_unit().key != here.key  # changed content: new results


# -- --bench-dir hub, offline ---------------------------------------------------------------

COMMIT = "cf1c7858bfc145a27aa733e75d930d34f0d318a6"


def hub_cache(root: Path, repo: str, files: dict[str, bytes]) -> Path:
    """A Hugging Face Hub cache as huggingface_hub lays it out after a download: blobs named by
    their etag (the git blob id for a plain file), snapshot files as relative symlinks into the
    blobs, refs/main naming the snapshot's commit. `hf_hub_download` resolves files from it with
    HF_HUB_OFFLINE=1 (https://huggingface.co/docs/hub/local-cache)."""
    repo_dir = root / ("models--" + repo.replace("/", "--"))  # hf_hub_download's default repo_type
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(COMMIT)  # no newline, as huggingface_hub writes it
    for rel, data in files.items():
        blob = repo_dir / "blobs" / hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        blob.parent.mkdir(exist_ok=True)
        blob.write_bytes(data)
        link = repo_dir / "snapshots" / COMMIT / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return root


def test_hub_bench_dir_loads_the_same_problems_from_an_offline_cache(tmp_path):
    bundled = {n: (BUNDLED / n / "test.jsonl").read_bytes() for n in ("aime24", "amc23")}
    cache = hub_cache(tmp_path / "hub", ev.HUB_REPO, {ev.HUB_PATH.format(name=n): d for n, d in bundled.items()})
    altered = bundled["amc23"].replace(b'"answer":27.0', b'"answer":28.0', 1)
    assert altered != bundled["amc23"]
    hub_cache(cache, "someone/copy", {ev.HUB_PATH.format(name="amc23"): altered})
    # huggingface_hub reads HF_HUB_CACHE and HF_HUB_OFFLINE when imported: a fresh process, as a user runs it
    script = """
import json, sys
from pathlib import Path
from grrr_stream.errors import BenchmarkNotFoundError
from grrr_stream.evaluation.benchmarks import load_benchmark, resolve_bench_dir
out, logs, res = Path(sys.argv[1]), [], {}
root = resolve_bench_dir("hub", ["aime24", "amc23"], out / "a", log=logs.append)
res["problems"] = {b: [[p.question, p.gold] for p in load_benchmark(b, root).problems] for b in ("aime24", "amc23")}
res["root"] = str(root)
other = resolve_bench_dir("hub:someone/copy", ["amc23"], out / "b", log=logs.append)
res["other_gold"] = load_benchmark("amc23", other).problems[0].gold
try:
    resolve_bench_dir("hub", ["minerva_math"], out / "c")
except BenchmarkNotFoundError as e:
    res["missing"] = str(e)
res["logs"] = logs
print(json.dumps(res))
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    env.pop("HF_HOME", None)
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["root"] == str(tmp_path / "a" / "_benchmarks")
    for b in ("aime24", "amc23"):
        assert res["problems"][b] == [[p.question, p.gold] for p in load_benchmark(b, BUNDLED).problems]
        assert (tmp_path / "a" / "_benchmarks" / b / "test.jsonl").read_bytes() == bundled[b]
    # another repository's differing copy is used, and the difference is reported
    assert res["other_gold"] == "28"
    assert len(res["logs"]) == 1 and "amc23 from the Hub (someone/copy) differs" in res["logs"][0]
    # a file the cache lacks, offline: a clear error pointing at the bundled copy
    assert "could not fetch benchmark minerva_math" in res["missing"] and "leave --bench-dir unset" in res["missing"]


def test_evaluate_command_defaults_to_the_bundled_benchmarks():
    from grrr_stream.cli.entry import build_parser

    args = build_parser().parse_args(["evaluate", "--store", "S", "--out", "O"])
    assert args.bench_dir == "bundled"
    assert [len(load_benchmark(b, resolve_bench_dir(args.bench_dir, FIVE, Path("O"))).problems) for b in FIVE] == [
        500,
        30,
        40,
        272,
        675,
    ]

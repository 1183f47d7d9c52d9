#!/usr/bin/env python3
"""Host RAM of an evaluation beside the engine's own weights, on this CPU (vLLM's CPU backend, float32).

For each shape (a SmolLM2-135M-shaped and a Qwen2.5-1.5B-shaped Qwen2 model, built by transformers' classes
with :func:`grrr_stream.fixtures.synthetic_hf.make_hf_model`, the tiny chain's byte tokenizer copied in so
that vLLM can prompt them; the post model another seed of the same shapes), a store is decomposed, then in
fresh subprocesses, one at a time:
  - ``engine``: the engine alone (load the base model, greedy answers to --prompts arith problems of
    --max-new-tokens), its peak RSS;
  - ``evaluate``: ``grrr-stream evaluate`` of --variants streamed into the running engine, the same
    problems and lengths, its peak RSS.
Prints one JSON line per shape: both peaks, their difference (what the evaluation holds beside the
engine), the largest tensor, and the difference less that tensor (the target: at most 1 GiB).

    python tools/bench_evaluate_ram.py [--shapes smollm2-135m,qwen25-1.5b] [--layers-1.5b 28]
                                       [--out bench_out/evaluate_ram]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package, as the children use

SHAPES = {  # the published configs' sizes (vocabulary included: the embedding is the largest tensor)
    "smollm2-135m": dict(
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        vocab_size=49152,
    ),
    "qwen25-1.5b": dict(
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        head_dim=128,
        vocab_size=151936,
    ),
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")
ENGINE_CHILD = """
import json, sys
from pathlib import Path
from grrr_stream.evaluation.benchmarks import load_benchmark
from grrr_stream.evaluation.engine import Engine
from grrr_stream.evaluation.settings import EngineSettings
model, bench, prompts, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
engine = Engine(Path(model), EngineSettings(max_new_tokens=tokens, enforce_eager=True, max_model_len=512,
                                            dtype="float32", cpu_kv_cache_gib=0.25))
problems = load_benchmark("arith", Path(bench), limit=prompts).problems
engine.generate(engine.prompts(problems))
engine.close()
with open("/proc/self/status") as f:
    print(json.dumps({"peak_rss_mib": next(int(x.split()[1]) for x in f if x.startswith("VmHWM:")) / 1024}))
"""


def _env() -> dict:
    here = str(Path(__file__).resolve().parents[1])  # this checkout's package, not an installed one
    return {
        **os.environ,
        "PYTHONPATH": here,
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_LOGGING_LEVEL": "WARNING",
        "HF_HUB_OFFLINE": "1",
    }


def build(root: Path, sizes: dict) -> dict[str, Path]:
    """base and post models of ``sizes`` under ``root``, with the tiny chain's tokenizer (kept when there)."""
    import torch

    from grrr_stream.fixtures.synthetic_hf import make_hf_model
    from grrr_stream.fixtures.tinychain_shipped import SHIPPED

    tok = SHIPPED / "base"
    out = {}
    for name, seed in (("base", 0), ("post", 1)):
        folder = root / name
        if not (folder / "model.safetensors.index.json").is_file() and not (folder / "model.safetensors").is_file():
            make_hf_model(
                folder,
                "qwen2",
                seed=seed,
                dtype=torch.float32,
                tie_word_embeddings=False,
                max_position_embeddings=512,
                bos_token_id=256,
                eos_token_id=258,
                pad_token_id=256,
                **sizes,
            )
        for f in TOKENIZER_FILES:
            shutil.copy(tok / f, folder / f)
        out[name] = folder
    return out


def decompose(models: dict[str, Path], store: Path) -> None:
    """The store of base → post (kept when there)."""
    if (store / "zarr.json").is_file():
        return
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grrr_stream.cli",
            "decompose",
            "--base",
            str(models["base"]),
            "--post",
            str(models["post"]),
            "--store",
            str(store),
            "--no-progress",
            "--no-track",
        ],
        check=True,
        env=_env(),
    )


def evaluate_peak(store: Path, bench: Path, out: Path, args) -> float:
    """Peak RSS (MiB) of ``grrr-stream evaluate`` in a fresh process (its only child: RUSAGE_CHILDREN)."""
    shutil.rmtree(out, ignore_errors=True)
    code = (
        "import resource, subprocess, sys, json; subprocess.run(sys.argv[1:], check=True); "
        "print(json.dumps({'peak_rss_mib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))"
    )
    cmd = [
        sys.executable,
        "-m",
        "grrr_stream.cli",
        "evaluate",
        "--store",
        str(store),
        *[a for v in args.variants.split(",") for a in ("--variant", v)],
        "--benchmark",
        "arith",
        "--bench-dir",
        str(bench),
        "--out",
        str(out),
        "--limit",
        str(args.prompts),
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--engine-dtype",
        "float32",
        "--enforce-eager",
        "--max-model-len",
        "512",
        "--cpu-kv-cache-gib",
        "0.25",
        "--no-progress",
        "--no-track",
    ]
    res = subprocess.run([sys.executable, "-c", code, *cmd], check=True, capture_output=True, text=True, env=_env())
    return json.loads(res.stdout.strip().splitlines()[-1])["peak_rss_mib"]


def engine_peak(model: Path, bench: Path, args) -> float:
    res = subprocess.run(
        [sys.executable, "-c", ENGINE_CHILD, str(model), str(bench), str(args.prompts), str(args.max_new_tokens)],
        check=True,
        capture_output=True,
        text=True,
        env=_env(),
    )
    return json.loads(res.stdout.strip().splitlines()[-1])["peak_rss_mib"]


def largest_tensor_mib(folder: Path) -> float:
    from grrr_stream.checkpoints.reader import Checkpoint

    ck = Checkpoint.open(folder)
    return max(ck.tensors[n].nbytes for n in ck.tensors) / 2**20


def forecast_mib(folder: Path) -> dict:
    """The forecast's streamed variant and host RAM of this evaluation (engine on this CPU, 0.25 GiB KV cache)."""
    from grrr_stream.forecast import work
    from grrr_stream.forecast.shapes import from_checkpoint

    f = from_checkpoint(folder)
    stream = work.variant_stream_ram(f.shapes, f.largest)
    ram = work.evaluate_ram(f.params, 4, 2**28, stream, engine_on_host=True)
    return {"forecast_stream_mib": round(stream / 2**20), "forecast_ram_mib": round(ram / 2**20)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="smollm2-135m,qwen25-1.5b")
    ap.add_argument(
        "--layers-1.5b",
        dest="layers_15b",
        type=int,
        default=28,
        help="layers of the 1.5B-shaped model (fewer: same tensors, a smaller engine)",
    )
    ap.add_argument("--variants", default="base,full,offnull")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=8)
    ap.add_argument("--out", type=Path, default=Path("bench_out/evaluate_ram"))
    args = ap.parse_args()
    from grrr_stream.fixtures.tinychain_shipped import SHIPPED

    bench = SHIPPED / "benchmarks"
    for key in args.shapes.split(","):
        sizes = dict(SHAPES[key])
        if key == "qwen25-1.5b":
            sizes["num_hidden_layers"] = args.layers_15b
        root = args.out / key
        models = build(root, sizes)
        decompose(models, root / "store")
        engine = engine_peak(models["base"], bench, args)
        evaluate = evaluate_peak(root / "store", bench, root / "eval", args)
        big = largest_tensor_mib(models["base"])
        print(
            json.dumps(
                {
                    "shapes": key,
                    "layers": sizes["num_hidden_layers"],
                    "variants": args.variants,
                    "engine_peak_rss_mib": round(engine),
                    "evaluate_peak_rss_mib": round(evaluate),
                    "beside_engine_mib": round(evaluate - engine),
                    "largest_tensor_mib": round(big),
                    "beside_less_tensor_mib": round(evaluate - engine - big),
                    **forecast_mib(models["base"]),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    main()

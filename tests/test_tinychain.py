"""The tiny trained chain: post-training raises held-out accuracy; folders load and pair up.

One quick build (about 80 s, single-threaded) is shared by the module. Accuracies are
re-measured here with plain ``transformers`` greedy generation on the chat-templated
prompts, independently of the generator's own evaluation.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from safetensors import safe_open  # noqa: E402

from grrr_stream.fixtures import tinychain as tc  # noqa: E402
from grrr_stream.fixtures import tinychain_task as task  # noqa: E402

INSTRUCTION = "\nPlease reason step by step, and put your final answer within \\boxed{}."


@pytest.fixture(scope="module")
def chain(tiny_chain):
    return tiny_chain


def _last_boxed(text: str):
    # Independent of the generator's grader: last "\boxed{", then balanced braces.
    i = text.rfind("\\boxed{")
    if i < 0:
        return None
    depth, start = 0, i + len("\\boxed")
    for j in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[start + 1: j]
    return None


def _records(paths):
    lines = (paths["benchmark"] / "arith" / "test.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _hf_accuracy(folder: Path, records) -> float:
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    model.eval()
    tok.padding_side = "left"
    prompts = [tok.apply_chat_template([{"role": "user", "content": r["problem"] + INSTRUCTION}],
                                       tokenize=False, add_generation_prompt=True) for r in records]
    correct = 0
    for k in range(0, len(prompts), 64):
        enc = tok(prompts[k: k + 64], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, do_sample=False, max_new_tokens=64)
        texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        correct += sum(_last_boxed(t) == r["answer"] for t, r in zip(texts, records[k: k + 64]))
    return correct / len(records)


def test_post_training_raises_heldout_accuracy(chain):
    out, paths = chain
    records = _records(paths)
    t0 = time.time()
    acc = {m: _hf_accuracy(paths[m], records) for m in tc.MODELS}
    print(f"evaluated 4 models x {len(records)} problems in {time.time() - t0:.1f} s")
    recorded = json.loads((out / "chain.json").read_text())["accuracy"]
    print("greedy accuracy (transformers.generate):", {m: round(a, 3) for m, a in acc.items()})
    print("recorded in chain.json:              ", {m: round(a, 3) for m, a in recorded.items()})
    assert acc["sft"] >= acc["base"] + 0.10
    assert acc["rl"] >= acc["base"] + 0.10
    assert acc["rl"] >= acc["sft"] - 0.05
    assert acc["sibling"] >= acc["base"] + 0.10
    for m in tc.MODELS:  # the generator's own evaluation agrees with plain transformers
        assert abs(acc[m] - recorded[m]) <= 0.02, m


def test_folders_load_pair_up_and_share_tokenizer(chain):
    _, paths = chain
    shapes = {}
    for m in tc.MODELS:
        folder = paths[m]
        cfg = json.loads((folder / "config.json").read_text())
        assert cfg["model_type"] == "qwen2" and cfg["tie_word_embeddings"] is False
        assert cfg["torch_dtype"] == "float32" and cfg["max_position_embeddings"] >= 512
        tok = transformers.AutoTokenizer.from_pretrained(folder)
        assert cfg["eos_token_id"] == tok.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
        gen = json.loads((folder / "generation_config.json").read_text())
        assert gen["eos_token_id"] == tok.eos_token_id
        assert len(tok) <= cfg["vocab_size"] and cfg["vocab_size"] % 16 == 0
        with safe_open(str(folder / "model.safetensors"), "pt") as f:
            shapes[m] = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
            assert all(f.get_slice(k).get_dtype() == "F32" for k in f.keys())
        assert "lm_head.weight" in shapes[m]
    for m in tc.MODELS[1:]:
        assert shapes[m] == shapes["base"], m
        for name in ("tokenizer.json", "tokenizer_config.json"):
            assert (paths[m] / name).read_bytes() == (paths["base"] / name).read_bytes(), (m, name)

    tok = transformers.AutoTokenizer.from_pretrained(paths["rl"])
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is 1+2?" + INSTRUCTION}],
                                     tokenize=False, add_generation_prompt=True)
    assert prompt == ("<|im_start|>user\nWhat is 1+2?" + INSTRUCTION + "<|im_end|>\n<|im_start|>assistant\n")
    for text in [prompt, task.completion_text(178, 256), "a  b {x} \\boxed{12}\n\t~!", " lead and trail "]:
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.decode(ids) == text

    # Each transition really changed the weights (and sibling is not sft).
    def w(m):
        with safe_open(str(paths[m] / "model.safetensors"), "pt") as f:
            return f.get_tensor("model.layers.0.self_attn.q_proj.weight")
    assert not torch.equal(w("sft"), w("base"))
    assert not torch.equal(w("rl"), w("sft"))
    assert not torch.equal(w("sibling"), w("sft"))


def test_benchmark_is_heldout(chain):
    _, paths = chain
    records = _records(paths)
    assert len(records) == tc.QUICK.benchmark_size
    assert all(set(r) == {"problem", "answer"} and isinstance(r["answer"], str) for r in records)
    pairs = [task.parse_problem(r["problem"]) for r in records]
    assert len(set(pairs)) == len(pairs)
    assert all(str(a + b) == r["answer"] for (a, b), r in zip(pairs, records))
    assert all(task.is_heldout(a, b) and 100 <= min(a, b) and max(a, b) <= 999 for a, b in pairs)
    import random

    bench = set(pairs)
    rng = random.Random(123)
    assert not bench & set(task.hard_train_pairs(rng, 20_000))
    assert not bench & set(task.easy_pairs(rng, 5_000))


def test_second_build_reuses(chain):
    out, paths = chain
    files = sorted(p for p in out.rglob("*") if p.is_file())
    before = {p: p.stat().st_mtime_ns for p in files}
    t0 = time.time()
    again = tc.build_chain(out, seed=0, quick=True, progress=False)
    assert time.time() - t0 < 5
    assert again == paths
    assert {p: p.stat().st_mtime_ns for p in files} == before
    assert sorted(p for p in out.rglob("*") if p.is_file()) == files

"""A tiny *trained* base → SFT → RL chain (plus a sibling) on synthetic arithmetic.

The synthetic checkpoints in :mod:`grrr_stream.synthetic` have planted updates but no
behaviour; this module trains real (tiny) models on this CPU, so that a decomposition
or an ablation can be checked against an accuracy that post-training actually moved.

Task: integer addition with a short column-by-column "reasoning" and a boxed answer,
in the chat format of the project's evaluator::

    user:      What is 178+256?\\nPlease reason step by step, and put your final answer within \\boxed{}.
    assistant: 8+6=14 (4), 7+5+1=13 (34), 1+2+1=4 (434). The answer is \\boxed{434}.<|im_end|>

- base: a Qwen2-architecture model trained from scratch on the EASY split (operands
  0–99, at most two columns); it never sees a third column, so it fails on 3-digit sums.
- sft: base fine-tuned on the HARD split (3-digit operands), stopped once greedy accuracy
  on a validation set of HARD *training* problems reaches a target (0.6), so that RL has
  headroom whatever the seed.
- rl: on-policy REINFORCE from sft with a per-prompt group baseline (GRPO-style without
  clipping or KL): sample several completions per fresh HARD training prompt at
  temperature 1, reward 1 when the last ``\\boxed{}`` equals the true sum, one gradient
  step per batch of samples.
- sibling: base fine-tuned separately by the sft recipe with another seed and 25 % EASY
  replay mixed into the HARD data; not derived from sft.
- benchmark: ``benchmarks/arith/test.jsonl`` with HARD problems from a held-out pool
  that no training split can draw from (:func:`is_heldout`).

All training losses cover the assistant completion only (the operands in a prompt are
random, there is nothing to learn from predicting them).

The tokenizer is Qwen2's byte-level BPE with no merges, i.e. one token per ASCII
character, plus <|endoftext|>, <|im_start|>, <|im_end|> and a few non-special added
tokens for text every example repeats verbatim (the instruction sentence, role names,
"What is ", "The answer is \\boxed{"), which makes sequences about three times shorter.
Decoding reproduces any NFC text exactly. Everything is written as ordinary Hugging Face
folders (float32 safetensors) that ``transformers`` (4.x and 5.x) and vLLM load
unchanged. Nothing is downloaded; the same machine and seed give bit-identical weights.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import re
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

# Recorded in chain.json; bump it when a change to the task, tokenizer or training code
# should invalidate chains built before (changes to FULL/QUICK are detected by value).
CHAIN_VERSION = 1
MODELS = ("base", "sft", "rl", "sibling")

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
INSTRUCTION = "\nPlease reason step by step, and put your final answer within \\boxed{}."
ANSWER_LEAD = "The answer is \\boxed{"
# Non-special multi-character tokens for text that every example repeats verbatim.
PHRASES = (INSTRUCTION, "user", "assistant", ANSWER_LEAD, "What is ")
# Qwen2's pre-tokenizer split (as in transformers' Qwen2Tokenizer).
QWEN_SPLIT_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Operand ranges of the two splits (inclusive).
EASY_RANGE = (0, 99)
HARD_RANGE = (100, 999)
HELDOUT_MODULUS = 16  # one HARD pair in 16 belongs to the held-out (benchmark) pool


# --------------------------------------------------------------------------- task


def problem_text(a: int, b: int) -> str:
    """The question, as stored in the benchmark's ``problem`` field."""
    return f"What is {a}+{b}?"


def user_message(problem: str) -> str:
    """The user turn exactly as the project's evaluator writes it."""
    return problem + INSTRUCTION


def completion_text(a: int, b: int) -> str:
    """Column-by-column addition (least significant first), then the boxed sum (no eos).

    Each column also writes the digits of the sum found so far, in parentheses, so that
    every token can be copied from close by: without them the model has to fetch the
    units digit from the first column when it writes the last digit of the answer, a
    long-range copy that a tiny model learns slowly and, depending on the seed, not at all.
    """
    da, db = str(a)[::-1], str(b)[::-1]
    steps, carry, partial = [], 0, ""
    n = max(len(da), len(db))
    for i in range(n):
        x = int(da[i]) if i < len(da) else 0
        y = int(db[i]) if i < len(db) else 0
        s = x + y + carry
        partial = (str(s) if i == n - 1 else str(s % 10)) + partial
        steps.append(f"{x}+{y}+1={s} ({partial})" if carry else f"{x}+{y}={s} ({partial})")
        carry = s // 10
    return f"{', '.join(steps)}. {ANSWER_LEAD}{a + b}}}."


def last_boxed(text: str) -> Optional[str]:
    """Content of the last ``\\boxed{...}`` in ``text`` (braces balanced), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def is_correct(generation: str, answer: str) -> bool:
    """Grade: the last boxed content equals the gold answer string (after stripping spaces)."""
    got = last_boxed(generation)
    return got is not None and got.strip() == str(answer).strip()


def is_heldout(a: int, b: int) -> bool:
    """True when the HARD pair (a, b) belongs to the held-out pool (never trained on).

    A fixed integer hash, independent of the seed, so every split of every seed
    agrees on the pool.
    """
    h = ((a * 1000 + b) * 2654435761) & 0xFFFFFFFF
    return (h >> 7) % HELDOUT_MODULUS == 0


def easy_pairs(rng: random.Random, n: int) -> list[tuple[int, int]]:
    """``n`` EASY pairs (operands 0–99) drawn with ``rng``."""
    lo, hi = EASY_RANGE
    return [(rng.randint(lo, hi), rng.randint(lo, hi)) for _ in range(n)]


def hard_train_pairs(rng: random.Random, n: int) -> list[tuple[int, int]]:
    """``n`` HARD pairs (3-digit operands) outside the held-out pool, drawn with ``rng``."""
    lo, hi = HARD_RANGE
    out: list[tuple[int, int]] = []
    while len(out) < n:
        a, b = rng.randint(lo, hi), rng.randint(lo, hi)
        if not is_heldout(a, b):
            out.append((a, b))
    return out


def benchmark_pairs(seed: int, n: int) -> list[tuple[int, int]]:
    """``n`` distinct HARD pairs from the held-out pool (the benchmark's problems)."""
    rng = random.Random(f"tinychain-benchmark-{seed}")
    lo, hi = HARD_RANGE
    seen: set[tuple[int, int]] = set()
    out: list[tuple[int, int]] = []
    while len(out) < n:
        p = (rng.randint(lo, hi), rng.randint(lo, hi))
        if is_heldout(*p) and p not in seen:
            seen.add(p)
            out.append(p)
    return out


def parse_problem(problem: str) -> tuple[int, int]:
    """Inverse of :func:`problem_text`."""
    m = re.fullmatch(r"What is (\d+)\+(\d+)\?", problem)
    if not m:
        raise ValueError(f"not a tinychain problem: {problem!r}")
    return int(m.group(1)), int(m.group(2))


# ---------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Stage:
    """One optimisation stage: AdamW steps, peak learning rate, sequences per step, warmup steps."""

    steps: int
    lr: float
    batch: int = 32
    warmup: int = 20


@dataclass(frozen=True)
class ChainSettings:
    """Model shape and every training setting of a chain (recorded in chain.json)."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    base: Stage          # steps = at most; stops at ``base_target`` (EASY validation)
    sft: Stage           # steps = at most; stops at ``post_target``
    sibling: Stage       # idem
    rl: Stage            # policy-gradient steps (batch unused)
    rl_prompts: int      # fresh prompts per step
    rl_samples: int      # sampled completions per prompt (the group of the baseline)
    rl_temperature: float
    sibling_easy_share: float
    base_target: Optional[float]  # EASY validation accuracy at which base stops (None: never)
    post_target: float   # HARD validation accuracy at which sft and sibling stop
    valid_size: int      # HARD training-split problems for that check (never the benchmark)
    benchmark_size: int


# The step-to-step jump from "two columns" to "three columns" is abrupt and its timing
# depends on the seed, so sft (and the sibling, same rule) stop as soon as greedy
# accuracy on a validation set of HARD *training* problems reaches ``post_target``.
# That leaves RL reliable headroom: a fully trained sft is perfect on this task and
# gives the RL step no reward signal at all.
FULL = ChainSettings(
    hidden=128, intermediate=384, layers=2, heads=4, kv_heads=2,
    base=Stage(steps=1000, lr=3e-3, warmup=40),
    sft=Stage(steps=600, lr=2e-3),
    sibling=Stage(steps=800, lr=2e-3),
    rl=Stage(steps=50, lr=2e-4, warmup=5),
    rl_prompts=64, rl_samples=8, rl_temperature=1.0,
    sibling_easy_share=0.25, base_target=None, post_target=0.6, valid_size=128, benchmark_size=200,
)
QUICK = ChainSettings(
    hidden=128, intermediate=384, layers=2, heads=4, kv_heads=2,
    base=Stage(steps=450, lr=3e-3, warmup=30),
    sft=Stage(steps=400, lr=2e-3),
    sibling=Stage(steps=500, lr=2e-3),
    rl=Stage(steps=15, lr=2e-4, warmup=3),
    rl_prompts=32, rl_samples=8, rl_temperature=1.0,
    sibling_easy_share=0.25, base_target=0.99, post_target=0.6, valid_size=128, benchmark_size=120,
)


# --------------------------------------------------------------------- tokenizer


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2/Qwen byte → printable character table of byte-level BPE."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for byte in range(256):
        if byte in keep:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def build_tokenizer():
    """Byte-level tokenizer without merges (one token per ASCII character), Qwen2 style.

    Its pieces are exactly those that ``transformers``' ``Qwen2Tokenizer`` rebuilds from
    ``tokenizer.json`` (BPE over the 256 byte symbols, NFC, Qwen's split regex + ByteLevel,
    ByteLevel decoder): transformers 5 ignores a custom pre-tokenizer for ``qwen2`` models,
    so anything else would tokenize differently once reloaded. Ids 0–255 are the bytes,
    then <|endoftext|>, <|im_start|>, <|im_end|>, then the non-special phrase tokens.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: byte for byte, ch in _bytes_to_unicode().items()}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[], dropout=None, unk_token=None,
                              continuing_subword_prefix="", end_of_word_suffix="",
                              fuse_unk=False, byte_fallback=False))
    tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in (ENDOFTEXT, IM_START, IM_END)])
    tk.add_tokens([AddedToken(t, special=False, normalized=False) for t in PHRASES])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token=ENDOFTEXT, eos_token=IM_END, pad_token=ENDOFTEXT,
        unk_token=ENDOFTEXT, clean_up_tokenization_spaces=False, model_max_length=512,
        padding_side="left", add_bos_token=False, add_eos_token=False,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def prompt_ids(tok, problem: str) -> list[int]:
    """Token ids of the chat-templated prompt for ``problem`` (generation prompt added)."""
    text = tok.apply_chat_template([{"role": "user", "content": user_message(problem)}],
                                   tokenize=False, add_generation_prompt=True)
    return tok.encode(text, add_special_tokens=False)


# ------------------------------------------------------------------------ model


def _new_model(s: ChainSettings, tok, seed: int):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    vocab = int(math.ceil(len(tok) / 16) * 16)
    cfg = Qwen2Config(
        vocab_size=vocab, hidden_size=s.hidden, intermediate_size=s.intermediate,
        num_hidden_layers=s.layers, num_attention_heads=s.heads, num_key_value_heads=s.kv_heads,
        max_position_embeddings=512, rope_theta=10000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=False, use_sliding_window=False, attention_dropout=0.0,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        initializer_range=0.02,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg).to(torch.float32)
    return model


def _patch_json(path: Path, **values) -> None:
    data = json.loads(path.read_text())
    data.update(values)
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def _save(model, tok, folder: Path) -> None:
    """Write ``folder`` atomically (temp folder, then rename)."""
    from transformers import GenerationConfig

    tmp = folder.with_name(folder.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    model.config.use_cache = True
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                     pad_token_id=tok.pad_token_id, do_sample=False).save_pretrained(tmp)
    # Readers on transformers 4.x (and vLLM built against it) look for ``torch_dtype``,
    # a chat template inside tokenizer_config.json and a class name they know
    # (4.x has no ``TokenizersBackend``); transformers 5 reads the same files unchanged.
    _patch_json(tmp / "config.json", torch_dtype="float32", dtype="float32")
    _patch_json(tmp / "tokenizer_config.json", tokenizer_class="Qwen2Tokenizer", chat_template=CHAT_TEMPLATE)
    if folder.exists():
        shutil.rmtree(folder)
    os.replace(tmp, folder)


def _check_reload(tok, folder: Path) -> None:
    """Fail early if ``AutoTokenizer`` would tokenize differently from the training tokenizer."""
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(folder)
    text = loaded.apply_chat_template([{"role": "user", "content": user_message(problem_text(178, 25))}],
                                      tokenize=False, add_generation_prompt=True) + completion_text(178, 25)
    if loaded.encode(text) != tok.encode(text, add_special_tokens=False) or loaded.decode(loaded.encode(text)) != text:
        raise RuntimeError(f"the tokenizer saved in {folder} reloads as {type(loaded).__name__} and tokenizes "
                           "differently from the one used for training; check the transformers version")


# --------------------------------------------------------------------- training


def _example(tok, pair: tuple[int, int]) -> tuple[list[int], list[int]]:
    """(prompt ids, completion ids ending with <|im_end|>) for one pair."""
    a, b = pair
    problem = problem_text(a, b)
    p = prompt_ids(tok, problem)
    c = tok.encode(completion_text(a, b), add_special_tokens=False) + [tok.eos_token_id]
    return p, c


def _batch_tensors(examples: Sequence[tuple[list[int], list[int]]], pad_id: int):
    """Right-padded input ids and labels (-100 outside the completions).

    No attention mask is needed: padding sits after every real token, so causal
    attention never lets a real position see it, and its labels are ignored.
    """
    import torch

    width = max(len(p) + len(c) for p, c in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    for i, (p, c) in enumerate(examples):
        seq = p + c
        ids[i, : len(seq)] = torch.tensor(seq)
        labels[i, len(p): len(seq)] = torch.tensor(c)
    return ids, labels


def _train(model, tok, stage: Stage, draw: Callable[[random.Random, int], list], *, seed: int,
           label: str, progress: bool, stop_at: Optional[tuple[Sequence[dict], float]] = None,
           check_every: int = 10) -> dict:
    """AdamW with linear warmup and cosine decay over ``stage.steps``.

    ``draw(rng, n)`` gives n (prompt ids, completion ids) pairs. With ``stop_at =
    (records, target)``, greedy accuracy on ``records`` is measured every ``check_every``
    steps and training stops once it reaches ``target``. Returns {"steps", "loss" (mean
    of the last 20 steps), "valid_acc" (last measured, or None)}.
    """
    import torch

    torch.manual_seed(seed)
    rng = random.Random(f"{label}-{seed}")
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=stage.lr, betas=(0.9, 0.98), weight_decay=0.01)

    def lr_at(step: int) -> float:
        if step < stage.warmup:
            return (step + 1) / stage.warmup
        t = (step - stage.warmup) / max(1, stage.steps - stage.warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    recent: list[float] = []
    valid_acc: Optional[float] = None
    t0 = time.time()
    step = 0
    while step < stage.steps:
        ids, labels = _batch_tensors(draw(rng, stage.batch), tok.pad_token_id)
        out = model(input_ids=ids, labels=labels, use_cache=False)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        step += 1
        recent = (recent + [float(out.loss.detach())])[-20:]
        checked = stop_at is not None and step % check_every == 0
        if checked:
            valid_acc = accuracy(model, tok, stop_at[0])
            model.train()
        if progress and (step % 100 == 0 or step == 1 or step == stage.steps or checked):
            extra = f", validation accuracy {valid_acc:.3f}" if checked else ""
            print(f"  [{label}] step {step}/{stage.steps} loss {recent[-1]:.4f}{extra} "
                  f"({time.time() - t0:.0f}s)", file=sys.stderr, flush=True)
        if checked and valid_acc >= stop_at[1]:
            break
    model.eval()
    return {"steps": step, "loss": round(sum(recent) / len(recent), 5), "valid_acc": valid_acc}


def generate_ids(model, tok, prompts: Sequence[list[int]], *, temperature: float = 0.0,
                 max_new_tokens: int = 64, batch: int = 256) -> list[list[int]]:
    """Completion token ids for tokenized prompts, cut after the first <|im_end|> (kept).

    Greedy when ``temperature`` is 0, else plain sampling (no top-k/top-p) from torch's
    global RNG: seed it for reproducible samples. Prompts are grouped by token length,
    so no padding (and no position shift) is involved.
    """
    import torch

    by_len: dict[int, list[int]] = {}
    for i, ids in enumerate(prompts):
        by_len.setdefault(len(ids), []).append(i)
    out: list[list[int]] = [[] for _ in prompts]
    kwargs = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 \
        else dict(do_sample=False)
    model.eval()
    eos = tok.eos_token_id
    for length in sorted(by_len):
        idx = by_len[length]
        for k in range(0, len(idx), batch):
            chunk = idx[k: k + batch]
            ids = torch.tensor([list(prompts[i]) for i in chunk])
            with torch.no_grad():
                gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                     max_new_tokens=max_new_tokens, eos_token_id=eos,
                                     pad_token_id=tok.pad_token_id, **kwargs)
            for i, row in zip(chunk, gen[:, length:].tolist()):
                out[i] = row[: row.index(eos) + 1] if eos in row else row
    return out


def generate(model, tok, problems: Sequence[str], *, temperature: float = 0.0, max_new_tokens: int = 64,
             batch: int = 256) -> list[str]:
    """Decoded completions (special tokens dropped) for benchmark ``problems``; see :func:`generate_ids`."""
    rows = generate_ids(model, tok, [prompt_ids(tok, p) for p in problems], temperature=temperature,
                        max_new_tokens=max_new_tokens, batch=batch)
    return [tok.decode(r, skip_special_tokens=True) for r in rows]


def accuracy(model, tok, records: Sequence[dict]) -> float:
    """Greedy accuracy (fraction) on benchmark records with ``problem``/``answer``."""
    gens = generate(model, tok, [r["problem"] for r in records])
    return sum(is_correct(g, r["answer"]) for g, r in zip(gens, records)) / len(records)


def _reinforce(model, tok, s: ChainSettings, *, seed: int, progress: bool) -> dict:
    """On-policy REINFORCE with a per-prompt group baseline (GRPO-style, no clipping/KL).

    Each step samples ``rl_samples`` completions for each of ``rl_prompts`` fresh HARD
    training prompts, rewards 1 when the last boxed answer is the true sum, and takes
    one gradient step on -Σ A·log π(completion) with A = r − mean(r of the prompt's group).
    """
    import torch

    rng = random.Random(f"reinforce-{seed}")
    opt = torch.optim.AdamW(model.parameters(), lr=s.rl.lr, betas=(0.9, 0.98), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: min(1.0, (k + 1) / max(1, s.rl.warmup)))
    rewards_log: list[float] = []
    updates = 0
    G = s.rl_samples
    for step in range(s.rl.steps):
        pairs = hard_train_pairs(rng, s.rl_prompts)
        prompts = [prompt_ids(tok, problem_text(a, b)) for a, b in pairs for _ in range(G)]
        torch.manual_seed(seed * 100_003 + step)
        comps = generate_ids(model, tok, prompts, temperature=s.rl_temperature)
        r = torch.tensor([float(is_correct(tok.decode(comps[i * G + j], skip_special_tokens=True), str(a + b)))
                          for i, (a, b) in enumerate(pairs) for j in range(G)])
        adv = (r.view(-1, G) - r.view(-1, G).mean(dim=1, keepdim=True)).view(-1)
        rewards_log.append(float(r.mean()))
        keep = [i for i in range(len(prompts)) if adv[i] != 0 and comps[i]]
        if progress and (step % 5 == 0 or step == s.rl.steps - 1):
            print(f"  [rl] step {step + 1}/{s.rl.steps}: mean reward {float(r.mean()):.3f}, "
                  f"{len(keep)} samples with nonzero advantage", file=sys.stderr, flush=True)
        if not keep:
            continue
        model.train()
        ids, labels = _batch_tensors([(prompts[i], comps[i]) for i in keep], tok.pad_token_id)
        logits = model(input_ids=ids, use_cache=False).logits[:, :-1].float()
        tgt = labels[:, 1:]
        mask = tgt != -100
        logp = torch.log_softmax(logits, dim=-1).gather(-1, tgt.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        seq_logp = (logp * mask).sum(dim=1)
        # Normalise by the whole group count (not only the kept rows) so that the step size
        # shrinks as fewer prompts carry signal.
        loss = -(adv[keep] * seq_logp).sum() / len(prompts)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        model.eval()
        updates += 1
    return {"method": "reinforce", "mean_reward": [round(x, 4) for x in rewards_log], "updates": updates}


# ------------------------------------------------------------------------ chain


def _records(seed: int, n: int) -> list[dict]:
    return [{"problem": problem_text(a, b), "answer": str(a + b)} for a, b in benchmark_pairs(seed, n)]


def _chain_ok(out_dir: Path, seed: int, quick: bool) -> bool:
    meta_path = out_dir / "chain.json"
    if not meta_path.is_file():
        return False
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return False
    settings = asdict(QUICK if quick else FULL)
    if (meta.get("version"), meta.get("seed"), meta.get("quick"), meta.get("settings")) != \
            (CHAIN_VERSION, seed, quick, settings):
        return False
    if not all((out_dir / m / "model.safetensors").is_file() and (out_dir / m / "tokenizer.json").is_file()
               for m in MODELS):
        return False
    return (out_dir / "benchmarks" / "arith" / "test.jsonl").is_file()


def _paths(out_dir: Path) -> dict[str, Path]:
    paths = {m: out_dir / m for m in MODELS}
    paths["benchmark"] = out_dir / "benchmarks"
    return paths


def build_chain(out_dir: Path, *, seed: int = 0, quick: bool = False, progress: bool = True) -> dict[str, Path]:
    """Train (or reuse) the tiny base → sft → rl chain and its sibling under ``out_dir``.

    Returns {"base", "sft", "rl", "sibling": model folders, "benchmark": the folder that
    holds ``arith/test.jsonl``}. ``out_dir/chain.json`` (written last, atomically) records
    the settings, greedy accuracies on the benchmark and training seconds; when it
    matches ``seed``/``quick`` and every folder exists, nothing is retrained.
    Runs on one CPU thread: about 3 minutes (``quick``: about 80 s).
    """
    from transformers.utils import logging as hf_logging

    out_dir = Path(out_dir)
    paths = _paths(out_dir)
    if _chain_ok(out_dir, seed, quick):
        return paths
    import torch

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # per-file "Loading weights" bars drown the training log
    threads = torch.get_num_threads()
    # One thread: these matrices are too small for a second one to pay much, and on a
    # shared machine OpenMP's spin-waiting makes two threads on one free core ~30x slower.
    # (The weights come out bit-identical either way.)
    torch.set_num_threads(1)
    try:
        _build(out_dir, paths, QUICK if quick else FULL, seed=seed, quick=quick, progress=progress)
    finally:
        torch.set_num_threads(threads)
        if bars:
            hf_logging.enable_progress_bar()
    return paths


def _build(out_dir: Path, paths: dict[str, Path], s: ChainSettings, *, seed: int, quick: bool,
           progress: bool) -> None:
    import torch

    out_dir.mkdir(parents=True, exist_ok=True)
    # A stale record must not vouch for folders that this run is about to replace.
    (out_dir / "chain.json").unlink(missing_ok=True)
    tok = build_tokenizer()

    def say(msg: str) -> None:
        if progress:
            print(f"[tinychain] {msg}", file=sys.stderr, flush=True)

    records = _records(seed, s.benchmark_size)
    bench = paths["benchmark"] / "arith"
    bench.mkdir(parents=True, exist_ok=True)
    tmp = bench / "test.jsonl.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
    os.replace(tmp, bench / "test.jsonl")

    def easy(rng, n):
        return [_example(tok, p) for p in easy_pairs(rng, n)]

    def hard(rng, n):
        return [_example(tok, p) for p in hard_train_pairs(rng, n)]

    def mixed(rng, n):
        n_easy = sum(rng.random() < s.sibling_easy_share for _ in range(n))
        return easy(rng, n_easy) + hard(rng, n - n_easy)

    valid = [{"problem": problem_text(a, b), "answer": str(a + b)}
             for a, b in hard_train_pairs(random.Random(f"tinychain-valid-{seed}"), s.valid_size)]
    stop_at = (valid, s.post_target)
    valid_easy = [{"problem": problem_text(a, b), "answer": str(a + b)}
                  for a, b in easy_pairs(random.Random(f"tinychain-valid-easy-{seed}"), s.valid_size)]
    times: dict[str, float] = {}
    train: dict[str, dict] = {}
    acc: dict[str, float] = {}
    t_all = time.time()
    # Every random draw below comes from seeded generators or from torch's global RNG
    # re-seeded here; fork_rng keeps the caller's torch RNG state untouched.
    with torch.random.fork_rng(devices=[]):
        t0 = time.time()
        say(f"base: {s.base.steps} steps from scratch on EASY sums (seed {seed})")
        model = _new_model(s, tok, seed)
        train["base"] = _train(model, tok, s.base, easy, seed=seed, label="base", progress=progress,
                               stop_at=None if s.base_target is None else (valid_easy, s.base_target),
                               check_every=50)
        times["base"] = time.time() - t0
        _save(model, tok, paths["base"])
        _check_reload(tok, paths["base"])
        sibling = copy.deepcopy(model)

        t0 = time.time()
        say(f"sft: on HARD sums until validation accuracy {s.post_target} (at most {s.sft.steps} steps)")
        train["sft"] = _train(model, tok, s.sft, hard, seed=seed + 1, label="sft", progress=progress,
                              stop_at=stop_at)
        times["sft"] = time.time() - t0
        _save(model, tok, paths["sft"])

        t0 = time.time()
        say(f"rl: {s.rl.steps} REINFORCE steps from sft ({s.rl_prompts} prompts x {s.rl_samples} samples each)")
        train["rl"] = _reinforce(model, tok, s, seed=seed + 2, progress=progress)
        times["rl"] = time.time() - t0
        if train["rl"]["updates"] == 0:
            say("WARNING: no RL step had a reward signal (sft is perfect or hopeless); rl == sft")
        _save(model, tok, paths["rl"])

        t0 = time.time()
        say(f"sibling: from base on HARD sums + {s.sibling_easy_share:.0%} EASY replay, other seed, "
            f"same stopping rule (at most {s.sibling.steps} steps)")
        train["sibling"] = _train(sibling, tok, s.sibling, mixed, seed=seed + 1_000_003, label="sibling",
                                  progress=progress, stop_at=stop_at)
        times["sibling"] = time.time() - t0
        _save(sibling, tok, paths["sibling"])
        del model, sibling

    t0 = time.time()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for m in MODELS:  # evaluate what was written, exactly as a reader loads it
        acc[m] = accuracy(AutoModelForCausalLM.from_pretrained(paths[m], dtype=torch.float32),
                          AutoTokenizer.from_pretrained(paths[m]), records)
    times["eval"] = time.time() - t0
    times["total"] = time.time() - t_all
    say("greedy accuracy on benchmarks/arith: " + ", ".join(f"{m} {acc[m]:.3f}" for m in MODELS))

    meta = {
        "version": CHAIN_VERSION, "seed": seed, "quick": quick,
        "settings": asdict(s), "accuracy": acc, "training": train,
        "seconds": {k: round(v, 1) for k, v in times.items()},
        "benchmark": {"path": "benchmarks/arith/test.jsonl", "n": len(records)},
        "torch_threads": torch.get_num_threads(),
    }
    tmp = out_dir / "chain.json.tmp"
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp, out_dir / "chain.json")

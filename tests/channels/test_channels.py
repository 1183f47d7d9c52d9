"""Outlier residual channels (issue 24 §2, §4 ablation) on a planted pair built by transformers' own classes.

The planted base model: a LlamaForCausalLM (hidden 64, 3 layers, byte vocabulary) whose embedding
carries a constant massive value M in channels PLANTED for every token, whose input-norm gains are
raised on those channels, whose final norm ignores them (gain 0) and whose LM head is large. The
massive channels then set the scale of every RMSNorm, as massive activations do in real LLMs:
intact, the normalised other channels are tiny and the logits near uniform; with the massive
channels zeroed, the normalisation scale collapses, the logits blow up and perplexity explodes,
while zeroing as many other channels barely changes it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from grrr_stream.channels.ablation import ablate, random_sets  # noqa: E402
from grrr_stream.channels.activations import calibration_pass, load_model  # noqa: E402
from grrr_stream.channels.calibration import TEXT_SHA256, calibration_ids, text_path  # noqa: E402
from grrr_stream.channels.proxy import proxy_inputs  # noqa: E402
from grrr_stream.channels.rule import OutlierRule, jaccard, outlier_channels, proxy_channels, robust_z  # noqa: E402

PLANTED = [5, 17, 40]
HIDDEN, LAYERS, VOCAB = 64, 3, 256
SEQS, SEQ_LEN = 4, 32


def _planted_model(seed: int = 0, massive: float = 30.0):
    torch.manual_seed(seed)
    cfg = tf.LlamaConfig(
        hidden_size=HIDDEN,
        intermediate_size=128,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    model = tf.LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.model.embed_tokens.weight[:, PLANTED] = massive
        for layer in model.model.layers:
            layer.input_layernorm.weight[PLANTED] = 2.0
        model.model.norm.weight[PLANTED] = 0.0
        model.lm_head.weight.normal_(0.0, 1.0)
    return model


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted")
    base = _planted_model()
    base.save_pretrained(root / "base")
    post = _planted_model()
    with torch.no_grad():  # a post model: every weight moved by a small relative step
        g = torch.Generator().manual_seed(1)
        for p in post.parameters():
            p.add_(1e-2 * p.abs().mean() * torch.randn(p.shape, generator=g))
    post.save_pretrained(root / "post")
    base.save_pretrained(root / "base_sharded", max_shard_size="40KB")  # many shards, same weights
    base_bf16 = _planted_model().to(torch.bfloat16)  # stored in bf16, computed in float32
    base_bf16.save_pretrained(root / "base_bf16", max_shard_size="40KB")
    return root, base


def test_calibration_text_checksum_and_sequences(planted):
    import hashlib

    assert hashlib.sha256(text_path().read_bytes()).hexdigest() == TEXT_SHA256
    root, _ = planted
    cal = calibration_ids(root / "base", vocab_size=VOCAB, sequences=SEQS, seq_len=SEQ_LEN)
    raw = text_path().read_bytes()
    assert cal.ids.shape == (SEQS, SEQ_LEN)
    # the byte fallback: consecutive windows of the text's UTF-8 bytes
    assert bytes(cal.ids[1].tolist()) == raw[SEQ_LEN : 2 * SEQ_LEN]


def test_rms_matches_output_hidden_states_in_float64(planted):
    """Independent path: the model's own output_hidden_states (inputs of layers 0..L-1) in float64."""
    root, base = planted
    cal = calibration_ids(root / "base", vocab_size=VOCAB, sequences=SEQS, seq_len=SEQ_LEN)
    with load_model(root / "base", max_memory=None) as loaded:
        res = calibration_pass(loaded, cal.ids, batch_size=3)
    with torch.no_grad():
        out = base.double()(input_ids=cal.ids, output_hidden_states=True)
    ref = torch.stack(out.hidden_states[:LAYERS]).pow(2).mean(dim=(1, 2)).sqrt().numpy()
    np.testing.assert_allclose(res.rms, ref, rtol=1e-5)
    logp = torch.log_softmax(out.logits[:, :-1], -1).gather(-1, cal.ids[:, 1:, None])
    assert res.perplexity == pytest.approx(float(torch.exp(-logp.mean())), rel=1e-5)


def _offload_sources(model) -> set[str]:
    """The checkpoint files accelerate's hooks read offloaded weights from (its offload index)."""
    files = set()
    for module in model.modules():
        wm = getattr(getattr(module, "_hf_hook", None), "weights_map", None)
        index = getattr(getattr(wm, "dataset", None), "index", None) or {}
        files |= {info["safetensors_file"] for info in index.values() if "safetensors_file" in info}
    return files


@pytest.mark.parametrize("folder", ["base", "base_sharded", "base_bf16"])
def test_offloaded_pass_equals_in_memory(planted, folder):
    """Offloaded layer by layer, straight from the checkpoint's safetensors file(s): the same RMS and
    perplexity as the same checkpoint in memory (float32 compute, also from a bf16 checkpoint), and
    no weight is copied to the offload folder."""
    root, _ = planted
    shards = sorted((root / folder).glob("*.safetensors"))
    assert (len(shards) > 2) == (folder != "base")
    cal = calibration_ids(root / folder, vocab_size=VOCAB, sequences=SEQS, seq_len=SEQ_LEN)
    with load_model(root / folder, max_memory=None) as loaded:
        assert not loaded.offloaded
        mem = calibration_pass(loaded, cal.ids)
    # the first decoder layer (148 kB in float32) fits, the others go to disk; the embedding and LM head
    # are read from the checkpoint by slices whatever the budget
    with load_model(root / folder, max_memory=200_000) as loaded:
        assert loaded.offloaded
        dm = loaded.model.hf_device_map
        assert dm["model.layers.0"] == "cpu" and dm["model.layers.1"] == "disk"
        assert dm["model.embed_tokens"] == dm["lm_head"] == "disk"
        assert loaded.sliced == ("model.embed_tokens", "lm_head")
        assert loaded.offload_copied_bytes == 0
        sources = _offload_sources(loaded.model)
        assert sources and sources <= {str(f) for f in shards}
        if folder != "base":
            assert len(sources) > 1  # the offloaded layers live in several shards, each read in place
        io = {id(loaded.model.get_input_embeddings().weight), id(loaded.model.get_output_embeddings().weight)}
        kept = {id(p) for m in loaded.layers.modules() if type(m) is torch.nn.Linear for p in m.parameters()}
        # a bf16 checkpoint keeps its decoder linears in bf16 (test below), the rest (norms) is cast; the
        # embedding and LM head are never loaded (meta), their rows read from the checkpoint on use
        assert all(p.device.type == "meta" for p in loaded.model.parameters() if id(p) in io)
        assert all(
            p.dtype == (torch.bfloat16 if folder == "base_bf16" and id(p) in kept else torch.float32)
            for p in loaded.model.parameters()
            if id(p) not in io
        )
        off = calibration_pass(loaded, cal.ids)
    np.testing.assert_allclose(off.rms, mem.rms, rtol=1e-6)
    assert off.perplexity == pytest.approx(mem.perplexity, rel=1e-6)


def _tied_bf16(folder):
    torch.manual_seed(2)
    cfg = tf.LlamaConfig(
        hidden_size=HIDDEN,
        intermediate_size=128,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        attention_bias=True,
        mlp_bias=True,
    )
    model = tf.LlamaForCausalLM(cfg)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # transformers initialises biases to 0: non-zero ones are what is tested
        for m in model.modules():
            if isinstance(m, torch.nn.Linear) and m.bias is not None:
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
    model = model.to(torch.bfloat16)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    model.save_pretrained(folder, max_shard_size="40KB")
    return model


def _record_reads(monkeypatch):
    """Every row block the sliced embedding / LM head read: ("gather", distinct ids) for a lookup,
    ("rows", start, stop) for a head slice."""
    from grrr_stream.channels import sliced

    reads, rows, gather = [], sliced.RowSource.rows, sliced.RowSource.gather

    def rec_rows(self, start, stop):
        if not getattr(self, "_in_gather", False):
            reads.append(("rows", start, stop))
        return rows(self, start, stop)

    def rec_gather(self, ids):
        reads.append(("gather", ids.tolist()))
        self._in_gather = True
        try:
            return gather(self, ids)
        finally:
            self._in_gather = False

    monkeypatch.setattr(sliced.RowSource, "rows", rec_rows)
    monkeypatch.setattr(sliced.RowSource, "gather", rec_gather)
    return reads


@pytest.mark.parametrize("tied", [False, True])
def test_offloaded_bf16_reads_embedding_and_head_by_slices_and_keeps_linears_in_bf16(
    planted, tmp_path, monkeypatch, tied
):
    """Offloaded, a bf16 checkpoint computed in float32: the embedding and the LM head (one tensor
    when tied) are never loaded: the lookup reads only the rows of the batch's distinct tokens and
    the head reads 10 rows at a time here (many slices and a partial last one), straight from the
    checkpoint; the decoder linears (q/k/v/o, gate/up/down; with non-zero biases in the tied model)
    stay bf16, upcast 10 rows at a time, loaded and dropped by accelerate's hooks. The same RMS and
    perplexity as the whole model upcast to float32 in memory (one matrix product per module), and
    as an independent float64 forward of the bf16 weights."""
    from grrr_stream.channels import logprobs, sliced, upcast

    root, _ = planted
    if tied:
        folder, ref_model = tmp_path / "tied", _tied_bf16(tmp_path / "tied")
    else:
        folder, ref_model = root / "base_bf16", _planted_model().to(torch.bfloat16)
    monkeypatch.setattr(upcast, "HEAD_CHUNK_BYTES", 10 * HIDDEN * 4)
    monkeypatch.setattr(sliced, "SLICE_BYTES", 10 * HIDDEN * 4)
    monkeypatch.setattr(logprobs, "SLICE_BYTES", 10 * HIDDEN * 4)  # the head's rows for the log-probabilities
    cal = calibration_ids(folder, vocab_size=VOCAB, sequences=SEQS, seq_len=SEQ_LEN)
    with load_model(folder, max_memory=None) as loaded:  # in memory: float32 everywhere, nothing sliced
        assert not loaded.offloaded and not loaded.sliced
        assert all(p.dtype == torch.float32 for p in loaded.model.parameters())
        mem = calibration_pass(loaded, cal.ids)
    with torch.no_grad():
        out = ref_model.double()(input_ids=cal.ids, output_hidden_states=True)
    ref_rms = torch.stack(out.hidden_states[:LAYERS]).pow(2).mean(dim=(1, 2)).sqrt().numpy()
    ref_ppl = float(torch.exp(-torch.log_softmax(out.logits[:, :-1], -1).gather(-1, cal.ids[:, 1:, None]).mean()))
    reads = _record_reads(monkeypatch)
    for budget in (200_000, 0):  # first decoder layer resident / everything on disk
        reads.clear()
        with load_model(folder, max_memory=budget) as loaded:
            assert loaded.offloaded and loaded.sliced == ("model.embed_tokens", "lm_head")
            assert loaded.head is not None and loaded.head.softcap is None  # log-probs by slices, no full logits
            emb, head = loaded.model.get_input_embeddings(), loaded.model.get_output_embeddings()
            assert (emb.weight is head.weight) == tied
            assert emb.weight.device.type == head.weight.device.type == "meta"
            assert not hasattr(emb, "_hf_hook") and not hasattr(head, "_hf_hook")
            linears = [m for m in loaded.layers.modules() if type(m) is torch.nn.Linear]
            assert len(linears) == 7 * LAYERS and (sum(m.bias is not None for m in linears) == 7 * LAYERS) == tied
            kept = {id(p) for m in linears for p in m.parameters()} | {id(emb.weight), id(head.weight)}
            assert all(p.dtype == torch.bfloat16 for m in linears for p in m.parameters())
            assert all(p.dtype == torch.float32 for p in loaded.model.parameters() if id(p) not in kept)
            on_disk = [m for m in linears if getattr(getattr(m, "_hf_hook", None), "offload", False)]
            assert len(on_disk) == 7 * (LAYERS - (budget > 0))  # accelerate reads them on use
            off = calibration_pass(loaded, cal.ids)
            assert all(p.device.type == "meta" for m in on_disk for p in m.parameters())
            assert emb.weight.device.type == "meta"
        lookups = [r[1] for r in reads if r[0] == "gather"]
        # the load's 1-token probe of the head (logprobs.head_mode) looks up token 0; then batch 1: one per sequence
        assert lookups == [[0]] + [sorted(set(seq.tolist())) for seq in cal.ids]
        head_reads = [r[1:] for r in reads if r[0] == "rows"]
        assert head_reads == [(s, min(s + 10, VOCAB)) for _ in cal.ids for s in range(0, VOCAB, 10)]
        np.testing.assert_allclose(off.rms, mem.rms, rtol=1e-6)
        assert off.perplexity == pytest.approx(mem.perplexity, rel=1e-6)
        np.testing.assert_allclose(off.rms, ref_rms, rtol=1e-5)
        assert off.perplexity == pytest.approx(ref_ppl, rel=1e-5)


def test_rule_and_proxy_find_exactly_the_planted_channels(planted):
    root, _ = planted
    cal = calibration_ids(root / "base", vocab_size=VOCAB, sequences=SEQS, seq_len=SEQ_LEN)
    rule = OutlierRule()
    for name in ("base", "post"):
        with load_model(root / name, max_memory=None) as loaded:
            rms = calibration_pass(loaded, cal.ids).rms
        assert outlier_channels(rms, rule) == PLANTED
        gains, cols = proxy_inputs(root / name)
        assert gains.shape == (LAYERS, HIDDEN)
        assert proxy_channels(gains, cols, rule) == PLANTED


def test_robust_z_and_jaccard_definitions():
    v = np.array([1.0, 2.0, 3.0, 4.0, 100.0])  # median 3, MAD 1
    np.testing.assert_allclose(robust_z(v), (v - 3.0) / 1.4826)
    assert jaccard([1, 2, 3], [2, 3, 4]) == 0.5 and jaccard([], []) == 1.0


def test_ablating_planted_channels_explodes_perplexity(planted):
    root, _ = planted
    cal = calibration_ids(root / "base", vocab_size=VOCAB, sequences=SEQS, seq_len=SEQ_LEN)
    with load_model(root / "base", max_memory=None) as loaded:
        out = ablate(loaded, cal.ids, PLANTED, HIDDEN)
    intact = out["perplexity_intact"]
    assert out["perplexity_outliers_zeroed"] > 100 * intact
    for r in out["random"]:
        assert len(r["channels"]) == len(PLANTED) and not set(r["channels"]) & set(PLANTED)
        assert r["perplexity"] < 1.5 * intact
    assert random_sets(HIDDEN, PLANTED) == random_sets(HIDDEN, PLANTED)  # seeded


def test_cli_channels_writes_json(planted, tmp_path, capsys):
    from grrr_stream.cli.entry import main

    root, _ = planted
    rc = main(
        [
            "channels",
            str(root / "base"),
            "--post",
            str(root / "post"),
            "--out",
            str(tmp_path),
            "--sequences",
            str(SEQS),
            "--seq-len",
            str(SEQ_LEN),
            "--ablate",
        ]
    )
    assert rc == 0
    data = json.loads((tmp_path / "channels.json").read_text())
    assert data["base"]["channels"] == PLANTED and data["post"]["channels"] == PLANTED
    assert data["base"]["fraction"] == pytest.approx(3 / 64) and data["base"]["jaccard"] == 1.0
    assert (tmp_path / "rms_base.csv").read_text().count("\n") == HIDDEN + 1
    printed = capsys.readouterr().out
    assert "4.69 %" in printed and "proxy Jaccard 1" in printed


def test_cli_bad_input_is_one_line_error(tmp_path, capsys):
    from grrr_stream.cli.entry import main

    assert main(["channels", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_zeroed_channels_are_zero_wherever_the_model_reads_the_residual(planted):
    """Every decoder layer and the final norm receive the residual with the channels at exactly 0."""
    root, _ = planted
    cal = calibration_ids(root / "base", vocab_size=VOCAB, sequences=1, seq_len=SEQ_LEN)
    seen = []

    def grab(module, args, kwargs, output):  # forward hooks see the inputs after the pre-hooks replaced them
        seen.append((args[0] if args else kwargs["hidden_states"]).detach().clone())

    with load_model(root / "base", max_memory=None) as loaded:
        handles = [m.register_forward_hook(grab, with_kwargs=True) for m in [*loaded.layers, loaded.final_norm]]
        calibration_pass(loaded, cal.ids, zero_channels=np.array(PLANTED))
        for h in handles:
            h.remove()
    assert len(seen) == LAYERS + 1
    for x in seen:
        assert torch.all(x[..., PLANTED] == 0) and torch.all(x[..., [0, 1, 2]] != 0)


_PEAK_CHILD = r"""
import json, sys, transformers
from transformers.utils import logging; logging.set_verbosity_error(); logging.disable_progress_bar()
from grrr_stream.channels.activations import calibration_pass, load_model
def rss(key):
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(key + ":"))
transformers.AutoConfig.from_pretrained(sys.argv[1])  # transformers' lazy imports belong to the baseline
base = rss("VmRSS")
import torch
with load_model(sys.argv[1], max_memory=None if sys.argv[2] == "none" else int(sys.argv[2])) as loaded:
    calibration_pass(loaded, torch.arange(64).reshape(2, 32) % 97)
    off = loaded.offloaded
print(json.dumps({"growth": rss("VmHWM") - base, "offloaded": off}))
"""


@pytest.mark.slow  # ~15 s of CPU each (a child process importing transformers), over a minute on a loaded machine
@pytest.mark.parametrize("stored", ["float32", "bfloat16"])
def test_offloaded_peak_rss_growth_is_a_fraction_of_the_checkpoint(tmp_path, stored):
    """Machine-independent memory bound: 12 decoder layers of ~13 MB and a small vocabulary, so the
    checkpoint dominates every other cost. Offloaded with nothing resident, the peak RSS (VmHWM of a
    fresh child process, /proc) of a float32 pass grows by less than half the model's float32 size
    over the process's post-import baseline (in memory it grows by about that size:
    tools/bench_channels.py). Stored in bf16, transformers used to convert every weight while loading."""
    if not Path("/proc/self/status").is_file():
        pytest.skip("needs Linux /proc")
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(
        hidden_size=512,
        intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=8,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=64,
    )
    model = tf.LlamaForCausalLM(cfg)
    f32_bytes = sum(p.numel() * 4 for p in model.parameters())
    assert f32_bytes > 150 * 2**20
    model.to(getattr(torch, stored)).save_pretrained(tmp_path)
    del model
    r = _offloaded_peak(tmp_path)
    assert r["growth"] < f32_bytes / 2, (r, f32_bytes)


@pytest.mark.slow  # a child process importing transformers: ~15 s of CPU
def test_offloaded_peak_rss_growth_stays_below_a_large_lm_head(tmp_path):
    """A vocabulary that dominates the model (65536 × 1024: embedding and LM head 256 MiB each in
    float32, the two decoder layers 18 MiB each): offloaded, the embedding reads only the batch's rows and
    the head 16 MiB slices, so the peak RSS grows by less than half the head's float32 size. Measured
    49–78 MiB over repeated runs on 2 cores (a slice, the 16 MiB of logits, one chunk of log-softmax
    rows, ~17 MiB of file-backed pages, and up to ~30 MiB that glibc keeps or not from run to run);
    a 64 MiB head was too close to that spread (CI saw 75 MiB once). Reading the head whole, as
    accelerate's hook did, grew by 296 MiB (checked by turning the slicing off)."""
    if not Path("/proc/self/status").is_file():
        pytest.skip("needs Linux /proc")
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(
        hidden_size=1024,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=65536,
        max_position_embeddings=64,
    )
    model = tf.LlamaForCausalLM(cfg)
    head_bytes = model.lm_head.weight.numel() * 4
    model.save_pretrained(tmp_path)
    del model
    r = _offloaded_peak(tmp_path)
    assert r["growth"] < head_bytes / 2, (r, head_bytes)


def _offloaded_peak(model_dir) -> dict:
    """The peak-RSS child (_PEAK_CHILD) on ``model_dir`` with nothing resident: its JSON, checked offloaded."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _PEAK_CHILD, str(model_dir), "0"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["offloaded"]
    return r

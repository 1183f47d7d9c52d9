"""The calibration pass and the channel ablation on every supported family (issue 24), each built as a
tiny random model by transformers' own classes (grrr_stream.fixtures.synthetic_hf) and saved as
safetensors, then run offloaded layer by layer (everything on disk: the embedding and LM head read by
slices, every other block by accelerate's hooks).

Independent references, on the in-memory transformers model that was saved, upcast to float64:
- RMS per channel at each decoder layer's input = the model's own ``output_hidden_states``
  (entries 0..L-1: the embedding output, after Gemma's √hidden scaling, and each layer's output);
- intact perplexity = exp of the model's own loss (``labels=input_ids``), which covers tied
  embeddings, Gemma2's final logit soft-capping and the MoE routers;
- ablated perplexity = exp of the model's own loss with forward *hooks on the outputs* of the
  embedding and of every decoder layer zeroing the channels (the inputs of the layers and of the
  final norm; the pass under test zeroes them with pre-hooks on the inputs).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from grrr_stream.channels.ablation import ablate  # noqa: E402
from grrr_stream.channels.activations import calibration_pass, load_model  # noqa: E402
from grrr_stream.channels.calibration import calibration_ids  # noqa: E402
from grrr_stream.channels.model_config import text_config  # noqa: E402
from grrr_stream.checkpoints.arch import FAMILIES  # noqa: E402
from grrr_stream.fixtures.synthetic_hf import make_hf_model, model_families  # noqa: E402

SIZES = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=256,
    initializer_range=0.1,
)
SEQS, SEQ_LEN = 2, 24
ZEROED = [3, 17, 40, 41, 63]
# fixture family name → config.json model_type (what checkpoints/arch.py keys on)
MODEL_TYPE = {"llama-tied": "llama", "gemma3_text": "gemma3_text"}


def test_every_supported_family_is_built_here():
    built = {MODEL_TYPE.get(f, f) for f in model_families()}
    assert set(FAMILIES) <= built, set(FAMILIES) - built


def _reference(model, ids: torch.Tensor, zeroed: list[int] | None) -> tuple[np.ndarray, float]:
    """(RMS (layers, hidden) from output_hidden_states, exp(loss)) of the float64 model, with
    ``zeroed`` channels set to 0 at the outputs of the embedding and of every decoder layer."""
    from grrr_stream.channels.model_config import decoder_layers

    n_layers = text_config(model.config).num_hidden_layers
    layers, _ = decoder_layers(model, n_layers)

    def zero(module, args, out):
        h = out[0] if isinstance(out, tuple) else out
        h = h.clone()
        h[..., zeroed] = 0
        return (h, *out[1:]) if isinstance(out, tuple) else h

    handles = [] if not zeroed else [m.register_forward_hook(zero) for m in (model.get_input_embeddings(), *layers)]
    try:
        with torch.no_grad():
            out = model(input_ids=ids, labels=ids, output_hidden_states=True)
    finally:
        for h in handles:
            h.remove()
    rms = torch.stack(out.hidden_states[:n_layers]).pow(2).mean(dim=(1, 2)).sqrt().numpy()
    return rms, float(torch.exp(out.loss.double()))


# bf16 storage by default for the families whose layout the bf16 path treats differently (tied embedding,
# Gemma3's scaled-embedding subclass and multimodal prefix, fused linears, experts + router); the others slow
BF16_FAST = ("llama-tied", "gemma3", "phi3", "qwen3_moe")
CASES = [(f, "float32") for f in model_families()] + [
    pytest.param(f, "bfloat16", marks=() if f in BF16_FAST else pytest.mark.slow) for f in model_families()
]


@pytest.mark.parametrize("family,stored", CASES)
def test_calibration_pass_and_ablation_match_the_model_itself(family, stored, tmp_path):
    """Stored in float32 or bf16 (then computed in float32 with the embedding and LM head read by
    slices, decoder linears upcast by slices); the reference is the saved weights in float64."""
    saved = make_hf_model(tmp_path, family, dtype=getattr(torch, stored), **SIZES)
    # the saved weights loaded back in float64 by the same class (a bf16 model's .double() would keep its
    # bf16-rounded rotary buffers, which are not saved: the pass computes them in float32)
    kw = {"experts_implementation": "eager"} if saved._can_set_experts_implementation() else {}  # no float64 grouped_mm
    model = type(saved).from_pretrained(tmp_path, dtype=torch.float64, **kw).eval()
    ids = calibration_ids(tmp_path, vocab_size=SIZES["vocab_size"], sequences=SEQS, seq_len=SEQ_LEN).ids
    ref_rms, ref_ppl = _reference(model, ids, None)
    ref_zeroed = _reference(model, ids, ZEROED)[1]
    assert abs(ref_zeroed / ref_ppl - 1) > 1e-3  # the ablation moves perplexity far beyond the tolerance

    with load_model(tmp_path, max_memory=0) as loaded:
        assert loaded.offloaded
        # the LM head is read by slices; so is the embedding (tied or not: one tensor)
        assert set(loaded.sliced) == {
            n
            for n, m in loaded.model.named_modules()
            if m is loaded.model.get_input_embeddings() or m is loaded.model.get_output_embeddings()
        }
        res = calibration_pass(loaded, ids, batch_size=2)
        out = ablate(loaded, ids, ZEROED, SIZES["hidden_size"], seeds=(0,), baseline=res.perplexity)
        random_set = out["random"][0]["channels"]
    assert res.rms.shape == (SIZES["num_hidden_layers"], SIZES["hidden_size"])
    np.testing.assert_allclose(res.rms, ref_rms, rtol=2e-5)
    assert res.perplexity == pytest.approx(ref_ppl, rel=1e-5)
    assert out["perplexity_outliers_zeroed"] == pytest.approx(ref_zeroed, rel=1e-5)
    assert out["random"][0]["perplexity"] == pytest.approx(_reference(model, ids, random_set)[1], rel=1e-5)

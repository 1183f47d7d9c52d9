"""Peak RSS and time of the channels calibration pass (in memory and offloaded layer by layer),
against the peak RSS of decomposing a transition of the same model.

    python tools/bench_channels.py [--hidden 1024 --layers 6 --intermediate 2816 --vocab 32000]
                                   [--sequences 8 --seq-len 128] [--max-memory 200MiB] [--shard-size 2GB]
                                   [--dtype bfloat16] [--no-decompose] [--imports lean|full]
                                   [--modes none,MAX,0]

Builds a synthetic LlamaForCausalLM with transformers' own classes (safetensors stored in ``--dtype``,
float32 by default; the pass always computes in float32; nothing is downloaded) and a post model = base + a small
relative Gaussian step, written with the project's
checkpoint writer. Each measurement runs in a fresh child process:

- what ``grrr-stream channels`` runs for one model but the weight proxy (the checks before loading,
  the load, the non-finite scan, the calibration pass: per-channel RMS at every layer's input +
  perplexity), importing transformers as the command does (``--imports``), in memory, offloaded
  with ``--max-memory`` of resident weights, and offloaded with nothing resident (``0``) (``--modes``);
- ``decompose`` (run_transition, tracking off) of base → post.

Peak RSS is the child's VmHWM (/proc/self/status), not ``ru_maxrss``: Linux carries a process's
``ru_maxrss`` across fork + exec, so a child of a parent that built the model reported the parent's
peak (the 1057 MiB "in memory = offloaded" of an earlier version of this tool). Each child also
reports its RSS after its imports ("baseline": python, torch, and for the calibration pass
transformers, whose import chain alone is ~0.3 GB here), so growth = peak - baseline.
Measurement only, no assertion.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PROC = r"""
def rss_mib(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
"""

CALIBRATION = (
    PROC
    + r"""
import json, sys, time, torch
from grrr_stream.channels.imports import lean_transformers
lean = lean_transformers()  # as `grrr-stream channels` does (GRRR_STREAM_LEAN_IMPORTS=0: --imports full)
import transformers
from grrr_stream.channels import validate
from grrr_stream.channels.activations import calibration_pass, checkpoint_bytes, load_model
from transformers.utils import logging; logging.disable_progress_bar(); logging.set_verbosity_error()
folder, seqs, seq_len, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
transformers.AutoConfig.from_pretrained(folder)  # finishes transformers' lazy imports: part of the baseline
transformers.AutoModelForCausalLM  # (the model classes' import chain too)
baseline = rss_mib("VmRSS")
t = time.perf_counter()
# what `grrr-stream channels` runs for one model but the weight proxy (channels/proxy.py: not the pass):
# the checks before loading, the load (with its loading report and head probe), the non-finite scan, the pass
ckpt, _, cal = validate.preflight(folder, sequences=seqs, seq_len=seq_len)
with load_model(folder, max_memory=None if budget == "none" else budget) as loaded:
    validate.raise_nonfinite(folder, validate.nonfinite_tensors(ckpt))
    res = calibration_pass(loaded, cal.ids)
    off, copied, sliced_head = loaded.offloaded, loaded.offload_copied_bytes, loaded.head is not None
print(json.dumps({"offloaded": off, "copied_mib": copied / 2**20, "seconds": time.perf_counter() - t, "lean": lean,
                  "head_by_slices": sliced_head,
                  "perplexity": res.perplexity, "rms_sum": float(res.rms.sum()), "baseline_mib": baseline,
                  "peak_mib": rss_mib("VmHWM"), "checkpoint_mib": checkpoint_bytes(folder) / 2**20}))
"""
)

DECOMPOSE = (
    PROC
    + r"""
import json, sys, time
from grrr_stream.config import build_config
from grrr_stream.decompose.run import run_transition
base, post, store, frames = sys.argv[1:5]
baseline = rss_mib("VmRSS")
t = time.perf_counter()
res = run_transition(build_config({"base": base, "post": post, "store": store, "frame_cache": frames,
                                   "progress": False, "tracking": {"enabled": False}}))
print(json.dumps({"seconds": time.perf_counter() - t, "baseline_mib": baseline, "peak_mib": rss_mib("VmHWM"),
                  "computed": res.computed}))
"""
)


def child(code: str, *args: str, env: dict | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env={**os.environ, **(env or {})}
    )
    if out.returncode != 0:
        raise SystemExit(f"child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def build_pair(tmp: Path, a: argparse.Namespace) -> tuple[Path, Path]:
    """base: transformers' LlamaForCausalLM; post: every tensor of base plus 1e-3 · mean|w| · N(0, 1),
    streamed tensor by tensor through grrr_stream.checkpoints.writer."""
    import torch
    import transformers as tf
    from safetensors import safe_open

    from grrr_stream.checkpoints.writer import TensorSpec, write_checkpoint

    base, post = tmp / "base", tmp / "post"
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(
        hidden_size=a.hidden,
        intermediate_size=a.intermediate,
        num_hidden_layers=a.layers,
        num_attention_heads=a.hidden // 64,
        num_key_value_heads=max(1, a.hidden // 256),
        vocab_size=a.vocab,
        max_position_embeddings=max(512, a.seq_len),
    )
    model = tf.LlamaForCausalLM(cfg).to(getattr(torch, a.dtype))
    model.save_pretrained(base, max_shard_size=a.shard_size)
    del model
    files = sorted(base.glob("*.safetensors"))
    where = {k: f for f in files for k in safe_open(f, framework="pt").keys()}
    layout = []
    for k, f in where.items():
        with safe_open(f, framework="pt") as h:
            s = h.get_slice(k)
            layout.append(TensorSpec(k, tuple(s.get_shape()), getattr(torch, a.dtype)))

    def tensors():
        g = torch.Generator().manual_seed(1)
        for spec in layout:
            with safe_open(where[spec.name], framework="pt") as h:
                w = h.get_tensor(spec.name).clone()
            w32 = w.float()  # the step is drawn in float32, then stored in the checkpoint's dtype
            step = 1e-3 * w32.abs().mean() * torch.randn(w.shape, generator=g)
            yield spec.name, (w32 + step).to(spec.dtype)

    write_checkpoint(post, tensors(), layout=layout, config=json.loads((base / "config.json").read_text()))
    return base, post


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--intermediate", type=int, default=2816)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--sequences", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--max-memory", default="200MiB", help="resident-weight budget of the first offloaded run")
    ap.add_argument("--shard-size", default="2GB", help="max_shard_size of the synthetic base checkpoint")
    ap.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "bfloat16", "float16"],
        help="storage dtype of the synthetic checkpoints (the calibration pass computes in float32)",
    )
    ap.add_argument("--no-decompose", action="store_true", help="skip the decomposition's measurement")
    ap.add_argument(
        "--imports",
        choices=["lean", "full"],
        default="lean",
        help="lean: the calibration children import transformers as `grrr-stream channels` does, "
        "without scikit-learn, SciPy and Triton (grrr_stream/channels/imports.py); full: as is",
    )
    ap.add_argument(
        "--modes",
        default="none,MAX,0",
        help="calibration runs: comma-separated budgets, 'none' = in memory, MAX = --max-memory",
    )
    a = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-channels-") as tmp:
        base, post = build_pair(Path(tmp), a)
        n_shards = len(list(base.glob("*.safetensors")))
        print(
            f"synthetic Llama: hidden {a.hidden}, {a.layers} layers, MLP {a.intermediate}, vocab {a.vocab}, "
            f"{n_shards} shard(s), stored in {a.dtype}; {a.sequences} × {a.seq_len} tokens"
        )
        calib = {}
        env = {"GRRR_STREAM_LEAN_IMPORTS": "1" if a.imports == "lean" else "0"}
        budgets = [a.max_memory if b == "MAX" else b for b in a.modes.split(",")]
        for budget in budgets:
            r = child(CALIBRATION, str(base), str(a.sequences), str(a.seq_len), budget, env=env)
            calib[budget] = r
            mode = "in memory" if budget == "none" else f"offloaded (--max-memory {budget})"
            print(
                f"calibration {mode:32s} checkpoint {r['checkpoint_mib']:.0f} MiB  peak RSS {r['peak_mib']:.0f} MiB "
                f"(baseline {r['baseline_mib']:.0f}, growth {r['peak_mib'] - r['baseline_mib']:.0f})  "
                f"{r['seconds']:.1f} s  offloaded={r['offloaded']}  copied {r['copied_mib']:.0f} MiB  "
                f"perplexity {r['perplexity']:.4f}  ΣRMS {r['rms_sum']:.6f}  lean imports {r['lean']}, log-probs by "
                f"head slices {r['head_by_slices']}"
            )
        if a.no_decompose:
            return
        d = child(DECOMPOSE, str(base), str(post), str(Path(tmp) / "store.zarr"), str(Path(tmp) / "frames"))
        print(
            f"decompose base → post ({d['computed']} matrices){'':10s} peak RSS {d['peak_mib']:.0f} MiB "
            f"(baseline {d['baseline_mib']:.0f}, growth {d['peak_mib'] - d['baseline_mib']:.0f})  "
            f"{d['seconds']:.1f} s"
        )
        for budget in [b for b in budgets if b != "none"]:
            r = calib[budget]
            print(
                f"offloaded calibration (--max-memory {budget}) / decompose, peak RSS: "
                f"{r['peak_mib'] / d['peak_mib']:.2f}; growth over each baseline: "
                f"{(r['peak_mib'] - r['baseline_mib']) / (d['peak_mib'] - d['baseline_mib']):.2f}"
            )


if __name__ == "__main__":
    main()

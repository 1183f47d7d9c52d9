"""Peak RSS and time of the channels calibration pass, in memory and offloaded layer by layer.

    python tools/bench_channels.py [--hidden 1024 --layers 6 --intermediate 2816 --vocab 32000]
                                   [--sequences 8 --seq-len 128] [--max-memory 200MiB]

Builds a synthetic LlamaForCausalLM with transformers' own classes (float32 safetensors, a few
hundred MB; nothing is downloaded), then runs the calibration pass (per-channel RMS at every
layer's input + perplexity) in a fresh child process per mode, each reporting its own peak RSS
(ru_maxrss) and wall time. Measurement only, no assertion.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

CHILD = r"""
import json, resource, sys, time, torch
from grrr_stream.channels.activations import load_model, calibration_pass, checkpoint_bytes
from grrr_stream.channels.calibration import calibration_ids
from transformers.utils import logging; logging.disable_progress_bar()
folder, seqs, seq_len, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
t = time.perf_counter()
with load_model(folder, max_memory=None if budget == "none" else budget) as loaded:
    cal = calibration_ids(folder, vocab_size=loaded.config.vocab_size, sequences=seqs, seq_len=seq_len)
    res = calibration_pass(loaded, cal.ids)
    off = loaded.offloaded
print(json.dumps({"offloaded": off, "seconds": time.perf_counter() - t, "perplexity": res.perplexity,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "checkpoint_mib": checkpoint_bytes(folder) / 2**20}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--intermediate", type=int, default=2816)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--sequences", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--max-memory", default="200MiB", help="resident-weight budget of the offloaded run")
    a = ap.parse_args()
    import torch
    import transformers as tf

    with tempfile.TemporaryDirectory(prefix="bench-channels-") as tmp:
        torch.manual_seed(0)
        cfg = tf.LlamaConfig(hidden_size=a.hidden, intermediate_size=a.intermediate, num_hidden_layers=a.layers,
                             num_attention_heads=a.hidden // 64, num_key_value_heads=max(1, a.hidden // 256),
                             vocab_size=a.vocab, max_position_embeddings=max(512, a.seq_len))
        model = tf.LlamaForCausalLM(cfg)
        model.save_pretrained(tmp)
        del model
        print(f"synthetic Llama: hidden {a.hidden}, {a.layers} layers, MLP {a.intermediate}, vocab {a.vocab}; "
              f"{a.sequences} × {a.seq_len} tokens")
        for budget in ("none", a.max_memory):
            out = subprocess.run([sys.executable, "-c", CHILD, tmp, str(a.sequences), str(a.seq_len), budget],
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            mode = "in memory" if budget == "none" else f"offloaded (--max-memory {budget})"
            print(f"{mode:36s} checkpoint {r['checkpoint_mib']:.0f} MiB  peak RSS {r['peak_rss_mib']:.0f} MiB  "
                  f"{r['seconds']:.1f} s  offloaded={r['offloaded']}  perplexity {r['perplexity']:.2f}")


if __name__ == "__main__":
    main()

"""The matched isotropic null of the energy shares (geometry/isotropic.py) against a float64 Monte Carlo of random
updates on the demo's own shapes, read from the shipped tiny chain's safetensors header (issue 63: the demo's
isotropic f_diag is about 0.0055, the paper's shapes about 0.0004 at 1.5B and 0.0002 at 7B)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from grrr_stream.geometry import isotropic

SHIPPED = Path(__file__).resolve().parents[2] / "grrr_stream" / "fixtures" / "tinychain_seed0" / "base"
MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def demo_shapes() -> list[tuple[int, int]]:
    """(m, n) of every decomposed matrix of the shipped tiny base, from its safetensors header."""
    raw = (SHIPPED / "model.safetensors").read_bytes()
    header = json.loads(raw[8 : 8 + struct.unpack("<Q", raw[:8])[0]])
    return [
        tuple(v["shape"]) for k, v in sorted(header.items()) if k.endswith(".weight") and k.split(".")[-2] in MODULES
    ]


def monte_carlo(shapes, draws: int, seed: int = 0) -> dict[str, tuple[float, float]]:
    """(mean, standard error) over draws of the transition's mean share, ΔW ~ N(0, 1) i.i.d., W0 random, float64."""
    rng = np.random.default_rng(seed)
    frames = []
    for m, n in shapes:
        u, _, vt = np.linalg.svd(rng.standard_normal((m, n)), full_matrices=False)
        frames.append((u, vt.T))
    shares = {s: np.zeros(draws) for s in ("diag", "off", "null", "diag_principal", "off_mixed")}
    for t in range(draws):
        per = {s: [] for s in shares}
        for (m, n), (u, v) in zip(shapes, frames):
            dw = rng.standard_normal((m, n))
            p = u.T @ dw @ v
            total = float(np.sum(dw * dw))
            d = np.diag(p) ** 2
            k = 16
            off = p * p
            np.fill_diagonal(off, 0.0)
            per["diag"].append(d.sum() / total)
            per["off"].append(off.sum() / total)
            per["null"].append(float(np.sum((dw - u @ p @ v.T) ** 2)) / total)
            per["diag_principal"].append(d[:k].sum() / total)
            per["off_mixed"].append((off[:k, k:].sum() + off[k:, :k].sum()) / total)
        for s in shares:
            shares[s][t] = np.mean(per[s])
    return {s: (float(x.mean()), float(x.std(ddof=1) / np.sqrt(draws))) for s, x in shares.items()}


def test_the_demos_isotropic_shares_match_a_float64_monte_carlo():
    shapes = demo_shapes()
    assert len(shapes) == 14 and (384, 128) in shapes and (64, 128) in shapes
    rows = [{"rows": m, "cols": n, "rank": min(m, n)} for m, n in shapes]
    mc = monte_carlo(shapes, draws=300)
    for share, (mean, se) in mc.items():
        want = isotropic.transition_expected(share, rows, edge=16)
        assert abs(mean - want) < 5 * se + 1e-12, (share, mean, want, se)
    assert isotropic.transition_expected("diag", rows) == pytest.approx(0.00558, abs=5e-5)  # the issue's 0.0055


def test_the_papers_shapes_give_the_isotropic_f_diag_the_issue_quotes():
    # Qwen2.5-1.5B (hidden 1536, MLP 8960, 2 KV heads of 128) and Qwen2.5-7B (3584, 18944, 4 KV heads of 128)
    def model(h, i, kv):
        return [(h, h), (kv, h), (kv, h), (h, h), (i, h), (i, h), (h, i)]

    assert isotropic.decoder_expected("diag", model(1536, 8960, 256)) == pytest.approx(0.00042, abs=1e-5)
    assert isotropic.decoder_expected("diag", model(3584, 18944, 512)) == pytest.approx(0.00018, abs=1e-5)


def test_the_shares_sum_to_one_and_bad_shapes_are_refused():
    for m, n, r in ((64, 128, 64), (128, 128, 100), (384, 128, 128)):
        assert sum(isotropic.expected(s, m, n, r) for s in ("diag", "off", "null")) == pytest.approx(1.0)
        band = ("diag_principal", "diag_tail", "off_principal", "off_mixed", "off_tail")
        assert sum(isotropic.expected(s, m, n, r, 16) for s in band) == pytest.approx(r * r / (m * n))
    with pytest.raises(ValueError, match="no core of rank"):
        isotropic.expected("diag", 4, 4, 5)
    with pytest.raises(ValueError, match="no isotropic share"):
        isotropic.expected("diagonal", 4, 4, 4)

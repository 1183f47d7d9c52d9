#!/usr/bin/env python3
"""How often each variant and full disagree on a problem, from a workdir's fixed-design evaluations: the share of
problems one of them solves and the other does not, and which way (the variant gains / loses). The disagreement
sets what the adaptive design's paired intervals cost (docs/evaluation.md, "Precision per variant").

    python tools/flip_rates.py grrr_demo            # every evaluation folder under grrr_demo/evaluations
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def correct(path: Path) -> dict[int, bool]:
    return {r["idx"]: bool(r["correct"]) for r in map(json.loads, path.read_text().splitlines()) if "idx" in r}


def flips(folder: Path) -> dict[str, dict[str, tuple[int, int, int]]]:
    """benchmark → variant → (problems, variant right where full is wrong, variant wrong where full is right)."""
    out: dict[str, dict[str, tuple[int, int, int]]] = {}
    for ref in sorted((folder / "full").glob("*.jsonl")):
        full = correct(ref)
        for other in sorted(p for p in folder.iterdir() if p.is_dir() and p.name not in ("full", "base")):
            if (other / ref.name).is_file():
                x = correct(other / ref.name)
                both = [i for i in full if i in x]
                gain = sum(x[i] and not full[i] for i in both)
                loss = sum(full[i] and not x[i] for i in both)
                out.setdefault(ref.stem, {})[other.name] = (len(both), gain, loss)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workdir", type=Path)
    args = ap.parse_args()
    pooled: dict[str, list[float]] = {}
    for folder in sorted((args.workdir / "evaluations").iterdir()):
        if not (folder / "full").is_dir() or (folder / "sequential.json").is_file():  # the adaptive design's record
            continue  # an adaptive suite's variants answer different prefixes: not paired over the same problems
        for bench, by_variant in flips(folder).items():
            cells = []
            for v, (n, gain, loss) in by_variant.items():
                cells.append(f"{v} {100 * (gain + loss) / n:.1f} % (+{gain}/−{loss})")
                pooled.setdefault(v, []).append((gain + loss) / n)
            print(f"{folder.name} on {bench}: " + "; ".join(cells))
    print("mean over evaluations: " + ", ".join(f"{v} {100 * sum(x) / len(x):.1f} %" for v, x in pooled.items()))


if __name__ == "__main__":
    main()

"""Compare a sweep's evaluation suites run in the fixed and in the adaptive design: the verdict box of each
(the claims the evaluations answer), the problems decided on and answered, and the evaluation time, as ratios.

    grrr-stream sweep configs/demo_adaptive.yaml
    python tools/compare_designs.py grrr_demo [--fixed main] [--adaptive sequential]

Exit status 1 when the two verdict boxes differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grrr_stream.evaluation.shared_answers import REUSED
from grrr_stream.report.verdict import verdicts
from grrr_stream.sweep.rows import read_rows


def claims_of(workdir: Path, suite: str) -> dict:
    found = sorted((workdir / "claims").glob(f"{suite}-*/claims.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise SystemExit(f"no claims of suite {suite!r} under {workdir / 'claims'}: run the sweep first")
    return json.loads(found[-1].read_text())


def evaluation_box(claims: dict, plan=None) -> dict[str, tuple[str, str]]:
    """claim id → (verdict, value) for the claims the evaluations answer (energy and cosines do not depend on the
    design and are left out). ``plan``: the sweep's, which says each transition's group and whether it is one
    training step (a median is tested on its set's transitions; without the plan it is not comparable)."""
    group_of, steps, how = (lambda r: None), set(), {}
    if plan is not None:
        from grrr_stream.report.build import chains_of, methods_of, steps_of
        from grrr_stream.stats.claims_sets import method_group

        method_of, sft = methods_of(plan), list(plan.config.claims.sft_methods)
        group_of, steps = (lambda r: method_group(method_of(r), sft)), steps_of(plan)
        # as the report's box reads them: a chain counted once, the paper's side and the family as configured
        c = plan.config.claims
        how = {"chains": chains_of(plan), "paper_side": c.paper_side, "adjust": c.family}
    box = verdicts(
        claims["claims"],
        [],
        [],
        group_of=group_of,
        steps=steps,
        differences=claims.get("differences", []),
        informative=claims.get("informative", []),
        left_out=claims.get("left_out", []),
        **how,
    )
    return {v.claim.id: (v.verdict, v.value) for v in box if v.claim.source == "claims"}


def saved_plan(workdir: Path):
    """The sweep's plan from the config its report saved (None when there is none)."""
    from grrr_stream.sweep.plan import plan_sweep
    from grrr_stream.sweep.rewrite import saved_sweep_config

    try:
        return plan_sweep(saved_sweep_config(workdir))
    except Exception as e:  # noqa: BLE001 - the comparison still runs, its medians untested
        print(f"no plan from {workdir}'s saved config ({e}): median claims not tested", file=sys.stderr)
        return None


def answered(units: list[dict], suite: str) -> tuple[int, int, int, int, float]:
    """(problems the decisions rest on, problems answered by a decode, answers taken from the same model evaluated
    elsewhere in the sweep, problems of the fixed design, seconds) of a suite's evaluate units. The adaptive design
    answers past its stops (``lookahead``, ``min_batch``): what was answered is read from the records, one line a
    problem; a line that names ``reused_from`` was copied, not decoded (grrr_stream/evaluation/shared_answers.py)."""
    done = [
        u
        for u in units
        if u["kind"] == "evaluate"
        and (u["unit"].count("/") == 2) == (suite != "main")
        and (suite == "main" or u["unit"].endswith("/" + suite))
    ]
    decided = got = reused = fixed = 0
    seconds = 0.0
    for u in done:
        out = Path(u["out"])
        record = json.loads((out / "evaluation.json").read_text())
        n = sum(b["n"] for b in record["benchmarks"].values())
        fixed += n * len(record["variants"])
        seq = out / "sequential.json"  # the adaptive design's record keeps its old name
        if seq.is_file():
            decided += sum(v["problems"] for v in json.loads(seq.read_text())["variants"].values())
        else:
            decided += n * len(record["variants"])
        lines = [
            json.loads(line)
            for v in record["variants"]
            for f in (out / v).glob("*.jsonl")
            for line in f.read_text().splitlines()
            if line.strip()
        ]
        copied = sum(REUSED in r for r in lines)
        got, reused = got + len(lines) - copied, reused + copied
        seconds += float(u["seconds"] or 0.0)
    return decided, got, reused, fixed, seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workdir", type=Path)
    ap.add_argument("--fixed", default="main", help="the fixed design's suite (default: the main evaluation)")
    # the demo's adaptive suite keeps the design's old name (configs/demo_adaptive.yaml); --sequential: the old flag
    ap.add_argument("--adaptive", "--sequential", default="sequential", help="the adaptive design's suite")
    args = ap.parse_args(argv)
    plan = saved_plan(args.workdir)
    boxes = {s: evaluation_box(claims_of(args.workdir, s), plan) for s in (args.fixed, args.adaptive)}
    print(f"{'claim':<20} {args.fixed + ' (fixed)':<36} {args.adaptive + ' (adaptive)':<36}")
    for cid in boxes[args.fixed]:
        (vf, xf), (vs, xs) = boxes[args.fixed][cid], boxes[args.adaptive].get(cid, ("—", "—"))
        print(f"{cid:<20} {vf + ': ' + xf:<36} {vs + ': ' + xs:<36}{'' if vf == vs else '  ← differs'}")
    units = read_rows(args.workdir / "report" / "units.csv")
    _, got_f, reused_f, all_f, sec_f = answered(units, args.fixed)
    decided, got_s, reused_s, _, sec_s = answered(units, args.adaptive)
    print(f"problems decided on: adaptive {decided} of {all_f}: ratio {decided / all_f:.3f}")
    print(f"problems answered: fixed {got_f}, adaptive {got_s} of {all_f}: ratio {got_s / all_f:.3f}")
    print(f"answers reused from the same model elsewhere in the sweep: fixed {reused_f}, adaptive {reused_s}")
    if sec_f:
        time_ratio = sec_s / sec_f
        print(
            f"evaluation time: fixed {sec_f:.1f} s, adaptive {sec_s:.1f} s: ratio {time_ratio:.3f} "
            f"({time_ratio / (got_s / all_f):.2f} × the problems answered ratio)"
        )
    same = all(boxes[args.fixed][c][0] == boxes[args.adaptive].get(c, ("",))[0] for c in boxes[args.fixed])
    print("verdict boxes: " + ("identical" if same else "DIFFERENT"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

"""What the adaptive design answers and how many engine calls it makes, at the paper's size, without an engine.

Runs the design's own schedule (grrr_stream/evaluation/designs/schedule.py, the rounds an evaluation runs) over
planted answers: the studies of ``tools/simulate.py`` (28 transitions × 12 variants × 1,517 problems; the ρ model,
or ``--disagreement`` for the flip scenario). Per variant it counts the problems its decision rests on
("decided"), those it answered, including answers generated past its stop ("answered"), and its engine calls;
per transition, full's answers (as many as its longest variant needs, and what it answered ahead). The forecast's
shares (grrr_stream/forecast/adaptive_shares.py) are this tool's answered shares and calls.

    python tools/simulate_rounds.py --studies 20                        # ρ = 0.9, ±2 points
    python tools/simulate_rounds.py --studies 20 --disagreement 0.046 --precision 3
    python tools/simulate_rounds.py --studies 20 --lookahead 0.5 --json rounds.json
    python tools/simulate_rounds.py --studies 20 --table   # the forecast's entry (adaptive_shares.SIMULATED)

``--replay`` runs the schedule on the answers of evaluations made in the fixed design instead (their folders,
e.g. WORKDIR/evaluations/*): what the adaptive design would have decided on, answered and called on them, with
``--chunk``, ``--min-batch`` and ``--lookahead`` to try; ``--call-cost`` (what one engine call costs in problems,
e.g. from tools/bench_evaluate.py and a variant's swap time) adds the modelled time against the fixed design:

    python tools/simulate_rounds.py --replay $(ls -d grrr_demo/evaluations/* | grep -v sequential) \
        --chunk 50 --min-batch 150 --call-cost 106
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np
from pydantic import ValidationError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's package, whatever is installed
sys.path.insert(0, str(ROOT / "tools"))  # tool_args beside this file
from tool_args import COUNT, SEED, InputError, Number, fail, folder, os_error, out_file  # noqa: E402

from grrr_stream.evaluation.designs.schedule import REFERENCE, PlantedSchedule  # noqa: E402
from grrr_stream.evaluation.settings import AdaptiveSettings  # noqa: E402
from grrr_stream.forecast.adaptive_shares import padded  # noqa: E402
from grrr_stream.stats.order import problem_order  # noqa: E402


def _simulate_module():
    spec = importlib.util.spec_from_file_location("simulate", ROOT / "tools" / "simulate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SIM = _simulate_module()


def planted_study(rng, order, coupling: float, disagreement) -> np.ndarray:
    """One study's correctness, transitions × VARIANTS × problems (the order's order)."""
    if disagreement is None:
        return SIM.draw_correct(rng, SIM.accuracies(rng)[None], order, coupling)[0]
    return SIM.draw_flipped(rng, SIM.scenario_accuracies(rng)[None], order, disagreement)[0]


def transition_rounds(order, correct: np.ndarray, settings: AdaptiveSettings, names=SIM.VARIANTS) -> dict:
    """The schedule over one transition's answers (``names`` × problems, the order's order): per variant the
    problems decided on, answered, and the calls' sizes."""
    answers = {v: correct[i] for i, v in enumerate(names)}
    run = PlantedSchedule(order, answers, settings)
    decisions = run.rounds()
    decided = {n: d.problems for n, d in decisions.items()}
    decided[REFERENCE] = max(decided.values())
    return {"total": order.total, "decided": decided, "answered": dict(run.answered), "calls": run.calls}


def simulate(studies: int, settings: AdaptiveSettings, coupling=0.9, disagreement=None, seed=0, log=print) -> dict:
    """Every transition of ``studies`` planted studies through the schedule; the per-transition rows."""
    rng = np.random.default_rng(seed)
    order = problem_order(SIM.SIZES, settings.seed, settings.max_weight, settings.allocation)
    rows, began = [], time.time()
    for s in range(studies):
        correct = planted_study(rng, order, coupling, disagreement)
        rows += [transition_rounds(order, correct[t], settings) for t in range(correct.shape[0])]
        log(f"{s + 1} studies, {time.time() - began:.0f} s")
    return {"transitions": rows}


def replay(folders: list[Path], settings: AdaptiveSettings) -> dict:
    """The schedule over the answers of evaluations made in the fixed design (their folders: evaluation.json and
    ``<variant>/<benchmark>.jsonl``, every variant answering every problem): what the adaptive design under
    ``settings`` would have decided on, answered and called, problem for problem. A benchmark's problems are
    taken in the order of their indices."""
    from grrr_stream.evaluation.scoring import problem_scores
    from grrr_stream.evaluation.settings import SamplingSettings

    rows = []
    for evaluation in folders:
        record = _read_json(evaluation / "evaluation.json")
        try:
            sampling, metric = SamplingSettings(**record["sampling"]), record["metric"]
            variants, benchmarks = list(record["variants"]), list(record["benchmarks"])
        except (KeyError, TypeError, ValidationError) as e:
            raise InputError(f"{evaluation / 'evaluation.json'}: not an evaluation's record ({_one_line(e)})") from None
        if REFERENCE not in variants:
            raise InputError(f"{evaluation / 'evaluation.json'}: no {REFERENCE} among its variants")
        values: dict[str, dict[str, dict[int, float]]] = {}
        for v in variants:
            for b in benchmarks:
                path = evaluation / v / f"{b}.jsonl"
                recs = [r for r in _read_jsonl(path) if "idx" in r]
                try:
                    values.setdefault(v, {})[b] = {r["idx"]: problem_scores(r, sampling)[metric] for r in recs}
                except (KeyError, TypeError, ValueError) as e:
                    raise InputError(f"{path}: a record without its {metric} score ({_one_line(e)})") from None
        problems = {b: sorted(values[REFERENCE][b]) for b in benchmarks}
        if not problems or not all(problems.values()):
            raise InputError(f"{evaluation}: {REFERENCE} answered no problem of a benchmark (or it lists none)")
        order = problem_order(
            {b: len(p) for b, p in problems.items()}, settings.seed, settings.max_weight, settings.allocation
        )
        for v, per in values.items():
            missing = [b for b in problems if set(per[b]) != set(problems[b])]
            if missing:
                said = ", ".join(missing)
                raise InputError(f"{evaluation}: {v} did not answer every problem of {said} (fixed design?)")
        answers = np.array([[values[v][b][problems[b][pos]] for b, pos in order.items] for v in values])
        rows.append(transition_rounds(order, answers, settings, names=list(values)))
    return {"transitions": rows}


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split()) if not isinstance(e, KeyError) else f"no {e}"


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise InputError(os_error(e, path)) from None
    except ValueError as e:  # not JSON, or not UTF-8
        raise InputError(f"{path}: not JSON ({e})") from None


def _read_jsonl(path: Path) -> list:
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(os_error(e, path)) from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rec = json.loads(line)
            except ValueError as e:
                raise InputError(f"{path}, line {n}: not JSON ({e})") from None
            if not isinstance(rec, dict):
                raise InputError(f"{path}, line {n}: not a record")
            out.append(rec)
    return out


def summary(res: dict) -> dict:
    """Per variant: mean shares decided and answered, answered / decided, calls (mean, max); per transition:
    full's answered share (median, 90th percentile) and the problems answered over all variants / decided."""
    rows = res["transitions"]
    variants = list(rows[0]["decided"])
    n = np.array([r["total"] for r in rows], dtype=float)
    per = {}
    for v in variants:
        dec = np.array([r["decided"][v] for r in rows]) / n
        ans = np.array([r["answered"][v] for r in rows]) / n
        calls = np.array([len(r["calls"][v]) for r in rows])
        most = max(len(r["calls"][v]) for r in rows)
        by_index = []  # the k-th call: how often a variant makes one, and its mean share of the problems then
        for k in range(most):
            sizes = [r["calls"][v][k] / r["total"] for r in rows if len(r["calls"][v]) > k]
            by_index.append([round(len(sizes) / len(rows), 3), round(float(np.mean(sizes)), 3)])
        per[v] = {
            "calls_by_index": by_index,
            "decided": float(dec.mean()),
            "answered": float(ans.mean()),
            "ahead": float(ans.sum() / dec.sum()),
            "calls": float(calls.mean()),
            "calls_max": int(calls.max()),
        }
    full = np.array([r["answered"][REFERENCE] for r in rows]) / n
    answered = sum(sum(r["answered"].values()) for r in rows)
    decided = sum(sum(r["decided"].values()) for r in rows)
    everything = sum(r["total"] * len(r["answered"]) for r in rows)
    return {
        "variants": per,
        "transitions": len(rows),
        "full_answered_median": float(np.median(full)),  # full answers ahead of its longest variant
        "full_answered_p90": float(np.quantile(full, 0.9)),
        "answered_share": answered / everything,
        "decided_share": decided / everything,
        "answered_over_decided": answered / decided,
        "calls_per_variant": float(np.mean([len(c) for r in rows for c in r["calls"].values()])),
        "calls": sum(len(c) for r in rows for c in r["calls"].values()),
        "variant_evaluations": sum(len(r["calls"]) for r in rows),
        "answered": answered,
        "problems": everything,
    }


def time_ratio(out: dict, call_cost: float) -> float:
    """The adaptive design's time over the fixed design's (one call a variant, every problem), a call costing
    what ``call_cost`` problems do."""
    return (out["calls"] * call_cost + out["answered"]) / (out["variant_evaluations"] * call_cost + out["problems"])


def forecast_entry(out: dict) -> dict[str, tuple[float, tuple]]:
    """The summary as one precision's entry of grrr_stream/forecast/adaptive_shares.py's SIMULATED: variant →
    (decided share, its calls in turn as (how often, mean share)); the random removals as one, 'randrm' (means)."""
    entry, removals = {}, []
    for v, f in out["variants"].items():
        item = (round(f["decided"], 3), tuple((k, s) for k, s in f["calls_by_index"]))
        if v.startswith("randrm-"):
            removals.append(item)
        else:
            entry[v] = item
    if removals:
        rows = np.stack(padded([c for _, c in removals]))  # removal × call × (how often, share)
        often = rows[..., 0].mean(axis=0)
        share = (rows[..., 0] * rows[..., 1]).sum(axis=0) / np.maximum(rows[..., 0].sum(axis=0), 1e-12)
        calls = tuple((round(float(k), 3), round(float(s), 3)) for k, s in zip(often, share))
        entry["randrm"] = (round(float(np.mean([d for d, _ in removals])), 3), calls)
    return entry


def print_summary(out: dict, what: str) -> None:
    print(f"{what}: {out['transitions']} transitions")
    print(f"{'variant':22s} {'decided':>8s} {'answered':>9s} {'ahead':>6s} {'calls':>6s} {'max':>4s}")
    for v, f in out["variants"].items():
        print(
            f"{v:22s} {f['decided']:8.3f} {f['answered']:9.3f} {f['ahead']:6.3f} {f['calls']:6.2f} {f['calls_max']:4d}"
        )
    print(
        f"all variants: decided {out['decided_share']:.3f}, answered {out['answered_share']:.3f} of the problems "
        f"(answered / decided {out['answered_over_decided']:.3f}), {out['calls_per_variant']:.2f} calls a variant; "
        f"full answered median {out['full_answered_median']:.3f}, 90th percentile {out['full_answered_p90']:.3f}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--studies", type=COUNT, default=20)
    p.add_argument(
        "--precision", type=SIM.POINTS, default=2.0, help="precision_points, in (0, 100] (the controls keep their ±4)"
    )
    p.add_argument(
        "--lookahead", type=SIM.PROBABILITY, default=None, help="adaptive.lookahead, in [0, 1] (default: the product's)"
    )
    p.add_argument("--coupling", type=SIM.COUPLING, default=0.9, help="ρ of the planted studies, in [0, 1)")
    p.add_argument(
        "--disagreement",
        type=SIM.disagreement_arg,
        default=None,
        help="a flip rate or 'measured' (tools/simulate.py designs)",
    )
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--json", type=out_file, default=None)
    p.add_argument("--table", action="store_true", help="also print the forecast's entry for this precision")
    p.add_argument("--chunk", type=COUNT, default=None, help="adaptive.chunk (default: the product's)")
    p.add_argument("--min-batch", type=COUNT, default=None, help="adaptive.min_batch (default: the product's)")
    p.add_argument(
        "--replay",
        type=folder,
        nargs="+",
        default=None,
        help="evaluation folders of the fixed design: replay their answers in place of planted studies",
    )
    p.add_argument(
        "--call-cost",
        type=Number(float, 0.0),
        default=None,
        help="what one engine call costs in problems (tools/bench_evaluate.py): print the modelled time ratio",
    )
    args = p.parse_args()
    try:
        run(args, p)
    except InputError as e:
        fail(p, str(e))


def run(args, p: argparse.ArgumentParser) -> None:
    kw = {"precision_points": args.precision}
    for name in ("lookahead", "chunk", "min_batch"):
        if getattr(args, name) is not None:
            kw[name] = getattr(args, name)
    try:
        settings = AdaptiveSettings(**kw)
    except ValidationError as e:  # the types above keep to the settings' domains: a combination they refuse
        p.error("; ".join(f"--{'.'.join(map(str, x['loc'])).replace('_', '-')}: {x['msg']}" for x in e.errors()))
    disagreement = args.disagreement
    if args.replay:
        res, model = replay(args.replay, settings), f"replay of {len(args.replay)} fixed evaluation(s)"
    else:
        res = simulate(args.studies, settings, args.coupling, disagreement, args.seed)
        what = "measured" if isinstance(disagreement, dict) else disagreement
        model = f"ρ = {args.coupling}" if disagreement is None else f"disagreement {what}"
    out = summary(res)
    what = f"{model}, ±{args.precision:g} points, lookahead {settings.lookahead:g}, chunk {settings.chunk}"
    print_summary(out, f"{what}, min_batch {settings.min_batch}, seed {args.seed}")
    if args.call_cost is not None:
        ratio = time_ratio(out, args.call_cost)
        print(
            f"modelled time against the fixed design, a call costing {args.call_cost:g} problems: {ratio:.3f} "
            f"({ratio / out['answered_share']:.2f} × the answered ratio, {ratio / out['decided_share']:.2f} × the "
            f"decided ratio)"
        )
    if args.table:
        print(f"{args.precision}: {forecast_entry(out)!r},")
    if args.json:
        text = json.dumps({"settings": vars(args), **out}, indent=1, default=str)  # paths as text
        try:
            args.json.write_text(text)
        except OSError as e:
            raise InputError(f"--json: {os_error(e, args.json)}") from None


if __name__ == "__main__":
    main()

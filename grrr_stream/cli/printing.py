"""What the commands print: summaries of a transition, of an evaluation and of a sweep."""

from __future__ import annotations

import sys

from ..columns import CONSOLE, ISO, VS_ISO, at_one_edge
from ..evaluation.designs import design_of
from ..evaluation.tables import accuracy_columns
from ..geometry.metrics import PAPER_COLUMNS
from ..runtime.diskplan import describe, gib, shortfalls
from ..stats.claims_sets import method_group, sentences


def print_summary(result, out=None) -> None:
    """A transition's console columns, mean ± std per scope of its summary."""
    out = out or sys.stdout
    cols = PAPER_COLUMNS.ordered(
        PAPER_COLUMNS.summarised(result.summary_rows[0] if result.summary_rows else {}, CONSOLE)
    )
    width = max([10] + [len(str(r["scope"])) for r in result.summary_rows])
    out.write(
        f"\n{result.store}: {len(result.rows)} matrices ({result.computed} computed now, "
        f"{result.frames_reused} base frames reused)\n"
    )
    out.write(f"{'scope':<{width}} {'n':>4} " + " ".join(f"{c.label + ' mean±std':>22}" for c in cols) + "\n")
    for r in result.summary_rows:
        cells = " ".join(f"{r[c.headline]:>11.4g} ± {r[c.spread]:<8.2g}" for c in cols)
        out.write(f"{r['scope']:<{width}} {r['n']:>4} {cells}\n")


def print_evaluation(res, out=None) -> None:
    """Accuracy per variant and benchmark, the differences with their paired intervals, the gain."""
    out = out or sys.stdout
    _print_variant_accuracy(res, out)
    _print_gain_and_rest(res.info, out)
    if res.solved_lost:
        _print_solved_lost(res.solved_lost, res.metric, out)
    for r in res.table56:
        if r["retention_pct"] is not None:
            proj = f", vs proj {r['retention_proj_pct']:6.1f} %" if r.get("retention_proj_pct") is not None else ""
            out.write(f"  retention {r['variant']:<8} vs full {r['retention_pct']:6.1f} %{proj}\n")
    out.write(f"prompt format: the post model's ({res.prompt.get('from')}), digest {res.prompt.get('digest')}\n")
    out.write("wrote " + ", ".join(str(f) for f in res.files) + "\n")


def _print_variant_accuracy(res, out) -> None:
    """One row per variant: accuracy per benchmark, average, difference from full, answers cut off, and under
    a design where each rests on its own problems how many it answered and why it stopped."""
    benches = accuracy_columns(res.accuracy_rows)
    diffs = {r["variant"]: r for r in res.differences}
    own = getattr(res, "own_problems", False)  # each variant rests on its own problems
    out.write(
        f"\n{'variant':<12} "
        + " ".join(f"{b:>13}" for b in benches)
        + f" {'average':>9} {'− full [95 % CI]':>24} {'cut off':>8}"
        + (f" {'problems':>8}  stopped" if own else "")
        + "\n"
    )
    for r in res.accuracy_rows:
        cells = " ".join(f"{r[b]:>13.1f}" if r[b] is not None else f"{'':>13}" for b in benches)
        d = diffs.get(r["variant"], {})
        ci = (
            f"{d['minus_full']:+7.2f} [{d['minus_full_ci_lo']:+6.2f}, {d['minus_full_ci_hi']:+6.2f}]"
            if "minus_full" in d
            else ""
        )
        avg = f"{r['average']:>9.2f}" if r["average"] is not None else f"{'':>9}"
        seq = f" {d.get('problems', ''):>8}  {d.get('stopped', '')}" if own else ""
        out.write(f"{r['variant']:<12} {cells} {avg} {ci:>24} {r['truncated']:>8}{seq}\n")

    note = design_of(res.design).note if own else ""
    if note:
        out.write(f"design {design_of(res.design).name}: {note}\n")


def _print_gain_and_rest(info: dict, out) -> None:
    """The gain full − base with whether the transition is informative, what the tensors that are not
    decomposed carry, and where the rest fell back to post."""
    if "gain" in info:
        call = (
            "informative"
            if info["informative"]
            else f"NOT informative: < {info.get('informative_points', 1.0):g} point"
        )
        out.write(
            f"gain full − base: {info['gain']:+.2f} points [95 % CI {info['gain_ci_lo']:+.2f}, "
            f"{info['gain_ci_hi']:+.2f}] ({call}"
            + ("; by less than its interval" if info.get("informative_within_ci") else "")
            + ")\n"
        )
    if "full_minus_proj" in info:
        out.write(
            f"full − proj (what the tensors that are not decomposed carry): {info['full_minus_proj']:+.2f} "
            f"points [{info['full_minus_proj_ci_lo']:+.2f}, {info['full_minus_proj_ci_hi']:+.2f}]"
            + (f"; {info['note']}" if info.get("note") else "")
            + "\n"
        )
    if info.get("rest_fallback"):
        out.write(f"rest_from fell back to post: {info['rest_fallback']}\n")


def _print_solved_lost(solved_lost: list[dict], metric: str, out) -> None:
    """Per variant, the problems full solves and it loses, and those it solves and full does not."""
    from collections import Counter

    counts = Counter((r["variant"], r["change"]) for r in solved_lost)
    out.write(
        "problems full solves and a variant loses / the variant solves and full does not "
        f"(solved_lost.csv, metric {metric}):\n"
    )
    for v in dict.fromkeys(r["variant"] for r in solved_lost):
        out.write(f"  {v:<12} lost {counts[(v, 'lost')]:>5}   gained {counts[(v, 'gained')]:>5}\n")


def print_units(rows: list[dict], show_done: bool, out=None) -> None:
    out = out or sys.stdout
    width = max((len(r["unit"]) for r in rows), default=10)
    for r in rows:
        if r["state"] == "done" and not show_done:
            continue
        out.write(f"  {r['state']:<11} {r['unit']:<{width}}  {r['detail']}\n")


def totals(rows: list[dict]) -> str:
    from collections import Counter

    c = Counter(r["state"] for r in rows)
    return ", ".join(f"{n} {s}" for s, n in sorted(c.items(), key=lambda kv: kv[0]))


def print_dry_run(dry) -> None:
    """``sweep --dry-run``: the plan with each unit's state and disk need, then the forecast (a DryRun of
    :func:`grrr_stream.sweep.dry_run.dry_run_sweep`), and for a GPU of the table the plan on the other GPUs."""
    from ..sweep.forecast import print_forecast, print_other_devices

    print_plan(dry.plan, dry.status, dry.disk, dry.to_run, dry.needs)
    print_forecast(dry.forecast, dry.todo)
    if dry.others:
        print_other_devices(dry.others, dry.todo)


def print_plan(plan, rows: dict, disk: dict, to_run: list, needs: list) -> None:
    """``sweep --dry-run``: every unit with its state, dependencies, output and disk need, then the disk
    the units still to run need (``rows``, ``disk``: by unit id, from the sweep's status)."""
    print(f"sweep {plan.config.name}: {len(plan.units)} units in {plan.workdir} ({totals(list(rows.values()))})")
    print(transition_counts(plan))
    for u in plan.units:
        deps = f"  (after {', '.join(u.deps)})" if u.deps else ""
        print(f"  {rows[u.id]['state']:<11} {u.id}: {u.label}{deps}")
        broken = _broken_sources(plan, u)
        size = (
            f"  [cannot run: {', '.join(broken)} cannot be read, see below]"
            if broken
            else ""
            if u.id not in disk
            else "  [disk: known once its checkpoints are here]"
            if disk[u.id] is None
            else f"  [disk: {describe(disk[u.id])}]"
        )
        print(f"  {'':<11}   → {u.out}{size}")
    if plan.source_problems:
        print(
            f"{len(plan.source_problems)} local checkpoint(s) cannot be read; their units will fail as decompose "
            "does, the rest runs:"
        )
        for mid, problem in plan.source_problems.items():
            print(f"  {mid}: {problem}")
    unknown = [u.id for u in to_run if u.id in disk and disk[u.id] is None and not _broken_sources(plan, u)]
    if needs:
        print(
            f"disk for the {len(to_run)} unit(s) to run: {gib(sum(n.bytes for n in needs))}"
            + (
                f" (+ {len(unknown)} unit(s) whose size is known only once their checkpoints are here)"
                if unknown
                else ""
            )
        )
        for line in shortfalls(needs):
            print(f"  NOT ENOUGH SPACE: {line}")


def transition_counts(plan) -> str:
    """How many transitions a sweep decomposes (cumulative from the base, incremental from a parent) and how
    many its main evaluation evaluates, by group (SFT or RL from the child's method, as the claims count them)."""
    from collections import Counter

    from ..sweep.kinds import evaluate

    kinds = Counter(tr.kind for tr in plan.transitions.values())
    evaluated = [u.params.transition for u in plan.units if u.kind == evaluate.NAME and u.params.suite is None]
    groups = Counter(
        method_group(plan.transitions[t].method, plan.config.claims.sft_methods) or "no method" for t in evaluated
    )
    return (
        f"transitions: {len(plan.transitions)} decomposed ({kinds['cumulative']} cumulative from the base, "
        f"{kinds['incremental']} incremental from a parent); {len(evaluated)} evaluated ("
        + ", ".join(f"{groups[g]} {g}" for g in ("SFT", "RL", "no method") if groups[g])
        + ")"
    )


def _broken_sources(plan, u) -> list[str]:
    """The models of a unit's transition whose local checkpoints cannot be read (plan.source_problems)."""
    tr = plan.transitions.get(getattr(u.params, "transition", None))
    return [m for m in ((tr.parent, tr.child) if tr else ()) if m in plan.source_problems]


def print_sweep_summary(res, out=None) -> None:
    """The sweep's headline tables, from the report it has just written (``res.report``: typed rows,
    numbers as numbers and None for an empty cell)."""
    out = out or sys.stdout
    rep = res.plan.layout.report
    out.write(
        f"\nsweep {res.plan.config.name}: {totals([{'state': s} for s in res.states.values()])}; "
        f"{len(res.ran)} unit(s) run now; report in {rep}\n"
    )
    from ..stats.run import COMPARISONS_TABLE
    from ..sweep.kinds import decompose
    from ..sweep.kinds.evaluate.rows import REPORT_FILES

    _print_transitions(res.report.rows(decompose.TABLE), out)
    cmps = res.report.rows(COMPARISONS_TABLE)
    if cmps:
        out.write("\nmedian off-diagonal cosine (95 % CI) vs the isotropic null:\n")
        for r in cmps:
            out.write(
                f"  {r['label']:<44} {r['median_cos_off']:+.4f} [{r['ci_lo']:+.4f}, "
                f"{r['ci_hi']:+.4f}]  p = {r['p_value']:.3g} → {r['verdict']}\n"
            )
    _print_accuracy(res.report.rows(REPORT_FILES["accuracy"]), res.claims, out)
    from ..sweep.kinds.channel_groups import sft_rl_text

    text = sft_rl_text(res.report)
    if text:
        out.write("\n" + text)
    _print_sampled(res.report.rows(REPORT_FILES["sampled"]), out)
    _print_claims(res, out)
    bad = [(u, res.records.get(u) or {}) for u, s in res.states.items() if s in ("failed", "blocked")]
    if bad:
        out.write("\nnot done:\n")
        for u, rec in bad:
            out.write(f"  {res.states[u]:<8} {u}: {rec.get('error', 'needs a failed unit')}\n")
        out.write("Fix the cause and rerun the same command; `grrr-stream status CONFIG` lists every unit.\n")


def _print_transitions(trs: list[dict], out) -> None:
    """transitions.csv's console columns: the paper's per transition, then those beyond the paper (each as
    its aggregate gives it: pooled over the transition's entries, or a mean over its matrices)."""
    if not trs:
        return
    from ..sweep.kinds import TRANSITION_COLUMNS

    cols = at_one_edge(TRANSITION_COLUMNS.sorted(TRANSITION_COLUMNS.summarised(trs[0], CONSOLE)))
    paper = [c for c in cols if PAPER_COLUMNS.column(c.name) is not None]
    beyond = [c for c in cols if PAPER_COLUMNS.column(c.name) is None]
    out.write(f"\n{'transition':<28} {'kind':<12} {'method':<12} " + " ".join(f"{c.label:>9}" for c in paper) + "\n")
    for r in trs:
        cells = " ".join(_number(r.get(c.headline), c.fmt, 9) for c in paper)
        out.write(f"{r['transition']:<28} {r['kind']:<12} {r['method']:<12} {cells}\n")
    shaped = [c for c in paper if c.isotropic and any(isinstance(r.get(c.stat(VS_ISO)), float) for r in trs)]
    if shaped:
        out.write("\nagainst an isotropic update of the same shapes (its value here, and the ratio to it):\n")
        for r in trs:
            cells = "  ".join(
                f"{c.label} {_number(r.get(c.stat(ISO)), '.3g', 0)} ({_number(r.get(c.stat(VS_ISO)), '.3g', 0)}×)"
                for c in shaped
            )
            out.write(f"  {r['transition']:<26} {cells}\n")
    if beyond:
        out.write("\nbeyond the paper (pooled over the transition's entries, or means over its matrices):\n")
        for r in trs:
            cells = "  ".join(f"{c.short or c.label} {_number(r.get(c.headline), c.fmt, 0)}" for c in beyond)
            out.write(f"  {r['transition']:<26} {cells}\n")


def _number(v, fmt: str, width: int) -> str:
    text = "—" if not isinstance(v, (int, float)) else format(v, fmt)
    return f"{text:>{width}}"


def _print_accuracy(acc: list[dict], claims: dict, out) -> None:
    if not acc:
        return

    benches = accuracy_columns(acc)
    diffs = {
        (d["transition"] + (f" [{suite}]" if suite else ""), d["variant"]): d
        for suite, s in claims.items()
        for d in s["differences"]
    }
    metric = acc[0].get("metric") or "avg"
    out.write(
        f"\naccuracy (%, metric {metric}); − full: paired bootstrap 95 % CI over problems\n"
        f"{'transition':<28} {'kind':<12} "
        f"{'variant':<12} "
        + " ".join(f"{b:>12}" for b in benches)
        + f" {'average':>8} {'− full [95 % CI]':>24} {'cut off':>8}\n"
    )
    for r in acc:
        # a suite covers some transitions only: its cells are empty for the others
        d = diffs.get((r["transition"], r["variant"]), {})
        ci = (
            f"{d['minus_full']:+7.2f} [{d['minus_full_ci_lo']:+6.2f}, {d['minus_full_ci_hi']:+6.2f}]"
            if "minus_full" in d
            else ""
        )
        truncated = "" if r["truncated"] is None else r["truncated"]
        out.write(
            f"{r['transition']:<28} {r['kind']:<12} {r['variant']:<12} "
            + " ".join(f"{r[b]:>12.1f}" if r[b] is not None else f"{'':>12}" for b in benches)
            + (f" {r['average']:>8.2f}" if r["average"] is not None else f" {'':>8}")
            + f" {ci:>24} {truncated:>8}\n"
        )


def _print_sampled(rows: list[dict], out) -> None:
    """pass@k, maj@k and avg@n (%) per variant and benchmark, where answers were sampled."""
    fixed = ("transition", "kind", "from", "to", "variant", "benchmark", "samples", "problems")
    metrics = list(dict.fromkeys(k for r in rows for k in r if k not in fixed))
    if not rows or not metrics:
        return
    out.write(
        f"\nsampled answers (%, n answers per problem)\n{'transition':<28} {'variant':<12} {'benchmark':<14} "
        f"{'n':>3} " + " ".join(f"{m:>8}" for m in metrics) + "\n"
    )
    for r in rows:
        out.write(
            f"{r['transition']:<28} {r['variant']:<12} {r['benchmark']:<14} {r['samples']:>3} "
            + " ".join(f"{r[m]:>8.1f}" if r.get(m) is not None else f"{'':>8}" for m in metrics)
            + "\n"
        )


def _print_claims(res, out) -> None:
    for suite, s in res.claims.items():
        name = f" ({suite})" if suite else ""
        out.write(
            f"\ninformative transitions{name} (full − base ≥ {res.plan.config.claims.informative_points:g} "
            f"point): {s['counts']['informative']} of {s['counts']['transitions']}, "
            f"{s['counts']['informative_within_ci']} of them by less than their 95 % CI\n"
        )
        for r in s["informative"]:
            if "gain" in r:
                proj = (
                    f"; full − proj {r['full_minus_proj']:+.2f} [{r['full_minus_proj_ci_lo']:+.2f}, "
                    f"{r['full_minus_proj_ci_hi']:+.2f}]"
                    if "full_minus_proj" in r
                    else ""
                )
                out.write(
                    f"  {r['transition']:<26} {r['kind']:<12} gain {r['gain']:+6.2f} [{r['gain_ci_lo']:+6.2f}, "
                    f"{r['gain_ci_hi']:+6.2f}]{proj}\n"
                )
        lines = sentences(s["claims"])
        if lines:
            notes = sorted({r["resampling"] for r in s["claims"] if r["resampling"] != "joint"})
            out.write(
                f"claims{name} over the evaluated transitions (selector: {s.get('selector') or '?'}; "
                f"{res.plan.config.claims.level:.0%} intervals resample the problems jointly across "
                "transitions):\n"
            )
            out.writelines(f"  {line}\n" for line in lines)
            out.writelines(f"  note: {n}\n" for n in notes)

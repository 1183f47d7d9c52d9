"""What figures and the report say in words: a model's name, a Monte Carlo p-value, what a comparison's median
cosine shows."""

from __future__ import annotations

from typing import Optional


def model_label(source: object) -> str:
    """A model as a figure's title names it: a local checkpoint by its folder's name (never the absolute path,
    which says where the workdir is, not what the model is), a Hub id as it is."""
    text = str(source)
    if text.startswith(("/", "./", "../", "~")) or "\\" in text:
        parts = [p for p in text.replace("\\", "/").split("/") if p]
        return parts[-1] if parts else text
    return text


def p_text(p: float, draws: Optional[int] = None) -> str:
    """A Monte Carlo p-value as people read it: at the floor of ``draws`` draws (no draw as extreme as the
    observation: p = 1/(draws + 1)) 'p < 1e-4' for 10,000 draws, else 'p = 0.031'."""
    if p is None or p != p:
        return "p —"
    if draws and p <= 1.0 / (draws + 1) * (1 + 1e-9):
        return "p < " + f"{1.0 / draws:.0e}".replace("e-0", "e-").replace("e+0", "e")
    return f"p = {p:.2g}"


def cosine_label(item: dict) -> str:
    """What a comparison's median off-diagonal cosine shows, with what each part rests on: the null test
    (outside or inside the matched isotropic band, its p over null draws) and, when outside, whether the
    interval over matrices resolves the direction. "Inside" is said only when that interval lies inside the band
    too (a median inside a band 1/37 as wide as its interval is not resolved, however large p). A bare
    'anti-aligned' is never printed when that interval crosses 0 (the two questions differ: the null test asks
    whether the median is isotropic, the interval how it varies over matrices)."""
    med, lo, hi = item.get("median_cos_off"), item.get("ci_lo"), item.get("ci_hi")
    p = p_text(item.get("p_value"), item.get("null_draws"))
    nlo, nhi = item.get("null_lo"), item.get("null_hi")
    ci = f"CI [{lo:#.3g}, {hi:#.3g}]" if lo is not None and hi is not None else "no CI"
    outside = item.get("verdict") in ("aligned", "anti-aligned") or (
        nlo is not None and nhi is not None and med is not None and not nlo <= med <= nhi
    )
    if med is None or med != med:
        return "no cosine"
    if not outside:
        # the null test alone says nothing of the spread over matrices: "inside" only when the CI is inside too
        if None not in (lo, hi, nlo, nhi) and nlo <= lo and hi <= nhi:
            return f"inside the isotropic band ({p}), CI over matrices too"
        known = None not in (lo, hi, nlo, nhi) and nhi > nlo
        ratio = (hi - lo) / (nhi - nlo) if known else float("nan")
        width = (
            f"is {ratio:.0f}× the band's width (±{max(abs(nlo), abs(nhi)):.2g})"
            if ratio >= 1.5
            else f"reaches beyond the band (±{max(abs(nlo), abs(nhi)):.2g})"
            if known
            else "is not contained in the band"
        )
        return f"not resolved against the isotropic band: median within it ({p}), its {ci} over matrices {width}"
    if lo is not None and hi is not None and lo <= 0.0 <= hi:
        return f"outside the isotropic band ({p}); direction not resolved over matrices: {ci}"
    direction = "aligned" if med > 0 else "anti-aligned"
    return f"{direction}: outside the isotropic band ({p}), {ci}"

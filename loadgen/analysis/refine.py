"""Where to measure next: the concurrencies (or rates) that would pin a metric's crossovers down.

In: a ``MetricAnalysis``. Out: at most ``budget_stages`` concurrencies to add, by bisection on
log C of the gaps its crossovers' intervals overlap (loadgen.analysis.crossover §4); on the rate
axis the same bisection gives rates (``refine_rates``).
"""

from __future__ import annotations

import math

from loadgen.analysis.results import MetricAnalysis


def _gaps(analysis: MetricAnalysis, max_width_ratio: float, least_gap: float) -> list[tuple[float, float, float]]:
    """(interval width, a, b) per unsettled crossover: the gap between measured stages ``a`` < ``b`` that
    holds most of its interval, ``b - a`` at least ``least_gap``; widest interval first."""
    measured = sorted(c.concurrency for c in analysis.comparisons)
    todo: list[tuple[float, float, float]] = []
    for x in analysis.crossovers:
        width = x.ci_high / x.ci_low
        # gaps between measured stages that the interval overlaps, by how much it overlaps them
        gaps = [
            (min(b, x.ci_high) / max(a, x.ci_low), a, b)
            for a, b in zip(measured, measured[1:])
            if a < x.ci_high and b > x.ci_low and b - a >= least_gap
        ]
        if width <= max_width_ratio and all(b / a <= max_width_ratio for _, a, b in gaps):
            continue
        if gaps:
            _, a, b = max(gaps)
            todo.append((width, a, b))
    todo.sort(key=lambda t: -t[0])
    return todo


def refine_plan(
    analysis: MetricAnalysis,
    max_width_ratio: float = 1.3,
    budget_stages: int = 4,
) -> list[int]:
    """The next concurrencies to measure to pin the crossovers down (may be empty).

    A crossover is settled when its interval is narrow (``ci_high / ci_low <=
    max_width_ratio``) and no gap between measured stages that overlaps the
    interval is wider than that ratio either (so the estimate does not rest
    on a long interpolation).  For each unsettled crossover, widest interval
    first, this proposes the geometric midpoint of the gap between measured
    stages that holds most of the interval (bisection on log concurrency
    between the stages bracketing it), skipping gaps with no integer inside;
    at most ``budget_stages`` in all.  Run them, call :func:`analyze` again with
    the same ``ladder`` and call this again with the budget that is left.
    """
    if budget_stages <= 0:
        return []
    out: list[int] = []
    for _, a, b in _gaps(analysis, max_width_ratio, 2):
        mid = min(max(int(round(math.sqrt(a * b))), int(a) + 1), int(b) - 1)
        if mid not in out:
            out.append(mid)
    return sorted(out[:budget_stages])


def refine_rates(analysis: MetricAnalysis, max_width_ratio: float = 1.3, budget_stages: int = 4) -> list[float]:
    """:func:`refine_plan` on the rate axis: the geometric midpoints of the gaps, to 3 significant digits.
    A rate crossover's interval ends at measured stages (loadgen.analysis.locate), so it narrows only as
    rates are measured inside it; gaps of at most ``max_width_ratio`` are settled."""
    if budget_stages <= 0:
        return []
    out: list[float] = []
    for _, a, b in _gaps(analysis, max_width_ratio, 0.0):
        mid = float(f"{math.sqrt(a * b):.3g}")
        if a < mid < b and mid not in out:
            out.append(mid)
    return sorted(out[:budget_stages])

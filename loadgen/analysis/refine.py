"""Where to measure next: the concurrencies that would pin a metric's crossovers down.

In: a ``MetricAnalysis``. Out: at most ``budget_stages`` concurrencies to add, by bisection on
log C of the gaps its crossovers' intervals overlap (loadgen.analysis.crossover §4).
"""

from __future__ import annotations

import math

from loadgen.analysis.results import MetricAnalysis


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
    measured = sorted(c.concurrency for c in analysis.comparisons)
    todo: list[tuple[float, int]] = []
    for x in analysis.crossovers:
        width = x.ci_high / x.ci_low
        # gaps between measured stages that the interval overlaps, by how much it overlaps them
        gaps = [
            (min(b, x.ci_high) / max(a, x.ci_low), a, b)
            for a, b in zip(measured, measured[1:])
            if a < x.ci_high and b > x.ci_low and b - a >= 2
        ]
        if width <= max_width_ratio and all(b / a <= max_width_ratio for _, a, b in gaps):
            continue
        if gaps:
            _, a, b = max(gaps)
            mid = min(max(int(round(math.sqrt(a * b))), a + 1), b - 1)
            todo.append((width, mid))
    todo.sort(key=lambda t: -t[0])
    out: list[int] = []
    for _, mid in todo:
        if mid not in out:
            out.append(mid)
    return sorted(out[:budget_stages])

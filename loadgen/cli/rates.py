"""``loadgen crossover --rate`` (and ``loadgen capacity``): the extra stages of an open-loop run.

In: a finished (or growing) results document whose stages are open-loop, the parsed flags. Out: with
``--capacity`` extra stages, one target at a time, where its capacity's interval is wider than
``--capacity-width``; with ``--refine``, both targets inside a rate crossover's interval. The analysis,
rates.json and its tables are the crossover command's (loadgen.analysis.answer), as for any axis.
"""

from __future__ import annotations

import dataclasses
import math
import sys

from loadgen.analysis.compare import configurations
from loadgen.analysis.rates import RateAnalysis, parse_slos, rate_analysis
from loadgen.run.ramp import RampPlan, run_ramp
from loadgen.run.results import ResultsWriter
from loadgen.settings.knobs import Settings


def log(msg: str) -> None:
    print(f"loadgen: {msg}", file=sys.stderr, flush=True)


def analyse(doc: dict, s: Settings) -> RateAnalysis:
    labels, adaptive = configurations(doc)
    slos = parse_slos(s.capacity) if s.capacity else []
    return rate_analysis(doc, labels, confidence=s.confidence, slos=slos, seed=doc.get("run", {}).get("seed", 0),
                         adaptive=adaptive)


def search(plan: RampPlan, writer: ResultsWriter, s: Settings) -> None:
    """Extra stages where a capacity is uncertain: per target, at the geometric middle of its interval,
    until the interval's high/low ≤ --capacity-width or the target's --capacity-budget is spent."""
    left = {t.label: s.capacity_budget for t in plan.targets}
    while True:
        res = analyse(writer.doc(), s)
        todo: list[tuple[str, float, str]] = []
        for wl, per in res.capacity.items():
            for label, cap in per.items():
                if left.get(label, 0) <= 0:
                    continue
                mine = [p for p in res.points.get(wl, []) if p.target == label]
                sat = res.saturation.get(wl, {}).get(label)
                nxt = next_rate(cap, [p.rate for p in mine], s.capacity_width,
                                ceiling=sat.at if sat is not None else None,
                                used=[r.rate for r in cap.measured])
                if nxt is not None:
                    todo.append((label, nxt, wl))
        if not todo:
            return
        for label, rate, wl in todo:
            target = next(t for t in plan.targets if t.label == label)
            log(f"capacity search: {label} at {rate:.3g} req/s ({wl})")
            run_ramp(dataclasses.replace(plan, targets=[target], ladder=[rate], workloads=[wl]), writer)
            left[label] -= 1


def refine(plan: RampPlan, writer: ResultsWriter, s: Settings) -> None:
    """--refine on the rate axis: both targets at the geometric middle of the gap that holds a rate
    crossover's interval (it ends at measured rates: loadgen.analysis.locate), widest first, until each
    is within --refine-width or --refine-budget rates are spent. The added rates place crossovers; only
    the ladder's declare them (the simultaneous intervals are the ladder's)."""
    from loadgen.analysis.refine import refine_rates

    budget = s.refine_budget
    while budget > 0:
        res = analyse(writer.doc(), s)
        todo: list[tuple[str, float]] = []
        for wl, per_cand in res.metrics.items():
            for per in per_cand.values():
                for m in per.values():
                    todo += [(wl, r) for r in refine_rates(m.analysis, s.refine_width, budget) if (wl, r) not in todo]
        todo = todo[:budget]
        if not todo:
            return
        for wl, rate in todo:
            log(f"refining the rate crossover: both targets at {rate:.3g} req/s ({wl})")
            run_ramp(dataclasses.replace(plan, ladder=[rate], workloads=[wl]), writer)
        budget -= len(todo)


EXTEND = 1.5
"""A capacity beyond the ladder is looked for this many times above its highest rate (below its lowest)."""


def next_rate(cap, measured: list[float], width: float, ceiling: float | None = None,
              used: list[float] | None = None) -> float | None:
    """Where to measure next for one capacity, or None when it is known well enough: past the ladder's end
    when every rate met the SLOs (not past a rate where the target saturated), below its start when the
    lowest failed, else the geometric middle of the interval. ``used``: the rates the capacity rests on
    (a lag-flagged stage is measured but not used: the search goes on from the ones that are)."""
    base = used or measured
    if cap.estimate is None:
        if cap.ci_high is None and cap.ci_low is not None:  # met everywhere: look higher
            r = max(base) * EXTEND
            if ceiling is not None and r >= ceiling:
                r = math.sqrt(max(base) * ceiling)  # the saturated rate above: between the two
            return r if all(abs(math.log(r / m)) >= math.log(1.03) for m in measured) else None
        if cap.ci_low is None and cap.ci_high is not None:  # failed at the lowest: look lower
            return min(base) / EXTEND ** 2
        return None
    if cap.ci_low is None or cap.ci_high is None:
        return None

    def new(x: float) -> bool:
        return all(abs(math.log(x / m)) >= math.log(1.03) for m in measured)

    below = [m for m in measured if m <= cap.estimate]
    above = [m for m in measured if m > cap.estimate]
    if below and above and min(above) / max(below) > width:
        # between two stages the estimate is an interpolation whatever its band says: measure there
        r = cap.estimate if new(cap.estimate) else math.sqrt(max(below) * min(above))
        return r if new(r) else None
    if cap.ci_high / cap.ci_low <= width:
        return None
    r = math.sqrt(cap.ci_low * cap.ci_high)
    if not new(r):
        # the middle was measured: split the wider side of it instead
        lo_side, hi_side = math.sqrt(cap.ci_low * r), math.sqrt(r * cap.ci_high)
        r = next((x for x in (hi_side, lo_side) if new(x)), None)
    return r

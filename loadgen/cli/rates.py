"""``loadgen crossover --rate`` (and ``loadgen capacity``): an open-loop run's analysis, its capacity search
and its terminal tables.

In: a finished (or growing) results document whose stages are open-loop, the parsed flags. Out:
rates.json beside run.json (loadgen.analysis.rates), the tables on stdout, and with ``--capacity``
extra stages, one target at a time, where its capacity's interval is wider than
``--capacity-width``; against the embedded simulators, the simulator's own answers beside them.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import orjson

from loadgen import redact
from loadgen.analysis.compare import configurations
from loadgen.analysis.rates import RATE_METRICS, RateAnalysis, parse_slos, rate_analysis
from loadgen.run.ramp import RampPlan, run_ramp
from loadgen.run.results import ResultsWriter


def log(msg: str) -> None:
    print(f"loadgen: {msg}", file=sys.stderr, flush=True)


def analyse(doc: dict, args) -> RateAnalysis:
    labels, _ = configurations(doc)
    slos = parse_slos(args.capacity) if getattr(args, "capacity", None) else []
    return rate_analysis(doc, labels, confidence=args.confidence, slos=slos, seed=doc.get("run", {}).get("seed", 0))


def search(plan: RampPlan, writer: ResultsWriter, args) -> None:
    """Extra stages where a capacity is uncertain: per target, at the geometric middle of its interval,
    until the interval's high/low ≤ --capacity-width or the target's --capacity-budget is spent."""
    left = {t.label: args.capacity_budget for t in plan.targets}
    while True:
        res = analyse(writer.doc(), args)
        todo: list[tuple[str, float, str]] = []
        for wl, per in res.capacity.items():
            for label, cap in per.items():
                if left.get(label, 0) <= 0:
                    continue
                mine = [p for p in res.points.get(wl, []) if p.target == label]
                sat = res.saturation.get(wl, {}).get(label)
                nxt = next_rate(cap, [p.rate for p in mine], args.capacity_width,
                                ceiling=sat.at if sat is not None else None,
                                used=[r["rate"] for r in cap.measured])
                if nxt is not None:
                    todo.append((label, nxt, wl))
        if not todo:
            return
        for label, rate, wl in todo:
            target = next(t for t in plan.targets if t.label == label)
            log(f"capacity search: {label} at {rate:.3g} req/s ({wl})")
            run_ramp(dataclasses.replace(plan, targets=[target], ladder=[rate], workloads=[wl]), writer)
            left[label] -= 1


def refine(plan: RampPlan, writer: ResultsWriter, args) -> None:
    """--refine on the rate axis: both targets at the geometric middle of the gap that holds a rate
    crossover's interval (it ends at measured rates: loadgen.analysis.locate), widest first, until each
    is within --refine-width or --refine-budget rates are spent. The added rates place crossovers; only
    the ladder's declare them (the simultaneous intervals are the ladder's)."""
    from loadgen.analysis.crossover import MetricAnalysis
    from loadgen.analysis.refine import refine_rates

    budget = args.refine_budget
    while budget > 0:
        res = analyse(writer.doc(), args)
        todo: list[tuple[str, float]] = []
        for wl, per_cand in res.metrics.items():
            for per in per_cand.values():
                for m in per.values():
                    a = MetricAnalysis.from_dict(m["analysis"])
                    todo += [(wl, r) for r in refine_rates(a, args.refine_width, budget) if (wl, r) not in todo]
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


def report(doc: dict, out: Path, args) -> int:
    res = analyse(doc, args)
    d = res.to_dict()
    sim = doc.get("run", {}).get("simulator")
    if sim and "seed" in sim:
        try:
            from loadgen.report.ratetruth import add_truth
        except ImportError:  # pragma: no cover
            add_truth = None
        if add_truth is not None:
            add_truth(d, sim, doc)
    out.mkdir(parents=True, exist_ok=True)
    (out / "rates.json").write_bytes(orjson.dumps(redact.document(d), option=orjson.OPT_INDENT_2))
    print(tables(d))
    if not getattr(args, "no_report", False):
        from loadgen.report.html import render

        log(f"report: {render(out, doc=doc, res=d)}")
    log(f"results: {out / 'run.json'}, analysis: {out / 'rates.json'}")
    return 0


def _f(v, nd=1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return f"{v:.{nd}f}" if isinstance(v, float) else str(v)


def _layout(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def tables(d: dict) -> str:
    """Per workload: each target's rates (offered, achieved, latencies from plan, lag, saturation), the
    saturation intervals, each metric's verdict along the rate axis and the capacities."""
    out: list[str] = []
    for wl, points in d["points"].items():
        out.append(f"\n== {wl}: open loop ==")
        rows = [["target", "offered/s", "ended/s", "TTFT·plan p50", "TTFT·plan p99", "TPOT p50", "ITL p99",
                 "E2E·plan p99", "goodput/s", "lag p99", "server"]]
        for p in points:
            f = p["figures"]
            rows.append([p["target"], f"{p['rate']:.3g}", _f(p["ended_per_s"], 2), _f(f["ttft_planned_p50"]),
                         _f(f["ttft_planned_p99"]), _f(f["tpot_p50"], 2), _f(f["itl_p99"], 2),
                         _f(f["e2e_planned_p99"], 0), _f(p["goodput_per_s"], 2), _f(p["lag_p99_ms"], 2),
                         ("SATURATED" if p["saturated"] else "keeps up") + (" LAG" if p["lag_flagged"] else "")])
        out += _layout(rows)
        for x in d.get("left_out", {}).get(wl, []):
            out.append(f"left out: {x['target']} at {x['rate']:.3g} req/s: {x['why']}")
        out.append("saturation:")
        out += [f"  • {s['words']}" for s in d["saturation"][wl].values()]
        for cand, per in d["metrics"].get(wl, {}).items():
            out.append(f"{cand} against {d['reference']}, along the rate axis:")
            for name in RATE_METRICS:
                if name in per:
                    out.append(f"  • {per[name]['sentence']}")
                    for t in per[name].get("simulator_truth", []):
                        out.append(f"      {t['mark']} {t['words']}")
        if d["capacity"].get(wl):
            out.append("capacity: " + d["capacity_sentence"][wl])
            for label, c in d["capacity"][wl].items():
                out.append(f"  • {c['words']}" + (f"  [{c['truth_mark']} {c['truth_words']}]" if c.get("truth_words")
                                                   else ""))
    return "\n".join(out)

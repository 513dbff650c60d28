"""The terminal's text: what ``loadgen crossover``, ``loadgen report``, ``loadgen capacity`` and ``loadgen sim``
print as their answer.

In: an analysed run (a RunAnalysis, or an open loop's RateAnalysis) and, for the flags, its run document;
a simulator profile. Out: plain text, for the fronts in loadgen/cli to print: ``crossover_tables`` (two
configurations: per workload the deciding metric's table, its verdict, a latency metric's where it leans the
other way, the simulator's own crossover, then every compared stage's flags once), ``configs_tables`` (three or
more: each one's mean per C, the best, the policy), ``summary_text`` (``loadgen report``'s: the pair, then those),
``rate_tables`` (an open loop along the rate axis, its saturation and capacities), ``expected_table`` (a
profile's expected throughput); ``any_compared`` says whether there is a table to print at all. The stage table
of ``loadgen run`` is ``table``'s.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from loadgen.analysis.results import level
from loadgen.analysis.compare import BY_NAME as METRICS_BY_NAME
from loadgen.analysis.compare import MetricResult, RunAnalysis
from loadgen.analysis.configs import Gap
from loadgen.analysis.rates import RATE_METRICS, RateAnalysis
from loadgen.report.inputs import PRIMARY, slices
from loadgen.report.table import aligned
from loadgen.report.words import ALONE, finding, leans_against, open_sentence, threshold_hint, winner

if TYPE_CHECKING:
    from loadgen.sim.profiles import Profile


def _fewer(o, deciding) -> str:
    """Where a metric was compared at fewer concurrencies than the deciding one (a TTFT at C=1: one first token a
    request, too few a bin), which: its line said "every measured concurrency (C=10–30)" on a C=1–30 table."""
    mine = {c.concurrency for c in o.analysis.comparisons}
    gone = sorted({c.concurrency for c in deciding.comparisons} - mine)
    if not gone:
        return ""
    return f" Not compared at C={', '.join(map(str, gone))}: too few samples of this metric there."


def any_compared(ra: RunAnalysis) -> bool:
    """Whether some workload has a concurrency whose stages of two configurations both measured their load (their
    metrics may still have too few samples: the tables say so); with three or more configurations, whether the
    deciding metric was compared over them anywhere."""
    if ra.configs and any(ra.decides in per for per in ra.configs.values()):
        return True
    return any(cov.compared for cov in ra.coverage.values())


def crossover_tables(ra: RunAnalysis, metric: str | None = None, *, doc: dict | None = None,
                     verbose: bool = False) -> str:
    """The answer in one screen: per workload the deciding metric's table (``metric``: another's), stages not
    compared marked with why, its verdict, a latency metric's sentence only where it moves the other way, the
    simulator's own crossover; then, given the run's ``doc``, every stage's flags once, whole, grouped by stage.
    ``verbose``: every metric's verdict with what it rests on, as the report has them."""
    metric = metric or ra.decides
    if ra.configs:
        return configs_tables(ra, metric)
    lines = []
    sliced: dict = {}

    def window_s(wl: str, c: int) -> float | None:
        """The reference's window seconds at (wl, C), from the run's slices (read once, when a point is open)."""
        if not sliced:
            sliced.update(slices(doc))
        sl = sliced.get(wl, {}).get(ra.baseline, {}).get(c)
        return sl.window_s if sl else None

    for wl, per in ra.workloads.items():
        cov = ra.coverage.get(wl)
        if metric not in per:
            if cov is not None and cov.status == "not compared":
                lines += _not_compared(ra, wl)  # say so: an empty table would read as "no difference"
            continue
        m = per[metric]
        a = m.analysis
        lines.append(f"\nworkload {wl}: {m.label} ({m.unit}), {level(a.confidence)} % intervals")
        rows = {c.concurrency: [
            str(c.concurrency), f"{c.mean_baseline:.1f}", f"{c.mean_spec:.1f}",
            "-" if c.delta is None else f"{c.delta * 100:+.1f}",
            "-" if c.ci_low is None else f"[{c.ci_low * 100:+.1f}, {c.ci_high * 100:+.1f}]",
            winner(c, a.family_wise)]
            for c in a.comparisons}
        missing = dict(cov.missing) if cov is not None else {}
        for c in missing:
            rows.setdefault(c, [str(c), "-", "-", "-", "-", "not compared"])
        lines += aligned([["C", ra.baseline, ra.spec, "Δ %", "interval", "winner"]]
                         + [rows[c] for c in sorted(rows)], rule=False)
        if any(r[-1].endswith("*") for r in rows.values()):
            lines.append(f"  {ALONE}")
        for c, why in sorted(missing.items()):
            lines.append(f"  C={c} not compared: {why}")
        if cov is not None and cov.cut:
            lines.append(f"  {cov.cut[0].upper()}{cov.cut[1:]}.")
        still = open_sentence(ra, a, (lambda c, wl=wl: window_s(wl, c)) if doc is not None else None)
        if still:
            lines.append(f"  {still}")
        if m.passes is not None:
            lines += passes_lines(m, ra.baseline, ra.spec)
        lines.append(f"  → {m.recommendation if verbose else finding(m)}")
        for name, o in per.items():
            if name != metric and (verbose or leans_against(o, m)):
                lines.append(f"  · {o.recommendation if verbose else finding(o) + _fewer(o, a)}")
        lines += [f"  {k.mark} {k.words}" for k in m.simulator_truth]
    if doc is not None:
        compared = {wl: set(ra.coverage[wl].compared) if wl in ra.coverage else set() for wl in ra.workloads}
        lines += _flags_once(doc, compared)
    return "\n".join(lines)


def passes_lines(m: MetricResult, base: str, spec: str) -> list[str]:
    """A repeated run (--repeat): per C each target's CV across the passes, the difference each pass measured on
    its own, and whether the passes scatter more than one pass's interval allows (analysis/repeats.py)."""
    p = m.passes
    lines = [f"  across {p.passes} passes: {m.label}'s CV per stage and each pass's own Δ %"]
    rows = [["C", f"{base} CV %", f"{spec} CV %", "Δ % per pass", "passes"]]
    for c in sorted(set(p.deltas) | {c for per in p.by_target.values() for c in per}):
        cvs = [(p.by_target.get(t) or {}).get(c) for t in (base, spec)]
        d = p.deltas.get(c)
        rows.append([str(c), *("-" if s is None or s.cv is None else f"{100 * s.cv:.1f}" for s in cvs),
                     "-" if d is None else " ".join(f"{100 * x:+.1f}" for x in d.deltas),
                     "-" if d is None else ("differ" if d.beyond else "agree") + f": {d.spread_words}"])
    return lines + ["  " + r for r in aligned(rows, rule=False)]


def _flags_once(doc: dict, compared: dict[str, set[int]] | None = None) -> list[str]:
    """Every flag of every stage, whole and once, one stage to a block (loadgen.report.inputs.slices); with
    ``compared`` (workload → its compared concurrencies), only those stages': one not compared has its why on
    its row (the H200 run's C=256 stages were 12 lines of flags beside that line)."""
    lines, advice = [], {}
    for wl, per_target in slices(doc).items():
        for label, by_c in per_target.items():
            for c, sl in sorted(by_c.items()):
                if compared is not None and c not in compared.get(wl, set()):
                    continue
                texts = list(dict.fromkeys(text for _, text in sl.flags))
                if not texts:
                    continue
                head = f"  {label} C={c} ({wl}): "
                lines += [(head if i == 0 else " " * len(head)) + t for i, t in enumerate(texts)]
                if any(k == "client" for k, _ in sl.flags):
                    for st in sl.stages:  # the self-check's own advice (stage.ClientHealth), once per text
                        tip = (st.get("client") or {}).get("advice")
                        if tip and f"{label} C={c}" not in advice.setdefault(tip, []):
                            advice[tip].append(f"{label} C={c}")
    if not lines:
        return []
    out = ["\nflags:"] + lines
    out += [f"  client-bound at {', '.join(who)}: {tip}" for tip, who in advice.items()]
    return out


def _not_compared(ra: RunAnalysis, wl: str) -> list[str]:
    cov = ra.coverage.get(wl)
    return [f"\nworkload {wl}: NOT COMPARED", f"  • {(cov.recommendation if cov else '') or wl + ': not compared.'}"]


def _pct(g: Gap | None) -> str:
    if g is None or g.delta is None:
        return "-"
    return f"{g.delta * 100:+.1f} [{g.ci_low * 100:+.1f}, {g.ci_high * 100:+.1f}]"


def configs_tables(ra: RunAnalysis, metric: str = PRIMARY) -> str:
    """The terminal view of three or more configurations: per workload, each one's mean at every C, the best
    (or the tie), its lead over the runner-up with the joint interval, then the policy of every metric."""
    lines = []
    # the workloads in the analysis's order (a set's order would change from run to run)
    for wl in [*ra.workloads, *(w for w in ra.configs if w not in ra.workloads)]:
        per = ra.configs.get(wl, {})
        if metric not in per:
            lines += _not_compared(ra, wl)
            continue
        r = per[metric]
        m = METRICS_BY_NAME[metric]
        labels = [x for x in r.labels if x not in r.excluded]
        n = f"{len(labels)}" if len(labels) == len(r.labels) else f"{len(labels)} of {len(r.labels)}"
        lines.append(f"\nworkload {wl}: {m.label} ({m.unit}), {n} configurations, "
                     f"{level(r.confidence)} % joint intervals (reference {r.reference})")
        rows = [["C", *labels, "best", "lead over runner-up %"]]
        for a in r.at:
            best = a.best or "tie: " + "/".join(a.leaders)
            lead = f"{_pct(a.lead)} vs {a.runner_up}" if a.lead else "-"
            rows.append([str(a.concurrency), *[f"{a.means[x]:.1f}" if x in a.means else "-" for x in labels],
                         best, lead])
        lines += ["  " + x for x in aligned(rows, rule=False)]
        for x in labels[1:]:  # every candidate against the reference, at the joint level
            gaps = [(a.concurrency, a.vs_reference.get(x)) for a in r.at]
            gaps = [(c, g) for c, g in gaps if g and g.delta is not None]
            if gaps:
                lines.append(f"  {x} vs {r.reference} (Δ %): " + ", ".join(f"C={c} {_pct(g)}" for c, g in gaps))
        for name, text in ra.policy.get(wl, {}).items():
            lines.append(f"  • {text}")
            if name == metric and wl in ra.engine_terms:
                lines += [f"      {x}" for x in ra.engine_terms[wl].lines()]
        for x in r.adaptive:
            gaps = [(a.concurrency, a.shortfall[x]) for a in r.at if x in a.shortfall]
            lines.append(f"  • {x} (adapts on its own) against the best of the others: "
                         + ", ".join(f"C={c} {_pct(g)} %" for c, g in gaps))
            # on the embedded simulators: its own gap at each C
            lines += [f"      {k.mark} {k.words}" for k in r.gap_truth if k.label == x]
        lines += [f"  {k.mark} {k.words}" for k in r.simulator_truth]
    return "\n".join(lines)


def summary_text(doc: dict, ra: RunAnalysis, metric: str | None = None, verbose: bool = False) -> str:
    """The terminal version of the report: the answer per workload, its table, the flags once."""
    metric = metric or ra.decides
    lines = [f"{ra.baseline} vs {ra.spec}"]
    hint = threshold_hint(doc, ra, metric)  # the deciding metric's crossovers, as the page's top hint
    if hint:
        lines.append(f"  {hint}")
    if not any(metric in per for per in ra.workloads.values()):
        lines.append(f"\n(no workload has {metric} measured by both targets)")
    lines.append(crossover_tables(ra, metric, doc=doc, verbose=verbose))
    return "\n".join(lines)


def _cell(v, nd=1) -> str:
    """A rate table's cell: "-" for none, "inf", a float to ``nd`` places."""
    if v is None:
        return "-"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return f"{v:.{nd}f}" if isinstance(v, float) else str(v)


def rate_tables(ra: RateAnalysis) -> str:
    """An open-loop run's answer. Per workload: each target's rates (offered, achieved, latencies from plan, lag,
    saturation), the saturation intervals, each metric's verdict along the rate axis and the capacities."""
    out: list[str] = []
    for wl, points in ra.points.items():
        out.append(f"\n== {wl}: open loop ==")
        rows = [["target", "offered/s", "ended/s", "TTFT·plan p50", "TTFT·plan p99", "TPOT p50", "ITL p99",
                 "E2E·plan p99", "goodput/s", "lag p99", "server"]]
        for p in points:
            f = p.figures
            rows.append([p.target, f"{p.rate:.3g}", _cell(p.ended_per_s, 2), _cell(f["ttft_planned_p50"]),
                         _cell(f["ttft_planned_p99"]), _cell(f["tpot_p50"], 2), _cell(f["itl_p99"], 2),
                         _cell(f["e2e_planned_p99"], 0), _cell(p.goodput_per_s, 2), _cell(p.lag_p99_ms, 2),
                         ("SATURATED" if p.saturated else "keeps up") + (" LAG" if p.lag_flagged else "")])
        out += aligned(rows)
        for x in ra.left_out.get(wl, []):
            out.append(f"left out: {x.target} at {x.rate:.3g} req/s: {x.why}")
        out.append("saturation:")
        out += [f"  • {s.words}" for s in ra.saturation.get(wl, {}).values()]
        for cand, per in ra.metrics.get(wl, {}).items():
            out.append(f"{cand} against {ra.reference}, along the rate axis:")
            for name in RATE_METRICS:
                if name in per:
                    out.append(f"  • {per[name].sentence}")
                    out += [f"      {t.mark} {t.words}" for t in per[name].simulator_truth]
        for x, sentences in ra.adaptive_sentences.get(wl, {}).items():
            out.append(f"{x} adapts on its own; against the envelope of the fixed configurations, along the rate axis:")
            for name, t in sentences.items():
                out.append(f"  • {t}")
                out += [f"      {k.mark} {k.words}" for k in ra.configs[wl][name].simulator_truth if k.label == x]
        if ra.capacity.get(wl):
            out.append("capacity: " + ra.capacity_sentence[wl])
            for c in ra.capacity[wl].values():
                k = c.simulator_truth
                out.append(f"  • {c.words}" + (f"  [{k.mark} {k.words}]" if k else ""))
    return "\n".join(out)


def expected_table(prof: Profile, concurrencies: list[int], kw: dict, adaptive: bool) -> str:
    """A simulator profile's expected aggregate tok/s (``loadgen sim --expect``/``--fit``): one column per mode of
    the profile (``adaptive``: --speculative-adaptive, for spec), then spec/base, and its true crossovers."""
    from loadgen.sim import model

    lines = [f"profile {prof.name}: expected aggregate output tok/s (time-scale 1), "
             f"{kw['prompt_tokens']}-token prompts, {kw['output_tokens']} output tokens"]  # fmt: skip
    modes = prof.modes()
    width = max(10, *(len(m) for m in modes))
    lines.append(f"{'C':>6}" + "".join(f" {m:>{width}}" for m in modes) + f" {'spec/base':>10}")
    for c in concurrencies:
        row = {m: model.expected_throughput(prof, m, c, adaptive=adaptive and m == "spec", **kw) for m in modes}
        lines.append(f"{c:>6}" + "".join(f" {row[m]:>{width}.1f}" for m in modes)
                     + f" {row['spec'] / row['baseline']:>10.3f}")  # fmt: skip
    cross = model.true_crossovers(prof, **kw)
    if not cross:
        lines.append("true crossover: none (one mode wins at every concurrency up to 512)")
    for x in cross:
        side = "spec wins above" if x.spec_wins_above else "spec loses above"
        lines.append(f"true crossover: C = {x.concurrency:.1f} ({side})")
    return "\n".join(lines)

"""One workload's section of the page: the decision, then why, then the detail.

In: the run's analysis (:class:`~loadgen.analysis.compare.RunAnalysis`, ``ra``), a workload's name and its
slices (target → C → Slice). Out: a :class:`Section` — the link for the sticky workload bar, the section's
HTML (template ``templates/workload.html``, or ``workload-configs.html`` for three or more configurations)
and the five charts that also become PNGs. The page (``html.py``) puts the sections in order; this module
lays out one, in the terminal's order (loadgen/report/terminal.py, crossover_tables):

1. *decision*: the deciding metric's finding (``ra.decides``: output throughput, or goodput with SLOs) with
   its chip, the simulator's own crossover beside it (on the simulators), the stages not compared and why;
2. *why*: that metric's chart with its intervals, its Δ, its table (stages not compared marked), then the
   metrics that say speculation costs something where the deciding one enables it (:func:`words.leans_against`);
3. *detail*, collapsed: every metric's verdict with what it rests on, the who-wins matrix, every metric's
   table, the latency and acceptance charts, the HDR tabs, the server's view, every stage figure.

A part with nothing to show is left out with its heading (:class:`Part`), never shown empty or with a
placeholder: a chart with no data (:meth:`Chart.has_data`), a workload with no stage the server had
/metrics for, no stage both targets ran, no metric compared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

from loadgen.analysis.compare import MetricResult, RunAnalysis, WorkloadCoverage
from loadgen.analysis.crossover import MetricAnalysis
from loadgen.report.charts import Chart
from loadgen.report.configs import band, excluded_html, policy_list, policy_panel, policy_tabs, switch_truth
from loadgen.report.figures import acceptance_chart, delta_chart, figure, hdr_chart, latency_chart, throughput_chart
from loadgen.report.htmltables import chip, comparison_table, passes_table, stage_table, verdict_matrix
from loadgen.report.inputs import Slice
from loadgen.report.page import Section
from loadgen.report.palette import colours_of
from loadgen.report.parts import Part, stage_parts
from loadgen.report.templates import fragment
from loadgen.report.words import (capitalised, configs_kind, finding, kind_of, leans_against, metric_label,
                                  not_compared_sentence, open_sentence, slug, without_metric)

LATENCIES = (("ttft", "TTFT"), ("itl", "ITL"))
"""The latencies drawn by percentile (HDR), one chart each per stage."""


def _grid(*figures: str, cls: str = "grid2") -> str:
    """The figures that have something, side by side ("" for none)."""
    shown = [f for f in figures if f]
    return f'<div class="{cls}">{"".join(shown)}</div>' if shown else ""


def _truth_html(m: MetricResult | None) -> str:
    """The embedded simulator's own crossover beside each reported one (analysis/truth.py)."""
    return "".join(f'<p class="muted truth">{k.mark} {escape(capitalised(k.words))}.</p>'
                   for k in (m.simulator_truth if m is not None else []))


def _not_compared_html(cov: WorkloadCoverage | None) -> str:
    """The planned stages not compared, each with why, and how the run was cut ("" when every one was)."""
    if cov is None:
        return ""
    lis = "".join(f'<li data-c="{c}"><b>C={c}</b> not compared: {escape(why)}</li>'
                  for c, why in sorted(cov.missing.items()))
    out = f'<ul class="notcompared">{lis}</ul>' if lis else ""
    if cov.cut:
        out += f'<p class="muted">{escape(capitalised(cov.cut))}.</p>'
    return out


def _hdr_tabs(ra: RunAnalysis, anchor: str, per_target: dict[str, dict[int, Slice]], a: MetricAnalysis | None) -> str:
    """HDR percentile curves: one pair per stage both targets ran, the one nearest the crossover shown first
    ("" when there is none, or no histogram in any)."""
    cs = sorted(set(per_target.get(ra.baseline, {})) & set(per_target.get(ra.spec, {})))
    panels = {}
    for c in cs:
        figs = _grid(*(figure(hdr_chart(ra, per_target, c, m, n)) for m, n in LATENCIES))
        if figs:
            panels[c] = figs
    if not panels:
        return ""
    cs = sorted(panels)
    default = cs[-1]
    marks = (a.crossovers or a.candidates) if a is not None else []
    if marks:
        est = marks[0].estimate
        default = min(cs, key=lambda c: abs(math.log(c) - math.log(est)))
    tabs, divs = [], []
    for c in cs:
        pid = f"{anchor}-hdr-{c}"
        on = c == default
        tabs.append(f'<button type="button" data-panel="{pid}" class="{"on" if on else ""}">C={c}</button>')
        divs.append(f'<div class="tabpanel" id="{pid}"{"" if on else " hidden"}>{panels[c]}</div>')
    return (f'<div class="tabs" data-tabs><div class="tabbar"><span class="tablabel">stage:</span>{"".join(tabs)}'
            f'</div>{"".join(divs)}</div>')


def _metric_tabs(ra: RunAnalysis, anchor: str, per_metric: dict[str, MetricResult],
                 per_target: dict[str, dict[int, Slice]], missing: dict[int, str]) -> str:
    """Every metric's table, one tab each ("" for no metric)."""
    mtabs, mpanels = [], []
    for i, (name, m) in enumerate(per_metric.items()):
        pid = f"{anchor}-tbl-{slug(name)}"
        mtabs.append(f'<button type="button" data-panel="{pid}" class="{"on" if i == 0 else ""}">'
                     f'{escape(m.label)}</button>')
        mpanels.append(f'<div class="tabpanel" id="{pid}"{"" if i == 0 else " hidden"}>'
                       f'{comparison_table(ra, m, per_target, missing)}</div>')
    return (f'<div class="tabs" data-tabs><div class="tabbar">{"".join(mtabs)}</div>{"".join(mpanels)}</div>'
            if mtabs else "")


def _recs(per_metric: dict[str, MetricResult]) -> str:
    """Every metric's verdict with what it rests on, as a list ("" for none)."""
    lis = "".join(f'<li>{chip(kind_of(m))} <b>{escape(m.label)}</b>: {escape(without_metric(m.recommendation))}</li>'
                  for m in per_metric.values())
    return f'<ul class="recs">{lis}</ul>' if lis else ""


def _against(per_metric: dict[str, MetricResult], deciding: str) -> str:
    """The metrics that say speculation costs something where the deciding one enables it, each as its finding
    (for ITL p99 with why speculation is worse there); "" for none (the terminal's rule, words.leans_against)."""
    m = per_metric.get(deciding)
    lis = "".join(f'<li>{chip(kind_of(o))} <b>{escape(o.label)}</b>: {escape(without_metric(finding(o)))}</li>'
                  for name, o in per_metric.items() if name != deciding and leans_against(o, m))
    return Part("What speculation costs where it is enabled", f'<ul class="recs against">{lis}</ul>' if lis else "",
                level=4).html()


@dataclass
class _Charts:
    """The charts of a workload section, made once: those that become PNGs, in write_pngs' order."""

    decide: Chart
    delta: Chart
    ttft: Chart
    itl: Chart
    acceptance: Chart

    def pngs(self) -> list[Chart]:
        return [self.decide, self.delta, self.ttft, self.itl, self.acceptance]


def _charts(ra: RunAnalysis, wl: str, per_target: dict[str, dict[int, Slice]], m: MetricResult | None) -> _Charts:
    label = m.label if m is not None else metric_label(ra, ra.decides)
    unit = m.unit if m is not None else ""
    a = m.analysis if m is not None else None
    return _Charts(throughput_chart(ra, wl, per_target, a, ra.decides, label, unit), delta_chart(a, label),
                   latency_chart(ra, per_target, "ttft", "TTFT"), latency_chart(ra, per_target, "itl", "ITL"),
                   acceptance_chart(ra, per_target))


def _detail(summary: str, *parts: str) -> str:
    """The collapsed detail: its parts that have something, under one summary ("" when none has)."""
    body = "".join(parts)
    return f'<details class="detail"><summary>{escape(summary)}</summary>{body}</details>' if body else ""


def _figures_tail(ra: RunAnalysis, anchor: str, per_target: dict[str, dict[int, Slice]], ch: _Charts,
                  a: MetricAnalysis | None, server: str, decide_too: bool) -> list[str]:
    """The detail's parts after the metrics: charts against C (with the deciding metric's when the why has no
    place for it), HDR, the server's view, the parts that read only the stages (report/parts.py), every stage
    figure."""
    small = dict(width=400, height=290)
    decide = figure(ch.decide, **small) if decide_too else ""
    figs = _grid(decide, figure(ch.ttft, **small), figure(ch.itl, **small), figure(ch.acceptance, **small),
                 cls="grid3")
    heading = f"{ch.decide.title}, latency and acceptance vs concurrency" if decide else \
        "Latency and acceptance vs concurrency"
    stages = _stages(per_target)
    return [Part(heading, figs).html(),
            Part("Latency by percentile (HDR)", _hdr_tabs(ra, anchor, per_target, a)).html(),
            server,
            stage_parts(stages, ra.adaptive),
            Part("Every stage figure", stage_table(ra, per_target)).html()]


def _open_html(ra: RunAnalysis, m: MetricResult, per_target: dict[str, dict[int, Slice]]) -> str:
    """The load points still open and what each needs (words.open_sentence), under the comparison table."""
    def window_s(c: int) -> float | None:
        sl = per_target.get(ra.baseline, {}).get(c)
        return sl.window_s if sl else None

    said = open_sentence(ra, m.analysis, window_s)
    return f'<p class="muted">{escape(said)}</p>' if said else ""


def _stages(per_target: dict[str, dict[int, Slice]]) -> list[dict]:
    """The stage dicts under the slices, target by target in C order."""
    return [st for per in per_target.values() for _, sl in sorted(per.items()) for st in sl.stages]


def workload_section(ra: RunAnalysis, wl: str, per_target: dict[str, dict[int, Slice]], server: str = "",
                     view=None) -> Section:
    """The section of workload ``wl`` ("all" for the stages of several workloads pooled); ``server``: its
    "What the server ran" part (report/serverview.py, "" when no stage had server figures), placed before the
    stage figures; ``view``: the run's ServerView (the running batch at the switches of three or more
    configurations)."""
    if wl in ra.configs:
        return configs_section(ra, wl, per_target, server, view)
    per_metric = ra.workloads.get(wl, {})
    m = per_metric.get(ra.decides)
    kind = kind_of(m)
    anchor = "wl-" + slug(wl)
    cov = ra.coverage.get(wl)
    missing = dict(cov.missing) if cov is not None else {}
    label = m.label if m is not None else metric_label(ra, ra.decides)
    ch = _charts(ra, wl, per_target, m)
    compared = kind != "not compared"
    if compared:
        lead = capitalised(without_metric(finding(m)))
        why = (f'<div class="why"><h3>{escape(f"Why: {label} at each concurrency")}</h3>'
               f'{_grid(figure(ch.decide), figure(ch.delta))}{comparison_table(ra, m, per_target, missing)}'
               f'{_open_html(ra, m, per_target)}'
               f'{passes_table(ra, m)}{_against(per_metric, ra.decides)}</div>')
    else:  # never compared (or not for this metric): say so, never "no difference"; nothing to explain
        lead = capitalised(not_compared_sentence(ra, wl))
        why = ""
    detail = _detail(
        "Detail: every metric, latency, percentiles, the server's view, every stage",
        Part("Every metric's verdict, with what it rests on", _recs(per_metric)).html(),
        Part("Who wins where", verdict_matrix(ra, per_metric)).html(),
        Part("Every metric's table", _metric_tabs(ra, anchor, per_metric, per_target, missing)).html(),
        *_figures_tail(ra, anchor, per_target, ch, m.analysis if m is not None else None, server, not compared))
    html = fragment("workload.html").format(
        anchor=anchor, title=escape("all workloads together" if wl == "all" else wl), chip=chip(kind),
        decides=escape(f"decided by {label}"), lead=escape(lead),
        truth=_truth_html(m), missing=_not_compared_html(cov), why=why, detail=detail)
    return Section(f'<a href="#{anchor}">{escape(wl)} {chip(kind)}</a>', html, ch.pngs())


def configs_section(ra: RunAnalysis, wl: str, per_target: dict[str, dict[int, Slice]], server: str = "",
                    view=None) -> Section:
    """The section of a workload measured on three or more configurations: the deciding metric's policy (which
    configuration to use where), why (every configuration's line and the envelope with the best-config band
    under it, that metric's policy and per-C tables), then in the detail every metric's policy, the reference
    against the first candidate as a two-target run has it, and the per-stage figures of all of them."""
    per_metric = ra.workloads.get(wl, {})
    metric = ra.decides
    m = per_metric.get(metric)
    anchor = "wl-" + slug(wl)
    colours = colours_of(ra)
    r = ra.configs[wl].get(metric)
    kind = configs_kind(r)
    label = metric_label(ra, metric)
    ch = _charts(ra, wl, per_target, m)
    sentence = ra.policy.get(wl, {}).get(metric)
    cov = ra.coverage.get(wl)
    missing = dict(cov.missing) if cov is not None else {}
    lead = (capitalised(without_metric(sentence)) if sentence else
            f"{capitalised(label)} was not compared over the configurations.")
    why = ""
    if r is not None:
        why = (f'<div class="why"><h3>{escape(f"Why: {label} of every configuration")}</h3>'
               f'{figure(ch.decide, cls="envelope", after=band(ra, wl, ch.decide, colours, metric))}'
               f'{policy_panel(ra, wl, metric, f"{anchor}-pol-{slug(metric)}", view, colours, said=True)}</div>')
    pair = ""
    if per_metric:
        pair = Part(f"The reference against the first candidate: {ra.spec} vs {ra.baseline}",
                    _grid(figure(ch.delta), verdict_matrix(ra, per_metric))
                    + _metric_tabs(ra, anchor, per_metric, per_target, missing) + _recs(per_metric)).html()
    policies = policy_list(ra, wl)
    detail = _detail(
        "Detail: every metric's policy, the reference against the first candidate, latency, the server's view, "
        "every stage",
        Part("The policy, every metric", f'<ul class="recs policies">{policies}</ul>' if policies else "").html(),
        Part("Policy and every configuration, by metric", policy_tabs(ra, wl, anchor, view, colours,
                                                                      skip=(metric,))).html(),
        pair,
        *_figures_tail(ra, anchor, per_target, ch, m.analysis if m is not None else None, server, r is None))
    html = fragment("workload-configs.html").format(
        anchor=anchor, title=escape("all workloads together" if wl == "all" else wl), chip=chip(kind),
        decides=escape(f"decided by {label}"), lead=escape(lead),
        truth=switch_truth(r) if r is not None else "",
        missing=excluded_html(ra, wl, per_target, colours) + _not_compared_html(cov), why=why, detail=detail)
    return Section(f'<a href="#{anchor}">{escape(wl)} {chip(kind)}</a>', html, ch.pngs())

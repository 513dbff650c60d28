"""One workload's section of the page: its verdict, charts, tables and HDR tabs.

In: ``crossover.json``'s dict (``res``), a workload's name and its slices (target → C →
Slice). Out: a :class:`Section` — the link for the sticky workload bar, the section's
HTML (template ``templates/workload.html``) and the five charts that also become PNGs.
The page (``html.py``) puts the sections in order; this module lays out one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

from loadgen.report.charts import Chart
from loadgen.report.configs import band, excluded_html, policy_list, policy_tabs
from loadgen.report.figures import (acceptance_chart, concurrencies, delta_chart, figure, hdr_chart, latency_chart,
                                    throughput_chart)
from loadgen.report.htmltables import chip, comparison_table, stage_table, verdict_matrix
from loadgen.report.inputs import PRIMARY, Slice
from loadgen.report.palette import colours_of
from loadgen.report.templates import fragment
from loadgen.report.words import capitalised, configs_kind, kind_of, slug, without_metric

LATENCIES = (("ttft", "TTFT"), ("itl", "ITL"))
"""The latencies drawn by percentile (HDR), one chart each per stage."""


@dataclass
class Section:
    """One workload's part of the page."""

    nav: str
    """Its link in the sticky workload bar, with its verdict chip."""
    html: str
    charts: list[Chart]
    """Throughput, Δ, TTFT, ITL, acceptance: the ones that also become PNGs (figures.write_pngs)."""


def _truth_html(m: dict) -> str:
    """The embedded simulator's own crossover beside each reported one (crossover_cli adds it)."""
    from loadgen.sim.known import verdict

    out = []
    for k in m.get("simulator_truth", []):
        mark, text = verdict(k)
        out.append(f'<p class="muted">{mark} {escape(capitalised(text))}.</p>')
    return "".join(out)


def _hdr_tabs(res: dict, anchor: str, per_target: dict[str, dict[int, Slice]], a: dict | None) -> str:
    """HDR percentile curves: one pair per concurrency, the one nearest the crossover shown first."""
    cs = sorted(set(per_target.get(res["baseline"], {})) & set(per_target.get(res["spec"], {}))) \
        or concurrencies(per_target)
    default = cs[-1] if cs else None
    marks = (a["crossovers"] or a.get("candidates") or []) if a else []
    if marks and cs:
        est = marks[0]["estimate"]
        default = min(cs, key=lambda c: abs(math.log(c) - math.log(est)))
    tabs, panels = [], []
    for c in cs:
        pid = f"{anchor}-hdr-{c}"
        on = c == default
        tabs.append(f'<button type="button" data-panel="{pid}" class="{"on" if on else ""}">C={c}</button>')
        panels.append(f'<div class="tabpanel grid2" id="{pid}"{"" if on else " hidden"}>'
                      + "".join(figure(hdr_chart(res, per_target, c, m, n)) for m, n in LATENCIES) + "</div>")
    return (f'<div class="tabs" data-tabs><div class="tabbar"><span class="tablabel">stage:</span>{"".join(tabs)}</div>'
            f'{"".join(panels)}</div>') if cs else '<p class="muted">no stage to show</p>'


def _metric_tabs(res: dict, anchor: str, per_metric: dict, per_target: dict[str, dict[int, Slice]]) -> str:
    """The crossover tables: one tab per metric."""
    mtabs, mpanels = [], []
    for i, (name, m) in enumerate(per_metric.items()):
        pid = f"{anchor}-tbl-{slug(name)}"
        mtabs.append(f'<button type="button" data-panel="{pid}" class="{"on" if i == 0 else ""}">'
                     f'{escape(m["label"])}</button>')
        mpanels.append(f'<div class="tabpanel" id="{pid}"{"" if i == 0 else " hidden"}>'
                       f'{comparison_table(res, per_metric, name, per_target)}</div>')
    return (f'<div class="tabs" data-tabs><div class="tabbar">{"".join(mtabs)}</div>{"".join(mpanels)}</div>'
            if per_metric else '<p class="muted">no concurrency measured by both targets</p>')


def workload_section(res: dict, wl: str, per_target: dict[str, dict[int, Slice]], server: str = "",
                     view=None) -> Section:
    """The section of workload ``wl`` ("all" for the stages of several workloads pooled); ``server``: its
    "What the server ran" part (report/serverview.py), placed before the stage details; ``view``: the run's
    ServerView (the running batch at the switches of three or more configurations)."""
    if wl in (res.get("configs") or {}):
        return configs_section(res, wl, per_target, server, view)
    per_metric = res["workloads"][wl]
    a = per_metric.get(PRIMARY, {}).get("analysis")
    anchor = "wl-" + slug(wl)
    cov = (res.get("coverage") or {}).get(wl, {})
    kind = kind_of(per_metric.get(PRIMARY))
    thr, dlt, charts, tail = _charts_and_tail(res, wl, per_target, a, anchor, server)
    recs = _recs(per_metric)
    if PRIMARY in per_metric:
        lead = escape(capitalised(without_metric(per_metric[PRIMARY]["recommendation"])))
    else:  # never compared (or not for this metric): say so, never "no difference"
        lead = escape(capitalised(without_metric(cov.get("recommendation") or "not compared: no concurrency has "
                                                 "output throughput measured by both targets.")))
    html = fragment("workload.html").format(
        anchor=anchor, title=escape("all workloads together" if wl == "all" else wl), chip=chip(kind), lead=lead,
        truth=_truth_html(per_metric.get(PRIMARY, {})), throughput=figure(thr), delta=figure(dlt),
        matrix=verdict_matrix(res, per_metric) if per_metric else "",
        table=_metric_tabs(res, anchor, per_metric, per_target), recs=recs, tail=tail)
    return Section(f'<a href="#{anchor}">{escape(wl)} {chip(kind)}</a>', html, charts)


def _recs(per_metric: dict) -> str:
    """Every metric's recommendation of the (reference, first candidate) pair, as list items."""
    return "".join(
        f'<li>{chip(kind_of(m))} <b>{escape(m["label"])}</b>: {escape(without_metric(m["recommendation"]))}</li>'
        for m in per_metric.values())


def _charts_and_tail(res: dict, wl: str, per_target: dict[str, dict[int, Slice]], a: dict | None, anchor: str,
                     server: str) -> tuple:
    """What every workload section has, with two configurations or more: the throughput and Δ charts, every
    chart that becomes a PNG, and the section's tail (latency and acceptance charts, HDR, server, stages)."""
    thr = throughput_chart(res, wl, per_target, a)
    dlt = delta_chart(res, a)
    ttft = latency_chart(res, per_target, "ttft", "TTFT")
    itl = latency_chart(res, per_target, "itl", "ITL")
    acc = acceptance_chart(res, per_target)
    tail = fragment("workload-tail.html").format(
        ttft=figure(ttft, width=400, height=290), itl=figure(itl, width=400, height=290),
        acceptance=figure(acc, width=400, height=290), hdr=_hdr_tabs(res, anchor, per_target, a),
        server=server, stages=stage_table(res, per_target))
    return thr, dlt, [thr, dlt, ttft, itl, acc], tail


def configs_section(res: dict, wl: str, per_target: dict[str, dict[int, Slice]], server: str = "",
                    view=None) -> Section:
    """The section of a workload measured on three or more configurations: every configuration's throughput
    and the envelope with the best-config band under it, the policy of every metric, then the reference
    against the first candidate as a two-target run has it, and the per-stage figures of all of them."""
    per_metric = res["workloads"].get(wl, {})
    a = per_metric.get(PRIMARY, {}).get("analysis")
    anchor = "wl-" + slug(wl)
    colours = colours_of(res)
    r = res["configs"][wl].get(PRIMARY)
    kind = configs_kind(r)
    thr, dlt, charts, tail = _charts_and_tail(res, wl, per_target, a, anchor, server)
    sentence = (res.get("policy") or {}).get(wl, {}).get(PRIMARY)
    lead = escape(capitalised(without_metric(sentence)) if sentence else
                  "Output throughput was not compared over the configurations.")
    recs = _recs(per_metric)
    html = fragment("workload-configs.html").format(
        anchor=anchor, title=escape("all workloads together" if wl == "all" else wl), chip=chip(kind), lead=lead,
        truth=_truth_html(per_metric.get(PRIMARY, {})),
        throughput=figure(thr, after=band(res, wl, thr, colours)), policies=policy_list(res, wl),
        excluded=excluded_html(res, wl, per_target, colours), tabs=policy_tabs(res, wl, anchor, view, colours),
        pair_title=escape(f"The reference against the first candidate: {res['spec']} vs {res['baseline']}"),
        delta=figure(dlt), matrix=verdict_matrix(res, per_metric) if per_metric else "",
        table=_metric_tabs(res, anchor, per_metric, per_target) if per_metric else
        f'<p class="muted">{escape(res["baseline"])} and {escape(res["spec"])} have no concurrency measured by both</p>',
        recs=recs, tail=tail)
    return Section(f'<a href="#{anchor}">{escape(wl)} {chip(kind)}</a>', html, charts)

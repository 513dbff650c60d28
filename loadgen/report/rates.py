"""An open loop's parts of the report page (loadgen/report/page.py), against the offered rate.

In: a results folder whose stages are open-loop (each has ``rate`` and ``open_loop``), its run
document and its rate analysis (a :class:`loadgen.analysis.rates.RateAnalysis`, as
loadgen.analysis.answer.load reads or makes it). Out: the page (:func:`build`: the summary card
``summary-offered.html``, the flags, one ``rates-workload.html`` section per workload, the run card) and
``plots/WORKLOAD-rates.png`` (+ ``WORKLOAD-capacity.png`` with SLOs).

Per workload the page shows, against the offered rate (log x): TTFT from plan (p50, p99), TPOT
p50 and E2E from plan p99 (log y), one line per target in the palette's colours, saturated and
lag-flagged stages ringed, each confirmed crossover as a vertical line with its interval
shaded; achieved (ended/s) against offered with the identity line; a table per rate and
target; the saturation sentences; every metric's sentence; the capacity under the SLOs, per
target with its interval, and the worst SLO margin against the rate with its band.
The summary card says what was offered (arrival process, in-flight cap, dispatch-lag bound) and
that the latencies are from the planned send. No concurrency ("C=") wording: the axis is a rate.
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path

from loadgen.analysis.results import level
from loadgen.analysis.compare import configurations
from loadgen.analysis.rates import RateAnalysis, RatePoint, fmt_rate
from loadgen.report.cards import run_card
from loadgen.report.charts import (CROSS_COLOUR, FAIL_COLOUR, TIE_COLOUR, WARN_COLOUR, Chart, Series, Span, VLine,
                                   legend_items, svg)
from loadgen.report.charts import png as png_file
from loadgen.report.figures import write_page
from loadgen.report.htmltables import chip
from loadgen.report.page import Page, Section, assemble
from loadgen.report.palette import palette, swatch
from loadgen.report.parts import stage_parts
from loadgen.report.templates import fragment
from loadgen.report.words import analysis_kind, capitalised, slug, without_metric

__all__ = ["build", "render"]

RATE_AXIS = "offered rate, requests/s (log scale)"
IDENTITY_COLOUR = "#98a2b3"


def _lag_reasons(doc: dict) -> dict[tuple[str, float], str]:
    """(target, rate) → why its dispatch lag was flagged, in the stage's own words (its client reasons)."""
    out = {}
    for s in doc.get("stages", []):
        ol = s.get("open_loop") or {}
        if not ol.get("lag_flagged") or s.get("rate") is None:
            continue
        said = [r for r in (s.get("client") or {}).get("reasons") or [] if "dispatch lag" in r]
        p99 = (ol.get("dispatch_lag_ms") or {}).get("p99")
        out[(s["target"], float(s["rate"]))] = said[0] if said else (
            f"dispatch lag p99 {p99 or 0:.1f} ms > {ol.get('max_lag_ms', 0):g} ms: the schedule was not kept")
    return out


def _rate(r: float) -> str:
    return f"{fmt_rate(r)} req/s"


# --------------------------------------------------------------------------- charts


def _tip(p: RatePoint, text: str, lag: dict) -> str:
    tip = f"{p.target} at {_rate(p.rate)}: {text}"
    if p.saturated:
        tip += f"\n⚠ saturated: {p.why}"
    if p.lag_flagged:
        tip += "\n⚠ " + lag.get((p.target, p.rate), "dispatch lag flagged")
    return tip


def _flag(p: RatePoint) -> str:
    return "fail" if p.saturated else "warn" if p.lag_flagged else ""


def _by_target(points: list[RatePoint], labels: list[str]) -> dict[str, list[RatePoint]]:
    out: dict[str, list[RatePoint]] = {}
    for p in sorted(points, key=lambda p: p.rate):
        out.setdefault(p.target, []).append(p)
    return {t: out[t] for t in labels if t in out}


def _marks(res: RateAnalysis, wl: str, metrics: list[tuple[str, str]]) -> tuple[list[Span], list[VLine]]:
    """Every candidate's confirmed crossovers of ``metrics`` ((name, short label)) as lines with their
    intervals shaded, and its unconfirmed flips as grey lines."""
    spans, lines = [], []
    many = len(res.candidates) > 1
    pct = f"{level(res.confidence)} %"
    for cand, per in res.metrics.get(wl, {}).items():
        for name, short in metrics:
            m = per.get(name)
            if m is None:
                continue
            who = f"{cand} " if many else ""
            for x in m.analysis.crossovers:
                text = f"{who}{short} ≈{fmt_rate(x.estimate)}/s"
                spans.append(Span(x.ci_low, x.ci_high, CROSS_COLOUR,
                                  f"{m.label}: crossover at {_rate(x.estimate)}, {pct} interval "
                                  f"{fmt_rate(x.ci_low)}–{fmt_rate(x.ci_high)}"))
                lines.append(VLine(x.estimate, CROSS_COLOUR, text))
            for x in m.analysis.candidates:
                lines.append(VLine(x.estimate, TIE_COLOUR, f"{who}{short} ≈{fmt_rate(x.estimate)}/s?"))
    return spans, lines


def latency_chart(res: RateAnalysis, wl: str, title: str, keys: list[tuple[str, str, bool]], lag: dict,
                  colours: dict[str, str]) -> Chart:
    """One latency against the offered rate: ``keys`` (figure key, short label, dashed) per target."""
    series = []
    for target, pts in _by_target(res.points.get(wl, []), list(colours)).items():
        for key, short, dash in keys:
            ys = [p.figures.get(key) for p in pts]
            tips = [_tip(p, f"{title} {short} {y:.2f} ms" if y is not None else "no samples", lag)
                    for p, y in zip(pts, ys)]
            name = f"{target} {short}" if len(keys) > 1 else target
            series.append(Series(name, [p.rate for p in pts], ys, colours[target], dash=dash, tips=tips,
                                 flags=[_flag(p) for p in pts]))
    spans, lines = _marks(res, wl, [(k, s) for k, s, _ in keys])
    bits = (["solid: p50, dashed: p99"] if len(keys) > 1 else []) + (["from the planned send"]
                                                                     if "planned" in keys[0][0] else [])
    return Chart(f"{title} {' and '.join(s for _, s, _ in keys)}", series, xlabel=RATE_AXIS, ylabel="ms (log scale)",
                 ylog=True, spans=spans, vlines=lines, note="; ".join(bits), empty=f"no {title} samples")


def achieved_chart(res: RateAnalysis, wl: str, lag: dict, colours: dict[str, str]) -> Chart:
    """Requests ended per second of the window against the rate offered, with the identity line: a target
    that keeps up sits on it, a saturated one falls below."""
    series = []
    rates = sorted({p.rate for p in res.points.get(wl, [])})
    for target, pts in _by_target(res.points.get(wl, []), list(colours)).items():
        ys = [p.ended_per_s for p in pts]
        tips = [_tip(p, f"{y:.2f} req/s ended in the window (planned in it: {p.planned_per_s or 0:.2f})"
                     if y is not None else "not measured", lag) for p, y in zip(pts, ys)]
        series.append(Series(target, [p.rate for p in pts], ys, colours[target], tips=tips,
                             flags=[_flag(p) for p in pts]))
    if rates:
        series.append(Series("achieved = offered", rates, list(rates), IDENTITY_COLOUR, dash=True, marker=False,
                             width=1.4))
    return Chart("Achieved against offered", series, xlabel=RATE_AXIS, ylabel="requests ended /s (log scale)",
                 ylog=True, note="on the dashed line: the target kept up; below it: it falls behind",
                 empty="no stage measured")


def margin_chart(res: RateAnalysis, wl: str, colours: dict[str, str]) -> Chart:
    """Each target's worst SLO margin, log(value / limit), against the rate, with its band; capacity where it
    crosses zero (a line in the target's colour, its interval shaded)."""
    series, spans, lines = [], [], []
    for target, cap in res.capacity.get(wl, {}).items():
        rows = sorted(cap.measured, key=lambda r: r.rate)
        col = colours.get(target, TIE_COLOUR)
        ys = [r.margin for r in rows]
        tips = [f"{target} at {_rate(r.rate)}: " + (
            "saturated: fails every SLO" if r.worst == "saturated" else
            f"worst {r.worst}, at {math.exp(r.margin) * 100:.0f} % of its limit "
            f"(band {math.exp(r.low) * 100:.0f}–{math.exp(r.high) * 100:.0f} %)") if r.margin is not None
            else f"{target} at {_rate(r.rate)}: {r.worst}" for r in rows]
        series.append(Series(target, [r.rate for r in rows], ys, col, tips=tips,
                             band=([r.low for r in rows], [r.high for r in rows])))
        if cap.estimate is not None:
            lines.append(VLine(cap.estimate, col, f"{target} ≈{fmt_rate(cap.estimate)}/s"))
            if cap.ci_low is not None and cap.ci_high is not None:
                spans.append(Span(cap.ci_low, cap.ci_high, col,
                                  f"{target}: capacity {fmt_rate(cap.ci_low)}–{fmt_rate(cap.ci_high)} req/s"))
    terms = " and ".join(s.text for s in res.slos)
    return Chart("Worst SLO margin against the rate", series, xlabel=RATE_AXIS,
                 ylabel="log(value / limit), worst SLO", hline=0.0, spans=spans, vlines=lines,
                 note=f"{terms}; below 0: every SLO met; bands: {level(res.confidence)} % bootstrap interval; "
                      "saturated stages fail every SLO (not drawn)", span_key="capacity interval",
                 empty="no stage with samples of every SLO")


def figure(chart: Chart, width: int = 560, height: int = 300) -> str:
    """The chart as a ``<figure>``: caption, note, a legend whose rings say saturated and lag-flagged (the
    closed-loop figure's say client-bound and failures), the inline SVG."""
    dashed = ' stroke-dasharray="4 3"'
    legend = "".join(
        f'<span class="key"><svg width="22" height="10"><line x1="1" x2="21" y1="5" y2="5" stroke="{col}" '
        f'stroke-width="2.4"{dashed if dash else ""}/></svg>{escape(lbl)}</span>' for lbl, col, dash in legend_items(chart))
    if chart.spans:
        legend += (f'<span class="key"><span class="swatch" style="background:{chart.spans[0].color}"></span>'
                   f'{escape(chart.span_key)}</span>')
    flags = {f for s in chart.series for f in (s.flags or []) if f}
    for flag, colour, words in (("fail", FAIL_COLOUR, "saturated"), ("warn", WARN_COLOUR, "dispatch lag flagged")):
        if flag in flags:
            legend += f'<span class="key"><span class="ring" style="border-color:{colour}"></span>{words}</span>'
    note = f'<div class="note">{escape(chart.note)}</div>' if chart.note else ""
    return (f'<figure class="fig"><figcaption>{escape(chart.title)}</figcaption>{note}'
            f'<div class="legend">{legend}</div>{svg(chart, width, height)}</figure>')


# --------------------------------------------------------------------------- tables and words


def _num(v, nd: int = 1) -> str:
    return "–" if v is None else f"{v:.{nd}f}"


def point_table(res: RateAnalysis, wl: str, lag: dict, colours: dict[str, str]) -> str:
    """One row per rate and target: offered and achieved, latencies from plan, goodput, dispatch lag, flags
    (their reasons on hover)."""
    head = ["target", "offered /s", "planned /s", "ended /s", "tok/s", "TTFT·plan p50", "TTFT·plan p99", "TPOT p50",
            "TPOT p99", "ITL p50", "ITL p99", "E2E·plan p50", "E2E·plan p99", "goodput /s", "lag p99", "running",
            "server", "schedule"]
    rows = []
    for target, pts in _by_target(res.points.get(wl, []), list(colours)).items():
        for p in pts:
            f = p.figures
            server = (f'<span class="badge b-fail" data-flag="saturated" title="{escape(p.why)}">saturated</span>'
                      if p.saturated else "keeps up")
            why = lag.get((p.target, p.rate), "dispatch lag flagged")
            sched = (f'<span class="badge b-warn" data-flag="lag" title="{escape(why)}">lag flagged</span>'
                     if p.lag_flagged else "kept")
            cells = [swatch(colours[target], target), fmt_rate(p.rate), _num(p.planned_per_s, 2),
                     _num(p.ended_per_s, 2), _num(p.output_tokens_per_s), _num(f.get("ttft_planned_p50")),
                     _num(f.get("ttft_planned_p99")), _num(f.get("tpot_p50"), 2), _num(f.get("tpot_p99"), 2),
                     _num(f.get("itl_p50"), 2), _num(f.get("itl_p99"), 2), _num(f.get("e2e_planned_p50"), 0),
                     _num(f.get("e2e_planned_p99"), 0), _num(p.goodput_per_s, 2), _num(p.lag_p99_ms, 2),
                     _num(p.running_mean), server, sched]
            cls = ' class="rowfail"' if p.saturated else ""
            rows.append(f'<tr{cls} data-target="{escape(target)}" data-rate="{p.rate:g}">'
                        + "".join(f"<td>{v}</td>" for v in cells) + "</tr>")
    return (f'<table class="stages rates"><thead><tr>{"".join(f"<th>{h}</th>" for h in head)}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table><div class="unit">latencies in ms, TTFT and E2E from the planned '
            'send; planned /s and ended /s: requests planned and ended inside the window per second of it; '
            'running: the server\'s mean running batch; hover a flag for its reason</div>')


def _truth(marks) -> str:
    return "".join(f'<div class="muted">{escape(k.mark)} {escape(k.words)}</div>' for k in marks)


def metric_items(res: RateAnalysis, wl: str) -> tuple[str, str]:
    """(list items: each candidate's metric sentences with their chips and the simulator's truth, a line
    saying at which rates they were compared and why others were not)."""
    items, ladders = [], set()
    many = len(res.candidates) > 1
    for cand, per in res.metrics.get(wl, {}).items():
        for name, m in per.items():
            ladders.update(float(r) for r in m.analysis.ladder or [])
            who = f" <small>{escape(cand)} vs {escape(res.reference)}</small>" if many else ""
            items.append(f'<li>{chip(analysis_kind(m.analysis))} <b>{escape(m.label)}</b>{who}: '
                         f'{escape(capitalised(without_metric(m.sentence)))}{_truth(m.simulator_truth)}</li>')
    for x, sentences in res.adaptive_sentences.get(wl, {}).items():
        for name, t in sentences.items():
            truth = _truth(k for k in res.configs[wl][name].simulator_truth if k.label == x)
            items.append(f'<li><b>{escape(x)}</b> <small>adapts on its own</small>: '
                         f'{escape(t.removeprefix(x + " "))}{truth}</li>')
    if not items:
        items.append('<li class="muted">No metric was compared: no rate was measured by both targets with a whole '
                     'window and a kept schedule.</li>')
    measured = sorted({p.rate for p in res.points.get(wl, [])})
    left = [r for r in measured if r not in ladders]
    line = ""
    if ladders:
        line = f"Compared at {', '.join(fmt_rate(r) for r in sorted(ladders))} req/s"
        if left:
            line += (f"; not at {', '.join(fmt_rate(r) for r in left)} req/s (a stage there had its dispatch lag "
                     "flagged, an incomplete window, or no partner at that rate)")
        line = f'<p class="muted">{escape(line)}.</p>'
    return "".join(items), line


def capacity_html(res: RateAnalysis, wl: str, colours: dict[str, str], chart: Chart | None) -> str:
    if not res.slos:
        return ('<p class="muted">No SLOs were given: <code>loadgen crossover --rate … --capacity '
                'ttft_p99=800ms,tpot_p50=40ms</code> finds each target\'s highest rate meeting them.</p>')
    sentence = res.capacity_sentence.get(wl, "")
    rows = []
    for target, c in res.capacity.get(wl, {}).items():
        est = "–" if c.estimate is None else _rate(c.estimate)
        lo, hi = c.ci_low, c.ci_high
        k = c.simulator_truth
        iv = (f"{fmt_rate(lo)}–{fmt_rate(hi)}" if lo is not None and hi is not None else
              f"above {fmt_rate(lo)}" if lo is not None else f"below {fmt_rate(hi)}" if hi is not None else "–")
        rows.append(f'<tr data-target="{escape(target)}"><td>{swatch(colours.get(target, TIE_COLOUR), target)}</td>'
                    f'<td>{est}</td><td>{escape(iv)}</td><td style="text-align:left;white-space:normal">{escape(c.words)}'
                    + (f' <span class="muted">[{escape(k.mark)} {escape(k.words)}]</span>' if k else "") + "</td></tr>")
    terms = " and ".join(s.text for s in res.slos)
    table = (f'<table class="stages capacity"><thead><tr><th>target</th><th>capacity</th>'
             f'<th>{level(res.confidence)} % interval, req/s</th><th>in words</th></tr></thead>'
             f'<tbody>{"".join(rows)}</tbody></table>') if rows else ""
    return (f'<p class="lead capacity-sentence">{escape(capitalised(sentence))}</p>'
            f'<p class="muted">SLOs: {escape(terms)} (TTFT and E2E from the planned send); stages with a flagged '
            f'dispatch lag are left out.</p><div class="grid2"><div>{table}</div>{figure(chart) if chart else ""}</div>')


def _lead(res: RateAnalysis, wl: str) -> str:
    cap = res.capacity_sentence.get(wl)
    if cap:
        return capitalised(cap)
    sat = [s.words for s in res.saturation.get(wl, {}).values()]
    return capitalised("; ".join(sat)) + "." if sat else "No stage of this workload was measured."


# --------------------------------------------------------------------------- the page


def workload_section(res: RateAnalysis, wl: str, lag: dict, colours: dict[str, str], stages: list[dict] = (),
                     adaptive: list[str] = ()) -> Section:
    """One workload's section; ``stages``: the run's, whose parts that read only stages (report/parts.py: the
    speculation timeline, a switching flag's evidence and an adaptive configuration's seconds; sessions) close the
    section when they have data."""
    anchor = "wl-" + slug(wl)
    ttft = latency_chart(res, wl, "TTFT from plan", [("ttft_planned_p50", "p50", False),
                                                     ("ttft_planned_p99", "p99", True)], lag, colours)
    tpot = latency_chart(res, wl, "TPOT", [("tpot_p50", "p50", False)], lag, colours)
    e2e = latency_chart(res, wl, "E2E from plan", [("e2e_planned_p99", "p99", False)], lag, colours)
    ach = achieved_chart(res, wl, lag, colours)
    margin = margin_chart(res, wl, colours) if res.slos else None
    sat = "".join(f'<li data-target="{escape(t)}">{swatch(colours.get(t, TIE_COLOUR))} {escape(capitalised(s.words))}'
                  f'.</li>' for t, s in res.saturation.get(wl, {}).items())
    metrics, compared = metric_items(res, wl)
    html = fragment("rates-workload.html").format(
        anchor=anchor, title=escape("all workloads together" if wl == "all" else wl), lead=escape(_lead(res, wl)),
        ttft=figure(ttft), tpot=figure(tpot), e2e=figure(e2e), achieved=figure(ach),
        table=point_table(res, wl, lag, colours), saturation=sat, metrics=metrics, compared=compared,
        capacity=capacity_html(res, wl, colours, margin),
        parts=stage_parts([d for d in stages if wl == "all" or wl in (d.get("workloads") or {})], adaptive))
    return Section(f'<a href="#{anchor}">{escape(wl)}</a>', html, [ttft, tpot, e2e, ach] + ([margin] if margin else []))


def offered_facts(doc: dict) -> list[tuple[str, str]]:
    """What the run offered, from run.json's ``run.open_loop`` (else its first open-loop stage)."""
    run = doc.get("run", {})
    ol = run.get("open_loop") or {}
    first = next((s.get("open_loop") for s in doc.get("stages", []) if s.get("open_loop")), {}) or {}
    arrival = ol.get("arrival") or first.get("arrival") or "unknown"
    cap = ol.get("max_in_flight", first.get("max_in_flight"))
    bound = ol.get("max_dispatch_lag_ms", first.get("max_lag_ms"))
    rates = ol.get("ladder") or sorted({float(s["rate"]) for s in doc.get("stages", []) if s.get("rate") is not None})
    facts = [("arrival process", str(arrival)),
             ("rates offered", ", ".join(fmt_rate(float(r)) for r in rates) + " req/s"),
             ("in-flight cap", f"{cap} requests (a send finding them all busy waits: its wait is dispatch lag)"
              if cap else "none: every request is sent at its planned time"),
             ("dispatch-lag bound", f"a stage whose dispatch lag p99 exceeds {bound:g} ms is flagged"
              if isinstance(bound, (int, float)) else "not recorded")]
    if ol.get("trace"):
        facts.insert(1, ("trace", str(ol["trace"])))
    return facts


def flags_card(res: RateAnalysis, doc: dict, lag: dict, dropped: list[str]) -> str:
    """The stages whose figures are not the load planned: lag-flagged, saturated, client-bound, with failures."""
    items = []
    for s in doc.get("stages", []):
        if s.get("rate") is None:
            continue
        where = f"{s['target']} at {_rate(float(s['rate']))}"
        if (s.get("open_loop") or {}).get("lag_flagged"):
            items.append(("f-client", where, lag.get((s["target"], float(s["rate"])), "dispatch lag flagged")))
        other = [r for r in (s.get("client") or {}).get("reasons") or [] if "dispatch lag" not in r]
        if (s.get("client") or {}).get("client_bound") and other:
            items.append(("f-client", where, "client-bound: " + "; ".join(other)))
        if (s.get("requests") or {}).get("failed"):
            items.append(("f-fail", where, f"{s['requests']['failed']} request(s) failed"))
    for wl, ps in res.points.items():
        items += [("f-fail", f"{wl} · {p.target} at {_rate(p.rate)}", f"saturated: {p.why}") for p in ps if p.saturated]
    items += [("f-fail", "results file", d) for d in dropped]
    if not items:
        return ('<section class="card ok"><b>No flags:</b> every stage kept its schedule, no server saturated, '
                'no request failed.</section>')
    lis = "".join(f'<li class="{k}"><b>{escape(w)}</b>: {escape(t)}</li>' for k, w, t in items)
    return (f'<section class="card flags"><h2>Flags <small>{len(items)} item(s)</small></h2>'
            f'<p>Lag-flagged stages are left out of the comparisons and the capacity: the client did not send at the '
            f'planned times, so the load offered was not the one planned.</p>'
            f'<details{" open" if len(items) <= 8 else ""}><summary>{len(items)} flagged item(s)</summary>'
            f'<ul>{lis}</ul></details></section>')


def build(doc: dict, res: RateAnalysis, dropped: list[str] | None = None, title: str = "") -> Page:
    run = doc.get("run", {})
    labels = res.labels
    colours = palette(labels)
    lag = _lag_reasons(doc)
    wls = [w for w in res.points if w != "all"] + (["all"] if "all" in res.points else [])
    adaptive = configurations(doc)[1]
    sections = {wl: workload_section(res, wl, lag, colours, doc.get("stages") or [], adaptive) for wl in wls}
    tops = [(wl, _lead(res, wl)) for wl in wls]
    top = escape(tops[0][1]) if len(tops) == 1 else "Open-loop run of " + escape(", ".join(wls)) + "."
    lines = ("<ul>" + "".join(f"<li><b>{escape(wl)}</b>: {escape(t)}</li>" for wl, t in tops) + "</ul>"
             if len(tops) > 1 else "")
    who = f"{labels[0]} (reference) vs {', '.join(labels[1:])}" if len(labels) > 1 else labels[0]
    facts = " · ".join(x for x in (who, "workloads " + ", ".join(wls),
                                   f"simulator {(run.get('simulator') or {}).get('profile', '')}".strip()
                                   if run.get("simulator") else "") if x)
    summary = fragment("summary-offered.html").format(
        conf=f"{level(res.confidence)}", top=top, lines=lines,
        offered="".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in offered_facts(doc)),
        planned=escape("Latencies are from each request's planned send (TTFT and E2E from plan): a request the "
                       "client sent late, or a server's queue, counts against the server as a user would see it; "
                       "dispatch lag (sent − planned) is its own figure and flag."))
    return assemble(doc, title=title or "loadgen report (open loop)", facts=facts, summary=summary,
                    flags=flags_card(res, doc, lag, dropped or []), sections=sections,
                    meta=run_card(doc, labels, adaptive, res.confidence, wls))


def write_pngs(out: Path, charts: dict[str, list[Chart]]) -> list[Path]:
    """Per workload: the four rate charts in one PNG, the margin chart in another (when there are SLOs)."""
    paths = []
    for wl, cs in charts.items():
        paths.append(png_file(cs[:4], out / "plots" / f"{slug(wl)}-rates.png", title=f"{wl}: against the offered rate",
                         ncols=2))
        if len(cs) > 4:
            paths.append(png_file(cs[4:], out / "plots" / f"{slug(wl)}-capacity.png", title=f"{wl}: capacity under SLOs"))
    return paths


def render(out: Path, doc: dict, res: RateAnalysis | None = None, dropped: list[str] | None = None, *,
           png: bool = True, title: str = "", confidence: float | None = None) -> Path:
    """Write ``out/report.html`` of an open-loop run (``res``: its analysis; None: read or made) and, unless
    ``png`` is False, its PNGs; return the page's path."""
    if res is None:
        from loadgen.analysis.answer import load

        res = load(out, doc, confidence=confidence).result
    page = build(doc, res, dropped, title or f"loadgen report: {out.resolve().name} (open loop)")
    return write_page(out, page.html, page.charts, png, pngs=write_pngs)

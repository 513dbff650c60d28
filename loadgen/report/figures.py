"""The report's charts: slices and verdicts become :class:`~loadgen.report.charts.Chart` descriptions.

In: the run's analysis (:class:`~loadgen.analysis.compare.RunAnalysis`, ``ra``), one workload's
slices (target → C → Slice) and its deciding metric's :class:`~loadgen.analysis.crossover.MetricAnalysis`.
Out: the charts of a workload section (the deciding metric — output throughput, or goodput with
SLOs — with its intervals, its Δ, TTFT, ITL, acceptance, HDR percentile curves), :func:`figure` (a
chart as the page's ``<figure>``: caption, note, legend, inline SVG; nothing for a chart with no
data, :meth:`Chart.has_data`) and :func:`write_pngs` (the throughput and latency PNGs). charts.py
draws; this module decides what is drawn.
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path

from loadgen import redact
from loadgen.analysis.results import level
from loadgen.analysis import stats
from loadgen.analysis.compare import RunAnalysis
from loadgen.analysis.configs import ConfigsResult
from loadgen.analysis.crossover import MetricAnalysis
from loadgen.histograms import Hist
from loadgen.metrics import BY_NAME as HIST_METRICS
from loadgen.report.charts import (CROSS_COLOUR, TIE_COLOUR, Chart, Series, Span, VLine,
                                   legend_items, svg)
from loadgen.report.inputs import PRIMARY, Slice
from loadgen.report.palette import colours_of
from loadgen.report.words import capitalised, fmt_c, slug, winner


def mean_interval(xs: list[float], confidence: float) -> tuple[float, float] | None:
    """Interval for the mean of consecutive time bins: Student t, widened for lag-1 autocorrelation."""
    n = len(xs)
    if n < 3:
        return None
    m = stats.mean(xs)
    var = math.fsum((x - m) ** 2 for x in xs) / (n - 1)
    rho = min(max(stats.lag1_autocorrelation(xs), 0.0), 0.8)
    se = math.sqrt(var / n * (1 + rho) / (1 - rho))
    t = stats.t_ppf(0.5 + confidence / 2, n - 1)
    return max(0.0, m - t * se), m + t * se


def percentile_curve(h: Hist, divisor: float, max_nines: float = 5.0) -> tuple[list[float], list[float]]:
    """(x, value) with x = log10(1 / (1 - p)): 0 = p0, 1 = p90, 2 = p99 … up to what the count supports."""
    hh = h.h
    total = hh.get_total_count()
    if not total:
        return [], []
    nz = [(i, c) for i, c in enumerate(list(hh.counts)) if c]
    top = min(max_nines, math.log10(total)) if total > 1 else 0.0
    grid = [k * 0.05 for k in range(int(top / 0.05) + 1)]
    if not grid or grid[-1] < top - 1e-9:
        grid.append(top)
    targets = [max(1, math.ceil((1.0 - 10 ** -x) * total - 1e-9)) for x in grid]
    d = h.scale * divisor
    xs, ys = [], []
    run, j = 0, 0
    for i, c in nz:
        run += c
        while j < len(targets) and run >= targets[j]:
            xs.append(grid[j])
            ys.append(hh.get_highest_equivalent_value(hh.get_value_from_index(i)) / d)
            j += 1
        if j == len(targets):
            break
    return xs, ys


def concurrencies(per_target: dict[str, dict[int, Slice]]) -> list[int]:
    """Every concurrency either target measured, in order."""
    return sorted({c for t in per_target.values() for c in t})


def _crossover_marks(a: MetricAnalysis | None) -> tuple[list[Span], list[VLine]]:
    spans, lines = [], []
    if a is None:
        return spans, lines
    pct = f"{level(a.confidence)} %"
    for x in a.crossovers:
        label = f"C≈{fmt_c(x.estimate)}"
        spans.append(Span(x.ci_low, x.ci_high, CROSS_COLOUR,
                          f"crossover {label}, {pct} interval {fmt_c(x.ci_low)}–{fmt_c(x.ci_high)}"))
        lines.append(VLine(x.estimate, CROSS_COLOUR, label))
    for x in a.candidates:
        lines.append(VLine(x.estimate, TIE_COLOUR, f"C≈{fmt_c(x.estimate)}?"))
    return spans, lines


def _tip(sl: Slice, text: str) -> str:
    extra = "".join(f"\n⚠ {t}" for _, t in sl.flags)
    return f"{sl.target} C={sl.c}: {text}{extra}"


def throughput_chart(ra: RunAnalysis, wl: str, per_target: dict[str, dict[int, Slice]], a: MetricAnalysis | None,
                     metric: str = PRIMARY, label: str = "output throughput", unit: str = "tok/s") -> Chart:
    """Every configuration's ``metric`` (the deciding one: output throughput, or goodput) with its intervals; with
    two, the crossover marked; with three or more (``ra.configs``), the envelope (best of the non-adaptive ones at
    each C) and the switches."""
    conf = ra.confidence
    series = []
    for name, color in colours_of(ra).items():
        st = per_target.get(name, {})
        cs = sorted(st)
        bins = [st[c].bins(metric) for c in cs]
        ys = [_stage_value(st[c], metric, b) for c, b in zip(cs, bins)]
        ivs = [mean_interval(b, conf) for b in bins]
        band = ([iv[0] if iv else None for iv in ivs], [iv[1] if iv else None for iv in ivs])
        nd = 1 if metric == PRIMARY else 3
        tips = [_tip(st[c], (f"{y:.{nd}f} {unit}" if y is not None else "no figure")
                     + (f" ({iv[0]:.{nd - 1}f}–{iv[1]:.{nd - 1}f})" if iv else ""))
                for c, y, iv in zip(cs, ys, ivs)]
        series.append(Series(name, cs, ys, color, band=band, tips=tips, flags=[st[c].severity for c in cs]))
    r = ra.configs.get(wl, {}).get(metric)
    if r is not None:
        return _envelope_chart(r, series, label, "tokens/s" if metric == PRIMARY else unit)
    spans, lines = _crossover_marks(a)
    return Chart(capitalised(label), series, ylabel="tokens/s" if metric == PRIMARY else unit, spans=spans,
                 vlines=lines, yzero=True,
                 note=f"bands: {conf * 100:g} % interval of each stage's mean over its time bins; "
                      "purple: crossover and its interval")


def _stage_value(sl: Slice, metric: str, bins: list[float]) -> float | None:
    """A stage's figure of ``metric``: its summary's (over the whole window), else the mean of its time bins."""
    v = sl.get(metric)
    if v is None and bins:
        v = stats.mean(bins)
    return v


ENVELOPE_COLOUR = "#c3c9d3"
"""The envelope: a wide pale line under the configurations' own, so the one on top of it at each C shows."""


def _envelope_chart(r: ConfigsResult, series: list[Series], label: str = "output throughput",
                    ylabel: str = "tokens/s") -> Chart:
    """The chart of three or more configurations: their lines, the envelope under them, the switches."""
    conf = r.confidence
    at = [x for x in r.at if x.envelope is not None]
    env = Series("envelope (best at each C)", [x.concurrency for x in at], [x.envelope for x in at],
                 ENVELOPE_COLOUR, marker=False, width=7.0,
                 tips=None)
    spans, lines = [], []
    for w in r.switches:
        words = f"{w.from_label} → {w.to_label}"
        if w.confirmed and w.estimate is not None:
            spans.append(Span(w.ci_low, w.ci_high, CROSS_COLOUR,
                              f"switch {words} at C≈{fmt_c(w.estimate)}, {conf * 100:g} % joint interval "
                              f"{fmt_c(w.ci_low)}–{fmt_c(w.ci_high)}"))
            lines.append(VLine(w.estimate, CROSS_COLOUR, f"C≈{fmt_c(w.estimate)}"))
        else:
            spans.append(Span(w.ci_low, w.ci_high, TIE_COLOUR,
                              f"switch {words} somewhere between the measured C={w.low_c} and {w.high_c}"))
    adaptive = [x for x in r.adaptive if x in {s.label for s in series}]
    for s in series:
        s.dash = s.label in adaptive
    note = (f"bands: {conf * 100:g} % interval of each stage's mean over its time bins; pale: the envelope, the "
            "best configuration's mean at each C; purple: a switch and its joint interval, grey: a switch "
            "somewhere between two measured C")
    if adaptive:
        note += f"; dashed: {', '.join(adaptive)} (adapts on its own, not on the envelope)"
    return Chart(f"{capitalised(label)}, every configuration", [env, *series],
                 ylabel=ylabel, spans=spans,
                 vlines=lines, yzero=True, note=note, span_key="switch interval")


def delta_chart(a: MetricAnalysis | None, label: str = "output throughput") -> Chart:
    """Δ of ``label`` per compared stage with its interval (a chart with no data where nothing was compared)."""
    comps = [c for c in (a.comparisons if a else []) if c.delta is not None]
    if a is None or not comps:
        return Chart(f"Δ {label}, speculation vs baseline", [], empty="no stage compared")
    cs = [c.concurrency for c in comps]
    ys = [c.delta * 100 for c in comps]
    lo = [c.ci_low * 100 if c.ci_low is not None else None for c in comps]
    hi = [c.ci_high * 100 if c.ci_high is not None else None for c in comps]
    tips = [f"C={c.concurrency}: Δ {c.delta * 100:+.1f} %"
            + (f" [{c.ci_low * 100:+.1f}, {c.ci_high * 100:+.1f}]" if c.ci_low is not None and c.ci_high is not None
               else "")
            + f" → {winner(c, a.family_wise)}" for c in comps]
    spans, lines = _crossover_marks(a)
    s = Series("Δ % (spec − baseline) / baseline", cs, ys, "#334155", band=(lo, hi), tips=tips)
    return Chart(f"Δ {label}, speculation vs baseline", [s], ylabel="Δ %", ysuffix="%", hline=0.0, spans=spans,
                 vlines=lines, note=f"{level(a.confidence)} % interval per stage; above 0: speculation better"
                 if a.higher_is_better else f"{level(a.confidence)} % interval per stage; below 0: speculation better")


def latency_chart(ra: RunAnalysis, per_target: dict[str, dict[int, Slice]], metric: str, name: str) -> Chart:
    series = []
    for label, color in colours_of(ra).items():
        st = per_target.get(label, {})
        cs = sorted(st)
        for p, dash in (("p50", False), ("p99", True)):
            ys = [st[c].get(metric, p) for c in cs]
            tips = [_tip(st[c], f"{name} {p} {y:.2f} ms") if y is not None else "" for c, y in zip(cs, ys)]
            series.append(Series(f"{label} {p}", cs, ys, color, dash=dash, tips=tips,
                                 flags=[st[c].severity for c in cs]))
    return Chart(f"{name} p50 and p99", series, ylabel="ms (log scale)", ylog=True,
                 note="solid: p50, dashed: p99", empty=f"no {name} samples")


def acceptance_chart(ra: RunAnalysis, per_target: dict[str, dict[int, Slice]]) -> Chart:
    """Each candidate's accept length (where its server reports one), then every configuration's tokens per
    chunk, the candidates first and the reference last. With no drafts to show (no candidate's accept length,
    and no candidate streaming more than one token per chunk) it is a chart with no data: not shown."""
    series = []
    colours = colours_of(ra)
    order = [x for x in colours if x != ra.baseline] + [ra.baseline]
    if not _drafts(per_target, order[:-1]):
        return Chart("Accept length and tokens per chunk", [], empty="no drafts")
    measured = False
    for label in order[:-1]:
        spec = per_target.get(label, {})
        cs = sorted(spec)
        acc = [spec[c].get("accept_length", "mean") for c in cs]
        if not any(v is not None for v in acc):
            continue
        measured = True
        tips = [_tip(spec[c], f"accept length {v:.2f} tokens/verify step"
                     + (f", accept rate {spec[c].d['accept_rate'] * 100:.0f} %" if spec[c].d.get("accept_rate") else ""))
                if v is not None else "" for c, v in zip(cs, acc)]
        series.append(Series(f"{label} accept length", cs, acc, colours[label], tips=tips))
    for label in order:
        color = colours[label]
        st = per_target.get(label, {})
        xs = sorted(st)
        ys = [st[c].get("tokens_per_chunk", "mean") for c in xs]
        tips = [_tip(st[c], f"{v:.2f} tokens per chunk") if v is not None else "" for c, v in zip(xs, ys)]
        series.append(Series(f"{label} tokens/chunk", xs, ys, color, dash=True, tips=tips,
                             flags=[("warn" if st[c].d.get("token_counts") == "approximate" else "") for c in xs]))
    note = "accept length: server-reported tokens per verify step (mean); dashed: tokens per streamed chunk (mean)"
    if not measured:
        note = "the server reported no accept length; dashed: tokens per streamed chunk (mean)"
    return Chart("Accept length and tokens per chunk", series, ylabel="tokens", yzero=True, note=note)


def _drafts(per_target: dict[str, dict[int, Slice]], candidates: list[str]) -> bool:
    """Whether a candidate shows drafts: a server-reported accept length, or chunks of more than one token."""
    for label in candidates:
        for sl in per_target.get(label, {}).values():
            if sl.get("accept_length", "mean") is not None or (sl.get("tokens_per_chunk", "mean") or 1.0) > 1.0:
                return True
    return False


NINES = [(0.0, "p0"), (0.30103, "p50"), (1.0, "p90"), (2.0, "p99"), (3.0, "p99.9"), (4.0, "p99.99"), (5.0, "p99.999")]


def hdr_chart(ra: RunAnalysis, per_target: dict[str, dict[int, Slice]], c: int, metric: str, name: str) -> Chart:
    series = []
    m = HIST_METRICS[metric]
    top = 0.0
    for label, color in colours_of(ra).items():
        sl = per_target.get(label, {}).get(c)
        if sl is None:
            continue
        text = (sl.d.get("histograms") or {}).get(metric)
        if not text:
            continue
        xs, ys = percentile_curve(Hist.decode(text, m.scale, m.unit), m.divisor)
        if not xs:
            continue
        top = max(top, xs[-1])
        tips = [f"{label} C={c}: {name} p{_pct(x)} = {y:.2f} ms" for x, y in zip(xs, ys)]
        series.append(Series(label, xs, ys, color, marker=False, tips=tips, width=2.2))
    ticks = [(x, lbl) for x, lbl in NINES if x <= top + 1e-9]
    return Chart(f"{name} by percentile at C={c}", series, xlabel="percentile", ylabel="ms (log scale)", xlog=False,
                 ylog=True, xticks=ticks, empty=f"no {name} histogram at C={c}")


def _pct(x: float) -> str:
    p = (1 - 10 ** -x) * 100
    return f"{p:.3f}".rstrip("0").rstrip(".")


def figure(chart: Chart, cls: str = "", width: int = 560, height: int = 300, after: str = "") -> str:
    """The chart as the page shows it: caption, note, legend and the inline SVG (then ``after``, e.g. a strip
    drawn on the same axis); "" for a chart with no data (its PNG still says so)."""
    if not chart.has_data():
        return ""
    dashed = ' stroke-dasharray="4 3"'
    legend = "".join(
        f'<span class="key"><svg width="22" height="10"><line x1="1" x2="21" y1="5" y2="5" stroke="{col}" '
        f'stroke-width="2.4"{dashed if dash else ""}/></svg>{escape(lbl)}</span>'
        for lbl, col, dash in legend_items(chart))
    if chart.spans:
        legend += f'<span class="key"><span class="swatch" style="background:{CROSS_COLOUR}"></span>{escape(chart.span_key)}</span>'
    flagged = any(f for s in chart.series for f in (s.flags or []))
    if flagged:
        legend += ('<span class="key"><span class="ring" style="border-color:#d39200"></span>client-bound / approx.</span>'
                   '<span class="key"><span class="ring" style="border-color:#d42a2a"></span>failures / incomplete</span>')
    note = f'<div class="note">{escape(chart.note)}</div>' if chart.note else ""
    return (f'<figure class="fig {cls}"><figcaption>{escape(chart.title)}</figcaption>{note}'
            f'<div class="legend">{legend}</div>{svg(chart, width, height)}{after}</figure>')


def write_pngs(out_dir: Path, charts: dict[str, list[Chart]]) -> list[Path]:
    """Two PNGs per workload: the deciding metric (+ its Δ) and latency (+ acceptance)."""
    from loadgen.report.charts import png

    paths = []
    for wl, (thr, dlt, ttft, itl, acc) in charts.items():
        name = slug(wl)
        # the deciding metric's pair (output throughput, or goodput with SLOs), under the file name it always had
        paths.append(png([thr, dlt], out_dir / "plots" / f"{name}-throughput.png",
                         title=f"{wl}: {thr.title[:1].lower()}{thr.title[1:]}"))
        paths.append(png([ttft, itl, acc], out_dir / "plots" / f"{name}-latency.png",
                         title=f"{wl}: latency and acceptance"))
    return paths


def write_page(out: Path, html: str, charts, png: bool = True, pngs=None) -> Path:
    """``out/report.html`` written whole (a reader never sees half a page) and, unless ``png`` is False,
    the charts' PNGs by ``pngs(out, charts)`` (default :func:`write_pngs`; skipped without matplotlib: the
    HTML is complete without them); the page's path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.html"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(redact.text(html), encoding="utf-8")
    tmp.replace(path)
    if png:
        try:
            (pngs or write_pngs)(out, charts)
        except ImportError:
            pass
    return path

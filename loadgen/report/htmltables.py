"""The page's tables, as HTML: a metric's crossover table, the who-wins matrix, every stage's figures.

In: the run's analysis (:class:`~loadgen.analysis.compare.RunAnalysis`, ``ra``), a workload's metrics
(name → :class:`~loadgen.analysis.compare.MetricResult`), its stages not compared (C → why) and its slices
(target → C → Slice). Out: HTML fragments — :func:`comparison_table` (per C: means, Δ, interval, a forest
bar, the winner, flag badges; a stage not compared marked with why; then the crossovers),
:func:`verdict_matrix` (metric × C), :func:`stage_table` (health and figures of every stage) — and
:func:`chip` (a verdict kind's coloured label). The terminal's plain-text stage table is ``table.py``.
"""

from __future__ import annotations

from html import escape

from loadgen.analysis.results import level
from loadgen.analysis.compare import MetricResult, RunAnalysis
from loadgen.analysis.crossover import StageComparison
from loadgen.report.charts import BASELINE_COLOUR, SPEC_COLOUR, TIE_COLOUR
from loadgen.report.inputs import PRIMARY, Slice
from loadgen.report.palette import labels_of, palette, swatch
from loadgen.report.words import ALONE, KIND_CHIP, fmt_c, winner


def chip(kind: str) -> str:
    """A verdict kind (words.kind_of) as its coloured label."""
    text, cls = KIND_CHIP.get(kind, (kind, "chip-tie"))
    return f'<span class="chip {cls}">{escape(text)}</span>'


VERDICT_CLS = {"spec": "v-spec", "baseline": "v-base", "tie": "v-tie"}


def _forest(c: StageComparison, scale: float) -> str:
    """A tiny interval bar: the Δ and its interval around zero."""
    if c.ci_low is None or c.ci_high is None or c.delta is None:
        return ""
    w, h = 120, 14

    def X(v):
        return w / 2 + max(-1.0, min(1.0, v / scale)) * (w / 2 - 3)

    col = {"spec": SPEC_COLOUR, "baseline": BASELINE_COLOUR}.get(c.verdict, TIE_COLOUR)
    return (f'<svg class="forest" width="{w}" height="{h}"><line x1="{w / 2}" x2="{w / 2}" y1="0" y2="{h}" '
            f'stroke="#98a2b3" stroke-width="1"/><line x1="{X(c.ci_low):.1f}" x2="{X(c.ci_high):.1f}" y1="7" '
            f'y2="7" stroke="{col}" stroke-width="4" stroke-linecap="round" stroke-opacity="0.55"/>'
            f'<circle cx="{X(c.delta):.1f}" cy="7" r="3.2" fill="{col}"/></svg>')


def _flag_badges(items: list[tuple[str, str, str]]) -> str:
    """items: (kind, who, text) → small badges with the text on hover."""
    icon = {"client": ("⚠ client-bound", "b-warn"), "approx": ("≈ tokens", "b-warn"), "fail": ("✖ failures", "b-fail"),
            "incomplete": ("✖ incomplete", "b-fail"), "note": ("note", "b-note")}
    out, seen = [], set()
    for kind, who, text in items:
        key = (kind, who)
        tip = "; ".join(t for k, w, t in items if (k, w) == key)
        if key in seen:
            continue
        seen.add(key)
        lbl, cls = icon.get(kind, (kind, "b-note"))
        out.append(f'<span class="badge {cls}" title="{escape(who + ": " + tip)}">{escape(lbl)} '
                   f'<small>{escape(who)}</small></span>')
    return " ".join(out)


def comparison_table(ra: RunAnalysis, m: MetricResult, per_target: dict[str, dict[int, Slice]],
                     missing: dict[int, str] | None = None) -> str:
    """A metric's table: per compared C the means, Δ, interval, a forest bar, the winner and the stages' flags;
    a C in ``missing`` (not compared: the workload's coverage) as a row that says so and why; then the
    crossovers and the unconfirmed flips."""
    a = m.analysis
    unit = m.unit
    comps = a.comparisons
    scale = max([abs(v) for c in comps for v in (c.ci_low, c.ci_high) if v is not None] + [0.05])
    nd = 1 if unit in ("tok/s", "ms") else 3
    rows: dict[int, str] = {}
    alone = False
    for c in comps:
        cc = c.concurrency
        d, lo, hi = c.delta, c.ci_low, c.ci_high
        flags = []
        for label in (ra.baseline, ra.spec):
            sl = per_target.get(label, {}).get(cc)
            if sl:
                flags += [(k, label, t) for k, t in sl.flags]
        word = winner(c, a.family_wise)
        who = {"spec": ra.spec, "baseline": ra.baseline}.get(word.rstrip("*"), word.rstrip("*"))
        if word.endswith("*"):
            who += "*"
            alone = True
        note = f' title="{escape(c.note)}"' if c.note else ""
        rows[cc] = (
            f'<tr><td class="num">{cc}</td><td class="num">{c.mean_baseline:.{nd}f}</td>'
            f'<td class="num">{c.mean_spec:.{nd}f}</td>'
            f'<td class="num">{"–" if d is None else f"{d * 100:+.1f}"}</td>'
            f'<td class="num"{note}>{"–" if lo is None or hi is None else f"[{lo * 100:+.1f}, {hi * 100:+.1f}]"}</td>'
            f'<td>{_forest(c, scale)}</td><td class="{VERDICT_CLS.get(word.rstrip("*"), "v-tie")}">{escape(who)}</td>'
            f'<td class="flags">{_flag_badges(flags)}</td></tr>')
    for cc, why in (missing or {}).items():
        if cc not in rows:
            rows[cc] = (f'<tr class="notcompared"><td class="num">{cc}</td>' + '<td class="num">–</td>' * 4
                        + f'<td></td><td class="v-none">not compared</td><td class="why">{escape(why)}</td></tr>')
    xo = f'<div class="xo cand">{escape(ALONE)}</div>' if alone else ""
    for x in a.crossovers:
        arrow = "speculation stops paying off" if x.direction == "spec_to_baseline" else "speculation starts paying off"
        xo += (f'<div class="xo">crossover at <b>C≈{fmt_c(x.estimate)}</b> ({level(a.confidence)} % interval '
               f'{fmt_c(x.ci_low)}–{fmt_c(x.ci_high)}), between measured C={x.low_c} and C={x.high_c}: {arrow}</div>')
    for x in a.candidates:
        xo += (f'<div class="xo cand">unconfirmed flip near C≈{fmt_c(x.estimate)} (significant stage by stage, '
               f'not across the whole ladder)</div>')
    return (f'<table class="cmp"><thead><tr><th>C</th><th>{escape(ra.baseline)}</th><th>{escape(ra.spec)}</th>'
            f'<th>Δ %</th><th>{level(a.confidence)} % interval</th><th></th><th>winner</th><th>flags</th></tr>'
            '</thead>'
            f'<tbody>{"".join(rows[c] for c in sorted(rows))}</tbody></table><div class="unit">{escape(m.label)} in '
            f'{escape(unit)}; Δ = (spec − baseline) / baseline{"" if a.higher_is_better else "; lower is better"}'
            f'</div>{xo}')


def passes_table(ra: RunAnalysis, m: MetricResult) -> str:
    """A repeated run (--repeat): per C each target's figure in every pass with its CV, the Δ each pass measured
    on its own, and whether the passes agree within their windows (loadgen/analysis/repeats.py); "" without
    repeats."""
    p = m.passes
    if p is None:
        return ""
    nd = 1 if m.unit in ("tok/s", "ms") else 3
    rows = []
    for c in sorted(set(p.deltas) | {c for per in p.by_target.values() for c in per}):
        cells = []
        for label in (ra.baseline, ra.spec):
            s = (p.by_target.get(label) or {}).get(c)
            cells.append("<td>–</td><td class=\"num\">–</td>" if s is None else
                         f'<td class="num">{" ".join(f"{v:.{nd}f}" for v in s.values)}</td>'
                         f'<td class="num">{"–" if s.cv is None else f"{100 * s.cv:.1f}"}</td>')
        d = p.deltas.get(c)
        per_pass = "–" if d is None else " ".join(f"{100 * x:+.1f}" for x in d.deltas)
        word = "–" if d is None else ("differ" if d.beyond else "agree") + f": {d.spread_words}"
        rows.append(f'<tr><td class="num">{c}</td>{"".join(cells)}<td class="num">{per_pass}</td>'
                    f'<td class="{"sv-bad" if d is not None and d.beyond else "v-tie"}">{escape(word)}</td></tr>')
    return (f'<h4>Across the {p.passes} passes</h4><table class="cmp passes"><thead><tr><th>C</th>'
            f'<th>{escape(ra.baseline)} per pass</th><th>CV %</th><th>{escape(ra.spec)} per pass</th><th>CV %</th>'
            '<th>Δ % per pass</th><th>passes</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table><div class="unit">{escape(m.label)} in {escape(m.unit)}, each '
            'pass its own window; "differ": the passes scatter more than one pass\'s interval allows (χ² test, '
            '99 %), so the interval above, from the pooled windows, is narrower than what the server does from run '
            'to run</div>')


def _pct_short(delta: float) -> str:
    """Δ as a short percentage; beyond ±1000 % as a ratio (×12), which reads better."""
    if delta >= 9.5:
        return f"×{1 + delta:.0f}"
    return f"{delta * 100:+.0f}%"


def verdict_matrix(ra: RunAnalysis, per_metric: dict[str, MetricResult]) -> str:
    """Every metric against every compared C: the Δ, coloured by who is better there ("" without a metric)."""
    cs = sorted({c.concurrency for m in per_metric.values() for c in m.analysis.comparisons})
    if not cs:
        return ""
    head = "".join(f"<th>C={c}</th>" for c in cs)
    rows = []
    for m in per_metric.values():
        by_c = {c.concurrency: c for c in m.analysis.comparisons}
        cells = []
        for c in cs:
            x = by_c.get(c)
            if x is None:
                cells.append('<td class="m-none">·</td>')
                continue
            d = "–" if x.delta is None else _pct_short(x.delta)
            tip = f"{m.label} at C={c}: {winner(x, m.analysis.family_wise)}"
            if x.ci_low is not None and x.ci_high is not None and x.delta is not None:
                tip += f", Δ {x.delta * 100:+.1f} % [{x.ci_low * 100:+.1f}, {x.ci_high * 100:+.1f}]"
            cells.append(f'<td class="m-{x.verdict}" title="{escape(tip)}">{d}</td>')
        rows.append(f'<tr><th class="mname">{escape(m.label)}</th>{"".join(cells)}</tr>')
    return (f'<table class="matrix"><thead><tr><th></th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
            f'<div class="unit">cell: Δ of speculation vs baseline; orange: speculation better, blue: baseline better, '
            f'grey: tie at the {level(ra.confidence)} % level (per stage)</div>')


def stage_table(ra: RunAnalysis, per_target: dict[str, dict[int, Slice]]) -> str:
    """Every stage of every configuration: requests, throughput, latency percentiles, acceptance, health ("" for
    none)."""
    if not any(per_target.values()):
        return ""
    head = ["target", "C", "ok", "failed", "tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "TPOT p50",
            "E2E p50", "tok/chunk", "accept len", "accept rate", "tokens", "client"]
    rows = []

    def f(v, nd=2):
        return "–" if v is None else f"{v:.{nd}f}"

    labels = labels_of(ra)
    colours = palette(labels) if len(labels) > 2 else {}  # three or more: each row with its colour
    drafting = any((st.get("switching") or {}).get("cells") for per in per_target.values() for sl in per.values()
                   for st in sl.stages)
    if drafting:
        head.insert(-2, "drafting")
    for label in labels:
        name = swatch(colours[label], label) if colours else escape(label)
        for c, sl in sorted(per_target.get(label, {}).items()):
            req = sl.d.get("requests", {})
            bound = any(k == "client" for k, _ in sl.flags)
            ar = sl.d.get("accept_rate")
            cells = [name, str(c), str(req.get("completed", "–")), str(req.get("failed", "–")),
                     f(sl.get(PRIMARY), 1), f(sl.get("ttft", "p50")), f(sl.get("ttft", "p99")), f(sl.get("itl", "p50")),
                     f(sl.get("itl", "p99")), f(sl.get("tpot", "p50")), f(sl.get("e2e", "p50"), 1),
                     f(sl.get("tokens_per_chunk", "mean")), f(sl.get("accept_length", "mean")),
                     "–" if ar is None else f"{ar * 100:.0f} %",
                     '<span class="b-warn badge">approx.</span>' if sl.d.get("token_counts") == "approximate" else "exact",
                     '<span class="b-warn badge">bound</span>' if bound else "ok"]
            if drafting:
                cells.insert(-2, _drafting(sl))
            cls = ' class="rowfail"' if req.get("failed") or sl.incomplete else ""
            rows.append(f"<tr{cls}>" + "".join(f"<td>{v}</td>" for v in cells) + "</tr>")
    return (f'<table class="stages"><thead><tr>{"".join(f"<th>{h}</th>" for h in head)}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table><div class="unit">latencies in ms; tok/s = output tokens '
            f'arriving per second of the steady window; accept len = server-reported tokens per verify step'
            f'{DRAFTING_UNIT if drafting else ""}</div>')


DRAFTING_UNIT = ("; drafting = the share of the window's cells in which the stream showed speculation on, and its "
                 "switches on↔off (docs/metrics.md, switching)")


def _drafting(sl: Slice) -> str:
    """What the stream says speculation did in the slice's stages (stage/switching.py): on share and switches,
    a badge where it thrashed; "–" where it showed none."""
    parts = []
    for st in sl.stages:
        sw = st.get("switching") or {}
        judged = sw.get("on", 0) + sw.get("off", 0)
        if not judged:
            continue
        text = f"{100 * sw['on'] / judged:.0f} % on" + (f", {sw['switches']} switches" if sw.get("switches") else "")
        parts.append(f'<span class="b-warn badge">{escape(text)}</span>' if sw.get("oscillating") else escape(text))
    return "; ".join(parts) or "–"

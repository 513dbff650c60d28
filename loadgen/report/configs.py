"""Three or more configurations on one ladder: the part of a workload's section that compares them all.

In: the run's analysis (``ra``, a :class:`~loadgen.analysis.compare.RunAnalysis`) with ``configs``
(analysis/configs.py's :class:`~loadgen.analysis.configs.ConfigsResult` per workload and metric) and
``policy`` (its sentence per metric), the run's palette (report/palette.py), the
workload's throughput chart (figures.throughput_chart: every configuration's line and the envelope) and the
run's ServerView (analysis/serverview.py). Out: HTML fragments:

- :func:`band` — the best-config strip along the throughput chart's own C axis: per measured C a cell in the
  best configuration's colour, hatched grey where the joint intervals cannot tell the leaders apart, naming
  them (each cell carries ``data-c``, ``data-best`` and ``data-leaders``);
- :func:`policy_panel` — one metric's policy (the deciding one's is the section's "why"): its sentence, the
  simulator's own switches (:func:`switch_truth`), the policy table (step, configurations, C range, the switch
  with its joint interval or the measured C it lies between, and the running batch there), the per-C table
  (every mean, the best or the tie, its lead over the runner-up, every shortfall from the envelope), and for a
  configuration that adapts on its own, how close it comes to the envelope at each C; :func:`policy_tabs` —
  those panels for the other metrics, one tab each (the section's detail);
- :func:`excluded_html` — the configurations not compared, and why.

Every interval shown is the analysis's joint one (over pairs and stages); nothing is recomputed here.
"""

from __future__ import annotations

from html import escape

from loadgen.analysis.results import level
from loadgen.analysis.compare import RunAnalysis
from loadgen.analysis.configs import ConfigsAt, ConfigsResult, Gap, PolicyStep, envelope_word, fmt_c
from loadgen.analysis.serverview import ServerView, batch_of
from loadgen.report.charts import Cell, Chart, strip_svg
from loadgen.report.inputs import PRIMARY, Slice
from loadgen.report.palette import swatch
from loadgen.report.words import capitalised, slug, without_metric


def _label(ra: RunAnalysis, wl: str, metric: str) -> tuple[str, str]:
    """(label, unit) of a metric, from the pair analysis when it is there, else from the metric registry."""
    m = ra.workloads.get(wl, {}).get(metric)
    if m is not None:
        return m.label, m.unit
    from loadgen.analysis.compare import BY_NAME

    x = BY_NAME.get(metric)
    return (x.label, x.unit) if x else (metric, "")


def _gap(g: Gap | None, short: bool = False) -> str:
    """A joint gap as "+4.8 % [+1.9, +8.4]" ("–" where the pair was not compared there)."""
    if g is None or g.delta is None:
        return "–"
    d = f"{g.delta * 100:+.1f} %"
    if g.ci_low is None or g.ci_high is None:
        return d
    return d + ("" if short else f" [{g.ci_low * 100:+.1f}, {g.ci_high * 100:+.1f}]")


def _who(labels: list[str], colours: dict[str, str]) -> str:
    return " ".join(swatch(colours.get(x, "#999"), x) for x in labels)


# ------------------------------------------------------------------------------------------- the band


def band_cells(r: ConfigsResult, colours: dict[str, str]) -> list[Cell]:
    """One cell per measured C of a metric's analysis: its best's colour, or a tie naming the leaders."""
    out = []
    for a in r.at:
        c = a.concurrency
        if a.best:
            text = a.best
            tip = f"C={c}: {a.best} is best" + (f", {_gap(a.lead)} over {a.runner_up}" if a.runner_up else "")
        else:
            text = "/".join(a.leaders)
            tip = f"C={c}: {' and '.join(a.leaders)} are not told apart (joint interval {_gap(a.lead)})"
        out.append(Cell(c, text, colours.get(a.best) if a.best else None, tip,
                        {"c": str(c), "best": a.best or "", "leaders": ",".join(a.leaders)}))
    return out


def band(ra: RunAnalysis, wl: str, chart: Chart, colours: dict[str, str], metric: str = PRIMARY) -> str:
    """The best-config strip under the throughput chart (same width and C axis), with its one-line key."""
    r = ra.configs.get(wl, {}).get(metric)
    if r is None or not r.at:
        return ""
    strip = strip_svg(chart, band_cells(r, colours), uid=slug(wl) + "-" + slug(metric))
    return (f'<div class="bandcap">best configuration at each measured C (hatched: the {level(r.confidence)} % '
            f'joint intervals cannot tell the leaders apart)</div>{strip}')


# ------------------------------------------------------------------------------------------- running batch


def _batch(view: ServerView | None, wl: str, label: str, cs: list[float]) -> tuple[str, str]:
    """("≈11 (7.9–13)" or "?", why) of ``label``'s mean running batch at the C of ``cs`` (estimate, low, high)."""
    if view is None:
        return "?", "no server figures"
    bs = [batch_of(view, wl, label, c) for c in cs]
    words = ["?" if b.running is None else fmt_c(b.running) for b in bs]
    why = "; ".join(dict.fromkeys(b.why for b in bs if b.why))
    caps = [b for b in bs if b.at_cap]
    if caps:
        why = "; ".join(x for x in (why, f"at C≈{', '.join(fmt_c(b.c) for b in caps)} the server ran at its cap "
                                         f"of {caps[0].cap} and further requests queued") if x)
    if len(words) == 3:
        return f"≈{words[0]} ({words[1]}–{words[2]})" + (" (at its cap)" if bs[0].at_cap else ""), why
    return "–".join(words), why


def _batch_cell(view: ServerView | None, wl: str, labels: list[str], cs: list[float],
                colours: dict[str, str]) -> str:
    parts = []
    for x in labels:
        text, why = _batch(view, wl, x, cs)
        t = f' title="{escape(why)}"' if why else ""
        parts.append(f"<span{t}>{swatch(colours.get(x, '#999'), x)} {escape(text)}</span>")
    return "<br>".join(parts)


# ------------------------------------------------------------------------------------------- the tables


def _range(p: PolicyStep) -> str:
    lo, hi = p.c_from, p.c_to
    if lo is None and hi is None:
        return "every measured C"
    if lo is None:
        return f"C ≤ {fmt_c(hi)}"
    if hi is None:
        return f"C > {fmt_c(lo)}"
    return f"{fmt_c(lo)} < C ≤ {fmt_c(hi)}"


def policy_table(r: ConfigsResult, wl: str, view: ServerView | None, colours: dict[str, str]) -> str:
    """The policy's steps, each with the switch at its upper end and the running batch there."""
    pol = r.policy
    pct = f"{level(r.confidence)} %"
    rows = []
    for i, p in enumerate(pol):
        sw = p.switch
        nxt = pol[i + 1] if i + 1 < len(pol) else None
        if nxt is None:
            where, batch = ("–" if len(pol) > 1 else "no switch: the same at every measured C"), ""
        elif sw is not None and sw.confirmed and sw.estimate is not None:
            where = (f"C≈{fmt_c(sw.estimate)}, {pct} joint interval {fmt_c(sw.ci_low)}–{fmt_c(sw.ci_high)} "
                     f"(between the measured C={sw.low_c} and {sw.high_c})")
            batch = _batch_cell(view, wl, list(dict.fromkeys(p.labels + nxt.labels)),
                                [sw.estimate, sw.ci_low, sw.ci_high], colours)
        else:
            a, b = p.measured[1], nxt.measured[0]
            where = f"somewhere between the measured C={a} and {b}"
            batch = _batch_cell(view, wl, list(dict.fromkeys(p.labels + nxt.labels)), [a, b], colours)
        tie = "" if len(p.labels) == 1 else ' <span class="muted">(not told apart)</span>'
        rows.append(f'<tr><td class="num">{i + 1}</td><td>{_who(p.labels, colours)}{tie}</td>'
                    f'<td>{escape(_range(p))}</td><td class="num">{p.measured[0]}–{p.measured[1]}</td>'
                    f'<td>{escape(where)}</td><td>{batch}</td></tr>')
    return ('<table class="cmp policy"><thead><tr><th>step</th><th>use</th><th>C range</th><th>measured C</th>'
            '<th>switch to the next step</th><th>running batch there (mean, from each server\'s /metrics)</th>'
            f'</tr></thead><tbody>{"".join(rows)}</tbody></table>')


def _cell(a: ConfigsAt, x: str, nd: int) -> str:
    if x not in a.means:
        return '<td class="num muted">–</td>'
    sub = "envelope" if x == a.envelope_label else _gap(a.shortfall.get(x))
    return (f'<td class="num{" best" if x in a.leaders else ""}">{a.means[x]:.{nd}f}'
            f'<br><small>{escape(sub)}</small></td>')


def per_c_table(r: ConfigsResult, unit: str, colours: dict[str, str]) -> str:
    """Per C: every configuration's mean with its shortfall from the envelope, the best or the tie, its lead."""
    labels = [x for x in r.labels if x not in r.excluded]
    adaptive = set(r.adaptive)
    nd = 1 if unit in ("tok/s", "ms") else 3
    head = "".join(f"<th>{swatch(colours.get(x, '#999'), x)}{' <small>(adaptive)</small>' if x in adaptive else ''}"
                   f"</th>" for x in labels)
    rows = []
    for a in r.at:
        cells = "".join(_cell(a, x, nd) for x in labels)
        if a.best:
            best = _who([a.best], colours)
        else:
            best = '<span class="tiecell">tie</span> ' + _who(a.leaders, colours)
        lead = (f'{escape(_gap(a.lead))} <small>over {escape(a.runner_up)}</small>'
                if a.lead is not None and a.runner_up else "–")
        rows.append(f'<tr data-c="{a.concurrency}"><td class="num">{a.concurrency}</td>{cells}'
                    f'<td>{best}</td><td class="num">{lead}</td></tr>')
    hib = r.higher_is_better
    return (f'<table class="cmp perc"><thead><tr><th>C</th>{head}<th>best</th><th>lead over the runner-up</th></tr>'
            f'</thead><tbody>{"".join(rows)}</tbody></table><div class="unit">means in {escape(unit)}'
            f'{"" if hib else ", lower is better"}; under each, its gap to the configuration on the envelope '
            f'(the best at that C), (x − best) / best, with its {level(r.confidence)} % joint interval</div>')


def adaptive_table(r: ConfigsResult, unit: str, colours: dict[str, str]) -> str:
    """For each configuration that adapts on its own: how close it comes to the envelope of the others, per C, and
    on the embedded simulators the simulator's own gap there, ✓ where the interval holds it."""
    out = []
    hib = r.higher_is_better
    nd = 1 if unit in ("tok/s", "ms") else 3
    for x in r.adaptive:
        if x in r.excluded:
            continue
        rows = []
        truth = {k.at: k for k in r.gap_truth if k.label == x}
        for a in r.at:
            g = a.shortfall.get(x)
            if x not in a.means or g is None:
                continue
            word = envelope_word(g, hib)
            own = ""
            if truth:
                k = truth.get(a.concurrency)
                own = "<td></td>" if k is None else (f'<td class="num" title="{escape(k.words)}">'
                                                     f'{k.true * 100:+.1f} % {k.mark}</td>')
            rows.append(f'<tr><td class="num">{a.concurrency}</td><td class="num">{a.means[x]:.{nd}f}</td>'
                        f'<td class="num">{a.envelope:.{nd}f} <small>{escape(a.envelope_label)}</small></td>'
                        f'<td class="num">{escape(_gap(g))}</td>{own}<td>{escape(word)}</td></tr>')
        if rows:
            own_head = "<th>the simulator's own gap</th>" if truth else ""
            out.append(f'<p><b>{swatch(colours.get(x, "#999"), x)}</b> adapts on its own, so it is never chosen for a '
                       f'step; here is how close it comes to the envelope of the others:</p>'
                       f'<table class="cmp adaptive"><thead><tr><th>C</th><th>{escape(x)}</th><th>envelope</th>'
                       f'<th>gap to the envelope ({level(r.confidence)} % joint)</th>{own_head}<th></th></tr></thead>'
                       f'<tbody>{"".join(rows)}</tbody></table>')
    return "".join(out)


def excluded_html(ra: RunAnalysis, wl: str, per_target: dict[str, dict[int, Slice]], colours: dict[str, str]) -> str:
    """The configurations this workload does not compare, with the reason (the analysis's, else: no stage)."""
    why: dict[str, str] = {}
    per = ra.configs.get(wl, {})
    for r in per.values():
        for x, w in r.excluded.items():
            why.setdefault(x, w)
    compared = {x for r in per.values() for a in r.at for x in a.means}
    for x in colours:
        if x not in why and not per_target.get(x) and x not in compared:
            why[x] = "no stage of it in this workload"
    if not why:
        return ""
    lis = "".join(f'<li class="excluded" data-label="{escape(x)}">{swatch(colours.get(x, "#999"), x)} is not '
                  f'compared: {escape(w)}.</li>' for x, w in why.items())
    return f'<ul class="excluded">{lis}</ul>'


def policy_panel(ra: RunAnalysis, wl: str, name: str, pid: str, view: ServerView | None, colours: dict[str, str],
                 hidden: bool = False, said: bool = False) -> str:
    """One metric's policy: its sentence and the simulator's own switches (on the simulators; both left out when
    ``said`` already, as the section's decision says the deciding metric's), the policy table, the per-C table
    and the adaptive ones' gaps ("" for a metric not compared over the configurations)."""
    r = ra.configs.get(wl, {}).get(name)
    if r is None:
        return ""
    _, unit = _label(ra, wl, name)
    sentence = ra.policy.get(wl, {}).get(name, "")
    head = "" if said else f'<p class="policy">{escape(capitalised(without_metric(sentence)))}</p>{switch_truth(r)}'
    return (f'<div class="tabpanel" id="{pid}"{" hidden" if hidden else ""}>{head}'
            f'{policy_table(r, wl, view, colours)}<h4>Every configuration at each C</h4>'
            f'{per_c_table(r, unit, colours)}{adaptive_table(r, unit, colours)}</div>')


def switch_truth(r: ConfigsResult) -> str:
    """On the embedded simulators: each switch of the policy beside the simulator's own ("" elsewhere)."""
    return "".join(f'<p class="muted">{k.mark} {escape(capitalised(k.words))}.</p>' for k in r.simulator_truth)


def policy_tabs(ra: RunAnalysis, wl: str, anchor: str, view: ServerView | None, colours: dict[str, str],
                skip: tuple[str, ...] = ()) -> str:
    """One tab per metric (but those in ``skip``): its :func:`policy_panel` ("" for none)."""
    tabs, panels = [], []
    for name in ra.configs.get(wl, {}):
        if name in skip:
            continue
        pid = f"{anchor}-pol-{slug(name)}"
        on = not tabs
        tabs.append(f'<button type="button" data-panel="{pid}" class="{"on" if on else ""}">'
                    f'{escape(_label(ra, wl, name)[0])}</button>')
        panels.append(policy_panel(ra, wl, name, pid, view, colours, hidden=not on))
    return (f'<div class="tabs" data-tabs><div class="tabbar">{"".join(tabs)}</div>{"".join(panels)}</div>'
            if tabs else "")


def policy_list(ra: RunAnalysis, wl: str) -> str:
    """Every metric's policy sentence, one line each."""
    return "".join(f'<li>{escape(text)}</li>' for text in ra.policy.get(wl, {}).values())

"""The report: one self-contained HTML page (and PNGs of the main plots) from a results folder.

``render(out_dir)`` reads ``out_dir/run.json`` (schema ``loadgen.run/1``) and
``out_dir/crossover.json`` (computed with :func:`loadgen.analysis.compare.analyze_run`
and written when missing or older than run.json), and writes
``out_dir/report.html`` — inline CSS, JS and SVG, nothing fetched, opens
offline — and ``out_dir/plots/WORKLOAD-throughput.png`` and
``WORKLOAD-latency.png`` for CI artifacts. docs/report.md says how to read it. An open-loop
run (stages with a ``rate``, or a ``rates.json``) gets its page from ``rates.py`` instead.

This module assembles the page (:func:`build`: the header, the verdict, the flags card,
one section per workload with what its servers ran (``serverview``), the run card, in
``templates/page.html``) and writes it (:func:`render`). The pieces come from, in pipeline order: ``inputs`` (stages checked and
pooled, the analysis read or made), ``words`` (verdicts as sentences), ``figures`` (the
charts), ``htmltables`` (the tables), ``sections`` (one workload), ``cards`` (run-wide cards).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from html import escape
from pathlib import Path

from loadgen import __version__
from loadgen.analysis.serverview import server_view
from loadgen.errors import LoadgenError
from loadgen.report.cards import facts_line, flags_card, run_card, wall_time
from loadgen.report.charts import Chart
from loadgen.report.figures import write_page
from loadgen.report.htmltables import chip
from loadgen.report.inputs import analysis, slices, usable
from loadgen.report.palette import labels_of
from loadgen.report.rates import is_rate_folder
from loadgen.report.rates import render as rate_page
from loadgen.report.sections import workload_section
from loadgen.report.serverview import server_html
from loadgen.report.templates import read
from loadgen.report.words import headline, sglang_hint, top_sentence
from loadgen.run.results import load

__all__ = ["Page", "build", "render"]


@dataclass
class Page:
    html: str
    charts: dict[str, list[Chart]]
    """workload → the charts that also become PNGs."""


def build(doc: dict, res: dict, dropped: list[str] | None = None, title: str = "") -> Page:
    """The page of an analysed run (``dropped``: the lines of stages :func:`usable` left out)."""
    run = doc.get("run", {})
    sl = slices(doc)
    wls = [w for w in res["workloads"] if w != "all"] + (["all"] if "all" in res["workloads"] else [])
    view = server_view(doc, res)
    labels = labels_of(res)
    sections = [workload_section(res, wl, sl.get(wl, {}), server_html(view, wl, labels), view) for wl in wls]
    items = headline(res)
    lines = "<ul>" + "".join(f'<li>{chip(kind)} <b>{escape(wl)}</b>: {escape(text)}</li>'
                             for wl, text, kind in items) + "</ul>" if len(items) > 1 else ""
    # three or more configurations: the switches' running batch is in each workload's policy table instead
    hint = None if res.get("configs") else sglang_hint(doc, res, view=view)
    top = escape(top_sentence(res))
    if len(items) == 1:
        top = f"{chip(items[0][2])} " + top
    started = run.get("started_unix")
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)) if isinstance(started, (int, float)) else ""
    html = read("page.html").format(
        title=escape(title or "loadgen report"),
        css=read("report.css"), js=read("report.js"),
        heading=escape(title or "loadgen report"),
        sub=escape(" · ".join(x for x in (when, wall_time(run), f"{len(doc['stages'])} stages",
                                           f"loadgen {run.get('loadgen_version', __version__)}") if x)),
        top=top,
        lines=lines, hint=f'<p class="hint">{escape(hint)}</p>' if hint else "", conf=f"{res['confidence'] * 100:g}",
        nav="".join(s.nav for s in sections), flags=flags_card(sl, res, dropped or [], run),
        facts=escape(facts_line(doc, res)), meta=run_card(doc, res), sections="".join("\n" + s.html for s in sections),
        generated=escape(f"report by loadgen {__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"),
    )
    return Page(html, {wl: s.charts for wl, s in zip(wls, sections)})


def render(out_dir: str | Path, *, doc: dict | None = None, res: dict | None = None, png: bool = True,
           title: str = "") -> Path:
    """Write ``out_dir/report.html`` (and ``out_dir/plots/*.png`` unless ``png`` is False); return its path."""
    out = Path(out_dir)
    if doc is None:
        doc = load(out / "run.json")
    doc, dropped = usable(doc)
    if not doc["stages"]:
        raise LoadgenError(f"{out / 'run.json'}: no finished stage to report")
    if is_rate_folder(out, doc) or (res or {}).get("axis") == "rate":  # an open loop: its page is rates.py's
        return rate_page(out, doc, res if (res or {}).get("axis") == "rate" else None, dropped, png=png, title=title)
    if res is None:
        res = analysis(out, doc)
    page = build(doc, res, dropped, title or f"loadgen report: {out.resolve().name}")
    return write_page(out, page.html, page.charts, png)



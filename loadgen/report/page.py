"""The one report page, for any axis: header, summary card, flags, one section per workload, run card.

In: the run document and the parts its axis builds from the typed analysis (loadgen/report/html.py for a
ladder of concurrencies, loadgen/report/rates.py for an open loop): the summary card (``summary-decision.html``
or ``summary-offered.html``), the flags card, the workloads' sections (nav link, HTML, charts), the run card
and the facts line. Out: :class:`Page`, the HTML (template ``page.html``: inline CSS, JS and SVG, nothing
fetched) and the charts that also become PNGs. The header (when the run started, how long it took, its stages,
loadgen's version) and the footer are the same on every page.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from html import escape

from loadgen import __version__
from loadgen.report.cards import wall_time
from loadgen.report.charts import Chart
from loadgen.report.templates import read

__all__ = ["Page", "Section", "assemble"]


@dataclass
class Section:
    """One workload's part of the page."""

    nav: str
    """Its link in the sticky workload bar, with its verdict chip."""
    html: str
    charts: list[Chart]
    """The ones that also become PNGs (the deciding metric, Δ, TTFT, ITL, acceptance; an open loop's four rate
    charts and its margin chart)."""


@dataclass
class Page:
    html: str
    charts: dict[str, list[Chart]]
    """workload → the charts that also become PNGs."""


def assemble(doc: dict, *, title: str, facts: str, summary: str, flags: str, sections: dict[str, Section],
             meta: str) -> Page:
    """The page: ``sections`` per workload, in the page's order."""
    run = doc.get("run", {})
    started = run.get("started_unix")
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)) if isinstance(started, (int, float)) else ""
    sub = " · ".join(x for x in (when, wall_time(run), f"{len(doc.get('stages') or [])} stages",
                                 f"loadgen {run.get('loadgen_version', __version__)}") if x)
    html = read("page.html").format(
        title=escape(title), css=read("report.css"), js=read("report.js"), heading=escape(title), sub=escape(sub),
        facts=escape(facts), summary=summary, flags=flags, nav="".join(s.nav for s in sections.values()),
        sections="".join("\n" + s.html for s in sections.values()), meta=meta,
        generated=escape(f"report by loadgen {__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"))
    return Page(html, {wl: s.charts for wl, s in sections.items()})

"""The report: one self-contained HTML page (and PNGs of the main plots) from a results folder, for any axis.

``render(out_dir)`` reads ``out_dir/run.json`` (schema ``loadgen.run/1``) and its analysis
(loadgen.analysis.answer.load: ``crossover.json``, or an open loop's ``rates.json``, made again and written
when missing, stale or of another form), and writes ``out_dir/report.html`` — inline CSS, JS and SVG, nothing
fetched, opens offline — and ``out_dir/plots/*.png`` for CI artifacts. docs/report.md says how to read it.

One page (loadgen/report/page.py: header, summary card, flags, a section per workload, run card); what fills
it depends on the typed analysis it is given. A :class:`~loadgen.analysis.compare.RunAnalysis` (a ladder of
concurrencies) is laid out here (:func:`build`), in the terminal's order (loadgen/report/terminal.py): the
decision first (the summary card: per workload the deciding metric's finding — output throughput, or goodput
with SLOs, ``RunAnalysis.decides`` — with its chip; then the flags), then one section per workload (decision,
why, and the detail collapsed: ``sections.py``), then the run card. A
:class:`~loadgen.analysis.rates.RateAnalysis` (an open loop) is laid out by ``rates.py``. The pieces come
from, in pipeline order: ``inputs`` (stages checked and pooled), ``words`` (verdicts as sentences),
``figures`` (the charts), ``htmltables`` (the tables), ``sections`` (one workload), ``serverview`` (what its
servers ran), ``cards`` (run-wide cards).
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from loadgen.analysis.results import level
from loadgen.analysis.answer import RATE, axis_of
from loadgen.analysis.answer import load as load_answer
from loadgen.analysis.compare import RunAnalysis
from loadgen.analysis.rates import RateAnalysis
from loadgen.analysis.serverview import server_view
from loadgen.errors import LoadgenError
from loadgen.report.cards import facts_line, flags_card, run_card_of
from loadgen.report.figures import write_page
from loadgen.report.htmltables import chip
from loadgen.report.inputs import slices, usable
from loadgen.report.page import Page, assemble
from loadgen.report.palette import labels_of
from loadgen.report.rates import render as rate_page
from loadgen.report.sections import workload_section
from loadgen.report.serverview import server_html
from loadgen.report.templates import fragment
from loadgen.report.words import adaptive_hint, headline, metric_label, top_sentence
from loadgen.run.results import load

__all__ = ["Page", "build", "render"]


def build(doc: dict, ra: RunAnalysis, dropped: list[str] | None = None, title: str = "") -> Page:
    """The page of an analysed run (``dropped``: the lines of stages :func:`usable` left out)."""
    sl = slices(doc)
    wls = [w for w in ra.workloads if w != "all"] + (["all"] if "all" in ra.workloads else [])
    # the servers' figures per stage, and the deciding metric's crossovers on their running batch
    view = server_view(doc, ra.baseline, ra.spec, ra.crossovers(ra.decides), ra.decides)
    labels = labels_of(ra)
    sections = {wl: workload_section(ra, wl, sl.get(wl, {}), server_html(view, wl, labels), view) for wl in wls}
    items = headline(ra)
    lines = "<ul>" + "".join(f'<li>{chip(kind)} <b>{escape(wl)}</b>: {escape(text)}</li>'
                             for wl, text, kind in items) + "</ul>" if len(items) > 1 else ""
    # three or more configurations: the switches' running batch is in each workload's policy table instead
    hint = None if ra.configs else adaptive_hint(doc, view)
    top = escape(top_sentence(ra))
    if len(items) == 1:
        top = f"{chip(items[0][2])} " + top
    summary = fragment("summary-decision.html").format(
        top=top, decides=escape(metric_label(ra, ra.decides)), conf=f"{level(ra.confidence)}", lines=lines,
        hint=f'<p class="hint">{escape(hint)}</p>' if hint else "")
    return assemble(doc, title=title or "loadgen report", facts=facts_line(doc, ra), summary=summary,
                    flags=flags_card(sl, ra, dropped or [], doc.get("run", {})), sections=sections,
                    meta=run_card_of(doc, ra))


def render(out_dir: str | Path, *, doc: dict | None = None, res: RunAnalysis | RateAnalysis | None = None,
           png: bool = True, title: str = "") -> Path:
    """Write ``out_dir/report.html`` (and ``out_dir/plots/*.png`` unless ``png`` is False); return its path.
    ``res``: the analysis when the caller has it, else it is read or made (:func:`loadgen.analysis.answer.load`)."""
    out = Path(out_dir)
    if doc is None:
        doc = load(out / "run.json")
    doc, dropped = usable(doc)
    if not doc["stages"]:
        raise LoadgenError(f"{out / 'run.json'}: no finished stage to report")
    if isinstance(res, RateAnalysis) or (res is None and axis_of(doc, out) == RATE):  # its page is rates.py's
        return rate_page(out, doc, res, dropped, png=png, title=title)
    ra = res if res is not None else load_answer(out, doc).result
    page = build(doc, ra, dropped, title or f"loadgen report: {out.resolve().name}")
    return write_page(out, page.html, page.charts, png)

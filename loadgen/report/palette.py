"""One colour per configuration, the same in every chart, table and card of a report.

In: a run's labels in its order (the reference first, then the candidates: the analysis's
``targets``, or ``baseline`` and ``spec`` for a run from before it had them). Out: label → colour
(:func:`palette`, :func:`colours_of`) and a label's little coloured square for HTML (:func:`swatch`).

The first two are the two-target report's colours (charts.BASELINE_COLOUR, SPEC_COLOUR), so a
two-target report looks as it always did; the rest are picked to stay apart from them and from
the colours that mean something else on the page (purple: a crossover; grey: a tie; amber and
red: flags).
"""

from __future__ import annotations

from html import escape

from loadgen.analysis.compare import RunAnalysis
from loadgen.report.charts import BASELINE_COLOUR, SPEC_COLOUR

MORE_COLOURS = ("#2a9d5c", "#c2378f", "#1f9bb0", "#8c5a2b", "#6b7d12", "#5b5fd6", "#b8860b", "#3d5a40")
"""After the reference and the first candidate; past these the list repeats (nine or more candidates)."""


def palette(labels: list[str]) -> dict[str, str]:
    """label → colour, by position in the run's order (duplicates keep their first colour)."""
    colours = (BASELINE_COLOUR, SPEC_COLOUR, *MORE_COLOURS)
    out: dict[str, str] = {}
    for label in labels:
        if label not in out:
            i = len(out)
            out[label] = colours[i] if i < len(colours) else MORE_COLOURS[(i - 2) % len(MORE_COLOURS)]
    return out


def labels_of(ra: RunAnalysis) -> list[str]:
    """Every configuration of an analysis, the reference first."""
    labels = list(ra.targets)
    for x in (ra.baseline, ra.spec):
        if x not in labels:
            labels.append(x)
    return labels


def colours_of(ra: RunAnalysis) -> dict[str, str]:
    """The palette of an analysis."""
    return palette(labels_of(ra))


def swatch(colour: str, label: str = "") -> str:
    """A small square of ``colour`` before ``label`` (escaped), for tables and cards."""
    sq = f'<span class="cfg" style="background:{colour}" data-colour="{colour}"></span>'
    return sq + escape(label) if label else sq

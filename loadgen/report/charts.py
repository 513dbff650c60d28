"""Charts for the report: one small description, drawn as inline SVG (HTML) or PNG (matplotlib).

A :class:`Chart` says what to draw — series with optional interval bands and
per-point flags, shaded spans, vertical markers — and two back ends draw it:
:func:`svg` (hand-written, crisp, with hover tooltips, no dependencies) for the
self-contained HTML page, and :func:`png` (matplotlib, Agg) for CI artifacts.
Both read the same description, so the page and the PNGs show the same thing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

# Colours, not verdicts: the verdict strings "baseline" / "spec" / "tie" are loadgen.analysis.crossover's.
# The page's CSS variables (--base, --spec, --cross, --tie, --warn, --fail) hold the same values.
BASELINE_COLOUR = "#3a68c4"
SPEC_COLOUR = "#e0641a"
CROSS_COLOUR = "#7a3fc2"
TIE_COLOUR = "#8b94a3"
WARN_COLOUR = "#d39200"
FAIL_COLOUR = "#d42a2a"
GRID_COLOUR = "#e4e7ec"
INK_COLOUR = "#1f2733"
MUTED_COLOUR = "#5b6573"


@dataclass
class Series:
    label: str
    xs: list[float]
    ys: list[float | None]
    color: str
    dash: bool = False
    band: tuple[list[float | None], list[float | None]] | None = None
    """Lower and upper bounds per point (None where unknown)."""
    marker: bool = True
    tips: list[str] | None = None
    """Hover text per point."""
    flags: list[str] | None = None
    """Per point: "" (fine), "warn" (e.g. client-bound) or "fail" (failed requests, incomplete stage)."""
    width: float = 2.0


@dataclass
class Span:
    lo: float
    hi: float
    color: str
    label: str = ""


@dataclass
class VLine:
    x: float
    color: str
    label: str = ""


@dataclass
class Chart:
    title: str
    series: list[Series]
    xlabel: str = "concurrency C (log scale)"
    ylabel: str = ""
    xlog: bool = True
    ylog: bool = False
    xticks: list[tuple[float, str]] | None = None
    """Explicit ticks; default: every x of the series (the ladder)."""
    spans: list[Span] = field(default_factory=list)
    vlines: list[VLine] = field(default_factory=list)
    hline: float | None = None
    ysuffix: str = ""
    yzero: bool = False
    """Keep 0 inside the y range (throughput-like figures)."""
    note: str = ""
    """One line under the title."""
    empty: str = ""
    """Message to show instead of an empty plot."""
    span_key: str = "crossover interval"
    """What the spans are, in the legend."""

    def has_data(self) -> bool:
        return any(y is not None for s in self.series for y in s.ys)


# --------------------------------------------------------------------------- scales


def _fmt(v: float, suffix: str = "") -> str:
    a = abs(v)
    if a >= 10000:
        s = f"{v / 1000:.0f}k"
    elif a >= 1000:
        s = f"{v / 1000:.1f}k".replace(".0k", "k")
    elif a >= 100 or v == int(v):
        s = f"{v:.0f}"
    elif a >= 10:
        s = f"{v:.1f}".rstrip("0").rstrip(".")
    elif a >= 1:
        s = f"{v:.2f}".rstrip("0").rstrip(".")
    else:
        s = f"{v:.3g}"
    return s + suffix


def _nice_step(span: float, n: int = 5) -> float:
    raw = span / max(1, n)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _linear_ticks(lo: float, hi: float) -> list[float]:
    step = _nice_step(hi - lo)
    start = math.ceil(lo / step - 1e-9) * step
    out = []
    v = start
    while v <= hi + step * 1e-9:
        out.append(round(v, 10))
        v += step
    return out


def _log_ticks(lo: float, hi: float) -> list[float]:
    d0, d1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    mults = (1, 2, 5) if d1 - d0 <= 3 else (1,)
    out = [m * 10 ** d for d in range(d0, d1 + 1) for m in mults]
    out = [v for v in out if lo <= v <= hi]
    if len(out) < 2:
        out = [m * 10 ** d for d in range(d0, d1 + 1) for m in (1, 1.5, 2, 3, 5, 7)]
        out = [v for v in out if lo <= v <= hi]
    return out


class _Axis:
    def __init__(self, values: list[float], log: bool, zero: bool = False, pad: float = 0.05):
        self.log = log and all(v > 0 for v in values) and bool(values)
        vs = [math.log10(v) for v in values] if self.log else list(values)
        if not vs:
            vs = [0.0, 1.0]
        lo, hi = min(vs), max(vs)
        if zero and not self.log:
            lo, hi = min(lo, 0.0), max(hi, 0.0)
        if hi - lo < 1e-12:
            d = 0.5 if self.log else (abs(hi) * 0.1 or 1.0)
            lo, hi = lo - d, hi + d
        span = hi - lo
        self.lo = lo - (0.0 if zero and not self.log and lo == 0.0 else span * pad)
        self.hi = hi + span * pad

    def t(self, v: float) -> float:
        """Data value → [0, 1]."""
        x = math.log10(v) if self.log else v
        return (x - self.lo) / (self.hi - self.lo)

    def ok(self, v: float | None) -> bool:
        return v is not None and math.isfinite(v) and (v > 0 or not self.log)

    def ticks(self) -> list[float]:
        if self.log:
            return _log_ticks(10 ** self.lo, 10 ** self.hi)
        return _linear_ticks(self.lo, self.hi)


def _axes(chart: Chart) -> tuple[_Axis, _Axis]:
    xs, ys = [], []
    for s in chart.series:
        for i, (x, y) in enumerate(zip(s.xs, s.ys)):
            if y is None or not math.isfinite(y):
                continue
            xs.append(x)
            ys.append(y)
            if s.band:
                for b in (s.band[0][i], s.band[1][i]):
                    if b is not None and math.isfinite(b) and (b > 0 or not chart.ylog):
                        ys.append(b)
    for sp in chart.spans:
        xs += [sp.lo, sp.hi]
    xs += [v.x for v in chart.vlines]
    if chart.hline is not None:
        ys.append(chart.hline)
    if chart.xticks:
        xs += [t for t, _ in chart.xticks]
    xs = [x for x in xs if math.isfinite(x)]
    return _Axis(xs, chart.xlog, pad=0.06), _Axis(ys, chart.ylog, zero=chart.yzero, pad=0.08)


def label_rows(xs_px: list[float], widths_px: list[float], gap: float = 6.0) -> list[int]:
    """Row per label (0 = top) so labels starting at ``xs_px`` with ``widths_px`` do not overlap."""
    ends: list[float] = []  # right end of the last label in each row
    rows = []
    for x, w in zip(xs_px, widths_px):
        for r, end in enumerate(ends):
            if x >= end + gap:
                ends[r] = x + w
                rows.append(r)
                break
        else:
            ends.append(x + w)
            rows.append(len(ends) - 1)
    return rows


def _segments(xs, ys, ok):
    seg = []
    for x, y in zip(xs, ys):
        if ok(y):
            seg.append((x, y))
        elif seg:
            yield seg
            seg = []
    if seg:
        yield seg


# --------------------------------------------------------------------------- SVG

W, H = 560, 300
ML, MR, MT, MB = 58, 14, 14, 42


@dataclass
class _Plot:
    """Where a chart's values land in its SVG: the axes and the plot area inside the fixed margins."""

    ax: _Axis
    ay: _Axis
    pw: int
    ph: int

    def X(self, v: float) -> float:
        return ML + self.ax.t(v) * self.pw

    def Y(self, v: float) -> float:
        return MT + (1.0 - self.ay.t(v)) * self.ph


def svg(chart: Chart, width: int = W, height: int = H) -> str:
    """The chart as an inline ``<svg>`` element (styled by the page's CSS, tooltips in ``<title>``)."""
    if not chart.has_data():
        msg = escape(chart.empty or "no data")
        return (f'<svg class="chart" viewBox="0 0 {width} {height}" role="img">'
                f'<text x="{width / 2}" y="{height / 2}" class="empty" text-anchor="middle">{msg}</text></svg>')
    ax, ay = _axes(chart)
    p = _Plot(ax, ay, width - ML - MR, height - MT - MB)
    pw, ph = p.pw, p.ph
    out = [f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(chart.title)}">']
    out += _svg_grid(chart, p)
    out.append(f'<rect class="frame" x="{ML}" y="{MT}" width="{pw}" height="{ph}"/>')
    out += _svg_marks(chart, p)
    # bands, then lines, then markers on top
    out += _svg_bands(chart, p)
    for s in chart.series:
        dash = ' stroke-dasharray="6 4"' if s.dash else ""
        for seg in _segments(s.xs, s.ys, ay.ok):
            pts = " ".join(f"{p.X(x):.1f},{p.Y(y):.1f}" for x, y in seg)
            out.append(f'<polyline points="{pts}" fill="none" stroke="{s.color}" stroke-width="{s.width}"{dash} '
                       f'stroke-linejoin="round" stroke-linecap="round"/>')
    out += _svg_markers(chart, p)
    # axis labels
    out.append(f'<text class="alabel" x="{ML + pw / 2:.1f}" y="{height - 8}" text-anchor="middle">{escape(chart.xlabel)}</text>')
    out.append(f'<text class="alabel" transform="translate(13 {MT + ph / 2:.1f}) rotate(-90)" '
               f'text-anchor="middle">{escape(chart.ylabel)}</text>')
    out.append("</svg>")
    return "".join(out)


def _svg_grid(chart: Chart, p: _Plot) -> list[str]:
    """The grid with the y ticks, then the x ticks: the ladder, thinned so labels do not collide."""
    out = []
    for v in p.ay.ticks():
        y = p.Y(v)
        out.append(f'<line class="grid" x1="{ML}" x2="{ML + p.pw}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(f'<text class="tick" x="{ML - 6}" y="{y + 3.5:.1f}" text-anchor="end">{_fmt(v, chart.ysuffix)}</text>')
    if chart.xticks:
        xt = chart.xticks
    else:
        xt = [(x, _fmt(x)) for x in sorted({x for s in chart.series for x, y in zip(s.xs, s.ys) if y is not None})]
    last = -1e9
    for v, label in xt:
        if not (p.ax.ok(v) or not p.ax.log):
            continue
        x = p.X(v)
        if x < ML - 1 or x > ML + p.pw + 1:
            continue
        out.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{MT}" y2="{MT + p.ph}"/>')
        if x - last >= 8 + 6.5 * len(label):
            out.append(f'<text class="tick" x="{x:.1f}" y="{MT + p.ph + 15}" text-anchor="middle">{escape(label)}</text>')
            last = x
    return out


def _svg_marks(chart: Chart, p: _Plot) -> list[str]:
    """Spans (crossover intervals), the horizontal reference line and the labelled vertical markers."""
    X, pw, ph = p.X, p.pw, p.ph
    out = []
    for sp in chart.spans:
        x0, x1 = max(ML, X(sp.lo)), min(ML + pw, X(sp.hi))
        out.append(f'<rect x="{x0:.1f}" y="{MT}" width="{max(1.5, x1 - x0):.1f}" height="{ph}" fill="{sp.color}" '
                   f'fill-opacity="0.13"><title>{escape(sp.label)}</title></rect>')
    if chart.hline is not None and p.ay.ok(chart.hline):
        y = p.Y(chart.hline)
        out.append(f'<line class="zero" x1="{ML}" x2="{ML + pw}" y1="{y:.1f}" y2="{y:.1f}"/>')
    vls = sorted(chart.vlines, key=lambda v: v.x)
    widths = [7.0 * len(v.label) for v in vls]
    starts = [X(v.x) + 4 if X(v.x) + 4 + w <= ML + pw else X(v.x) - 4 - w for v, w in zip(vls, widths)]
    for vl, x0, row in zip(vls, starts, label_rows(starts, widths)):
        x = X(vl.x)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{MT}" y2="{MT + ph}" stroke="{vl.color}" '
                   f'stroke-width="1.6" stroke-dasharray="5 3"><title>{escape(vl.label)}</title></line>')
        if vl.label:
            out.append(f'<text class="vlabel" x="{x0:.1f}" y="{MT + 12 + 14 * row}" fill="{vl.color}">'
                       f'{escape(vl.label)}</text>')
    return out


def _svg_bands(chart: Chart, p: _Plot) -> list[str]:
    """Each series' interval band as a polygon, with a whisker at every point so one-stage bands still show."""
    X, Y = p.X, p.Y
    out = []
    for s in chart.series:
        if not s.band:
            continue
        lo, hi = s.band
        pts = [(x, a, b) for x, a, b in zip(s.xs, lo, hi) if p.ay.ok(a) and p.ay.ok(b)]
        if len(pts) >= 2:
            poly = [f"{X(x):.1f},{Y(b):.1f}" for x, a, b in pts] + [f"{X(x):.1f},{Y(a):.1f}" for x, a, b in reversed(pts)]
            out.append(f'<polygon points="{" ".join(poly)}" fill="{s.color}" fill-opacity="0.16" stroke="none"/>')
        for x, a, b in pts:  # whiskers, so one-stage bands still show
            out.append(f'<line x1="{X(x):.1f}" x2="{X(x):.1f}" y1="{Y(a):.1f}" y2="{Y(b):.1f}" stroke="{s.color}" '
                       f'stroke-opacity="0.45" stroke-width="1.2"/>')
    return out


def _svg_markers(chart: Chart, p: _Plot) -> list[str]:
    """Every measured point: a dot with its tooltip, ringed where the stage is flagged."""
    out = []
    for s in chart.series:
        if not s.marker:
            continue
        for i, (x, y) in enumerate(zip(s.xs, s.ys)):
            if not p.ay.ok(y):
                continue
            cx, cy = p.X(x), p.Y(y)
            flag = s.flags[i] if s.flags else ""
            tip = s.tips[i] if s.tips else f"{s.label}: {_fmt(y, chart.ysuffix)} at {_fmt(x)}"
            out.append(f'<g class="pt"><title>{escape(tip)}</title>')
            out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="9" fill="transparent"/>')
            fill = "#fff" if s.dash else s.color
            out.append(f'<circle class="dot" cx="{cx:.1f}" cy="{cy:.1f}" r="3.6" fill="{fill}" stroke="{s.color}" '
                       f'stroke-width="1.6"/>')
            if flag:
                ring = FAIL_COLOUR if flag == "fail" else WARN_COLOUR
                out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="7" fill="none" stroke="{ring}" '
                           f'stroke-width="2"/>')
            out.append("</g>")
    return out


@dataclass
class Cell:
    """One measured concurrency of a strip under a chart (:func:`strip_svg`): ``color`` None is a tie (hatched)."""

    x: float
    text: str
    color: str | None
    tip: str = ""
    data: dict[str, str] = field(default_factory=dict)
    """Attributes written as ``data-KEY`` on the cell (what a test or a script reads back)."""


def strip_svg(chart: Chart, cells: list[Cell], uid: str, width: int = W, height: int = 44) -> str:
    """A strip of ``cells`` on ``chart``'s own x axis (the same margins and scale as :func:`svg` at ``width``),
    each cell reaching halfway (on that scale) to its neighbours; a tie is hatched grey. ``uid`` makes the
    hatch pattern's id unique on the page."""
    ax, _ = _axes(chart)
    pw = width - ML - MR

    def X(v: float) -> float:
        return ML + ax.t(v) * pw

    xs = [X(c.x) for c in cells]
    out = [f'<svg class="chart strip" viewBox="0 0 {width} {height}" role="img" aria-label="best configuration by C">'
           f'<defs><pattern id="hatch-{uid}" width="6" height="6" patternUnits="userSpaceOnUse" '
           f'patternTransform="rotate(45)"><rect width="6" height="6" fill="#eef0f3"/>'
           f'<line x1="0" y1="0" x2="0" y2="6" stroke="{TIE_COLOUR}" stroke-width="2.2"/></pattern></defs>']
    for i, (cell, x) in enumerate(zip(cells, xs)):
        left = ML if i == 0 else (xs[i - 1] + x) / 2
        right = ML + pw if i == len(cells) - 1 else (x + xs[i + 1]) / 2
        fill = cell.color or f"url(#hatch-{uid})"
        data = "".join(f' data-{k}="{escape(v)}"' for k, v in cell.data.items())
        out.append(f'<g class="cell"{data}><title>{escape(cell.tip or cell.text)}</title>'
                   f'<rect x="{left:.1f}" y="2" width="{max(1.0, right - left):.1f}" height="{height - 18}" '
                   f'fill="{fill}" fill-opacity="{0.85 if cell.color else 1}" stroke="#fff" stroke-width="1.5"/>')
        lines = [cell.text] if 6.4 * len(cell.text) <= right - left - 4 else cell.text.split("/")
        fits = all(6.4 * len(t) <= right - left - 4 for t in lines) and 12 * len(lines) <= height - 20
        if fits:
            y0 = 2 + (height - 18) / 2 - 6 * (len(lines) - 1) + 4
            ink = "#fff" if cell.color else INK_COLOUR
            for k, t in enumerate(lines):
                out.append(f'<text x="{(left + right) / 2:.1f}" y="{y0 + 12 * k:.1f}" text-anchor="middle" '
                           f'class="celltext" fill="{ink}">{escape(t)}</text>')
        out.append(f'<text class="tick" x="{x:.1f}" y="{height - 3}" text-anchor="middle">C={_fmt(cell.x)}</text></g>')
    out.append("</svg>")
    return "".join(out)


def legend_items(chart: Chart) -> list[tuple[str, str, bool]]:
    """(label, colour, dashed) for every series, in order."""
    return [(s.label, s.color, s.dash) for s in chart.series if s.label]


# --------------------------------------------------------------------------- PNG


def _mpl():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def png(charts: list[Chart], path: Path, title: str = "", ncols: int | None = None) -> Path:
    """Draw ``charts`` side by side (one row, or ``ncols`` per row) into one PNG."""
    plt = _mpl()
    from matplotlib.ticker import FuncFormatter, NullLocator

    n = len(charts)
    ncols = ncols or n
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.6 * nrows + (0.45 if title else 0)),
                             squeeze=False, dpi=100)
    for k, chart in enumerate(charts):
        a = axes[k // ncols][k % ncols]
        _draw_mpl(a, chart, FuncFormatter, NullLocator)
    for k in range(n, nrows * ncols):
        axes[k // ncols][k % ncols].set_visible(False)
    if title:
        fig.suptitle(title, fontsize=12, fontweight="bold", x=0.01, ha="left")
    # fixed margins: tight_layout measures every label and costs more than drawing the figure
    top = 1.0 - (0.62 if title else 0.3) / (3.6 * nrows + (0.45 if title else 0))
    fig.subplots_adjust(left=0.075 / ncols * 2 if ncols > 1 else 0.1, right=0.985, bottom=0.14 / nrows, top=top,
                        wspace=0.28, hspace=0.45)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def _draw_mpl(a, chart: Chart, FuncFormatter, NullLocator) -> None:
    a.set_title(chart.title, fontsize=10, loc="left")
    if not chart.has_data():
        a.text(0.5, 0.5, chart.empty or "no data", ha="center", va="center", transform=a.transAxes, color=MUTED_COLOUR)
        a.set_xticks([])
        a.set_yticks([])
        return
    ax_x, ax_y = _axes(chart)
    if ax_x.log:
        a.set_xscale("log")
    if ax_y.log:
        a.set_yscale("log")
    for sp in chart.spans:
        a.axvspan(sp.lo, sp.hi, color=sp.color, alpha=0.13, lw=0)
    if chart.hline is not None:
        a.axhline(chart.hline, color=MUTED_COLOUR, lw=1)
    vls = sorted(chart.vlines, key=lambda v: v.x)
    span_px = 380.0  # about one panel's width in points; enough to keep labels apart
    starts = [ax_x.t(v.x) * span_px for v in vls]
    widths = [5.5 * len(v.label) for v in vls]
    for vl, row in zip(vls, label_rows(starts, widths)):
        a.axvline(vl.x, color=vl.color, lw=1.4, ls="--")
        if vl.label:
            a.annotate(vl.label, (vl.x, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -11 - 11 * row),
                       textcoords="offset points", color=vl.color, fontsize=8)
    for s in chart.series:
        if s.band:
            lo, hi = s.band
            pts = [(x, l, h) for x, l, h in zip(s.xs, lo, hi) if ax_y.ok(l) and ax_y.ok(h)]
            if pts:
                xs, ls, hs = zip(*pts)
                a.fill_between(xs, ls, hs, color=s.color, alpha=0.16, lw=0)
                a.vlines(xs, ls, hs, color=s.color, alpha=0.45, lw=1)
        for i, seg in enumerate(_segments(s.xs, s.ys, ax_y.ok)):
            xs, ys = zip(*seg)
            a.plot(xs, ys, color=s.color, lw=s.width * 0.8, ls="--" if s.dash else "-",
                   marker="o" if s.marker else None, ms=4, mfc="white" if s.dash else s.color,
                   label=s.label if i == 0 else None)
        if s.flags:
            for flag, colour in (("warn", WARN_COLOUR), ("fail", FAIL_COLOUR)):
                pts = [(x, y) for x, y, f in zip(s.xs, s.ys, s.flags) if f == flag and ax_y.ok(y)]
                if pts:
                    xs, ys = zip(*pts)
                    a.plot(xs, ys, ls="none", marker="o", ms=10, mfc="none", mec=colour, mew=1.6)
    if chart.xticks:
        a.set_xticks([t for t, _ in chart.xticks], [lbl for _, lbl in chart.xticks])
    else:
        ticks = sorted({x for s in chart.series for x, y in zip(s.xs, s.ys) if y is not None})
        a.set_xticks(ticks, [_fmt(t) for t in ticks])
    yt = ax_y.ticks()
    a.set_yticks(yt)
    a.set_ylim(10 ** ax_y.lo if ax_y.log else ax_y.lo, 10 ** ax_y.hi if ax_y.log else ax_y.hi)
    a.set_xlim(10 ** ax_x.lo if ax_x.log else ax_x.lo, 10 ** ax_x.hi if ax_x.log else ax_x.hi)
    a.xaxis.set_minor_locator(NullLocator())
    a.yaxis.set_minor_locator(NullLocator())
    a.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _fmt(v, chart.ysuffix)))
    a.set_xlabel(chart.xlabel, fontsize=8.5)
    a.set_ylabel(chart.ylabel, fontsize=8.5)
    a.tick_params(labelsize=8)
    a.grid(True, color=GRID_COLOUR, lw=0.8)
    a.set_axisbelow(True)
    for side in ("top", "right"):
        a.spines[side].set_visible(False)
    if any(s.label for s in chart.series):
        a.legend(fontsize=7.5, frameon=False, loc="best")

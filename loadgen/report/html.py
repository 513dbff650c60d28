"""The report: one self-contained HTML page (and PNGs of the main plots) from a results folder.

``render(out_dir)`` reads ``out_dir/run.json`` (schema ``loadgen.run/1``) and
``out_dir/crossover.json`` (computed with :func:`loadgen.analysis.compare.analyze_run`
and written when missing or older than run.json), and writes
``out_dir/report.html`` — inline CSS, JS and SVG, nothing fetched, opens
offline — and ``out_dir/plots/WORKLOAD-throughput.png`` and
``WORKLOAD-latency.png`` for CI artifacts. docs/report.md says how to read it.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

import orjson

from loadgen import __version__
from loadgen.analysis import stats
from loadgen.errors import LoadgenError
from loadgen.histograms import Hist
from loadgen.metrics import BY_NAME as HIST_METRICS
from loadgen.report.charts import (BASELINE_COLOUR, CROSS_COLOUR, SPEC_COLOUR, TIE_COLOUR, Chart, Series, Span, VLine,
                                   legend_items, svg)
from loadgen.run.results import load

PRIMARY = "output_tokens_per_s"
LATENCIES = (("ttft", "TTFT"), ("itl", "ITL"))


# --------------------------------------------------------------------------- inputs


def stage_problem(s) -> str | None:
    """Why a stage dict cannot be used (a truncated or foreign entry), or None."""
    if not isinstance(s, dict):
        return "not an object"
    for key in ("target", "concurrency", "requests", "output_tokens_per_s", "client", "workloads"):
        if key not in s:
            return f"no '{key}'"
    for wl, m in s["workloads"].items():
        for key in ("requests", "output_tokens_per_s", "timeline"):
            if key not in m:
                return f"workload {wl}: no '{key}'"
    return None


def usable(doc: dict) -> tuple[dict, list[str]]:
    """The document with only well-formed stages, and one line per stage left out."""
    ok, dropped = [], []
    for i, s in enumerate(doc.get("stages") or []):
        why = stage_problem(s)
        if why is None:
            ok.append(s)
        else:
            label = f"{s.get('target', '?')} C={s.get('concurrency', '?')}" if isinstance(s, dict) else f"#{i}"
            dropped.append(f"stage {i} ({label}) left out: {why}")
    return {**doc, "stages": ok}, dropped


def _truth_html(m: dict) -> str:
    """The embedded simulator's own crossover beside each reported one (crossover_cli adds it)."""
    from loadgen.sim.known import verdict

    out = []
    for k in m.get("simulator_truth", []):
        mark, text = verdict(k)
        out.append(f'<p class="muted">{mark} {escape(_cap(text))}.</p>')
    return "".join(out)


def analysis(out_dir: Path, doc: dict, *, confidence: float | None = None, force: bool = False) -> dict:
    """crossover.json when it is there, fresh and at the wanted level; else analyse and write it."""
    from loadgen.analysis.compare import analyze_run, roles

    path = out_dir / "crossover.json"
    run_path = out_dir / "run.json"
    if not force and path.exists():
        try:
            fresh = not run_path.exists() or path.stat().st_mtime >= run_path.stat().st_mtime
            res = orjson.loads(path.read_bytes())
            # without "coverage" it predates the verdicts that name missing and flagged stages: redo it
            if (fresh and isinstance(res, dict)
                    and {"baseline", "spec", "workloads", "confidence", "coverage"} <= res.keys()
                    and (confidence is None or abs(res["confidence"] - confidence) < 1e-9)
                    and (res["baseline"], res["spec"]) == roles(doc)):
                return res
        except (OSError, orjson.JSONDecodeError):
            pass
    try:
        res = analyze_run(doc, confidence=0.90 if confidence is None else confidence)
    except ValueError as exc:
        raise LoadgenError(f"{run_path}: cannot analyse: {exc}") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(res, option=orjson.OPT_INDENT_2))
    return res


def servers(doc: dict) -> dict[str, dict]:
    """label → what the server said about itself (crossover runs: run.servers; single runs: targets[].server)."""
    run = doc.get("run", {})
    out = dict(run.get("servers") or {})
    for t in run.get("targets") or []:
        if isinstance(t, dict) and t.get("server") and t.get("label") not in out:
            out[t["label"]] = t["server"]
    return out


def max_running(server: dict | None) -> int | None:
    info = (server or {}).get("server_info") or {}
    v = info.get("max_running_requests")
    if not v:
        states = info.get("internal_states") or [{}]
        v = states[0].get("max_running_requests") if isinstance(states[0], dict) else None
    return int(v) if isinstance(v, (int, float)) and v > 0 else None


# --------------------------------------------------------------------------- per-stage figures


@dataclass
class Slice:
    """One target at one concurrency for one workload (repeated stages pooled)."""

    target: str
    workload: str
    c: int
    d: dict
    """Summary dict: the stage's workload slice (or the merge of several)."""
    rate_bins: list[float]
    stages: list[dict]
    incomplete: bool = False
    flags: list[tuple[str, str]] = field(default_factory=list)
    """(kind, text); kind is "client", "fail", "approx", "incomplete" or "note"."""

    def get(self, metric: str, key: str = "p50") -> float | None:
        v = self.d.get(metric)
        if isinstance(v, dict):
            if not v.get("count", 1):
                return None
            v = v.get(key)
        return float(v) if isinstance(v, (int, float)) else None

    @property
    def severity(self) -> str:
        kinds = {k for k, _ in self.flags}
        return "fail" if kinds & {"fail", "incomplete"} else "warn" if kinds & {"client", "approx"} else ""


def _merge(parts: list[tuple[dict, dict]]) -> dict:
    """Pool repeated slices: histograms and counters add, over the summed windows."""
    from loadgen.stage.result import MetricSet

    if len(parts) == 1:
        return parts[0][1]
    total = None
    window = 0.0
    for stage, m in parts:
        ms = MetricSet.from_dict(m)
        window += stage["window"]["duration_s"]
        if total is None:
            total = ms
        else:
            total.merge(ms)
    bin_s = parts[0][1].get("timeline", {}).get("bin_s", 1.0)
    return total.to_dict(window, bin_s)


def slices(doc: dict) -> dict[str, dict[str, dict[int, Slice]]]:
    """workload → target → C → Slice. A stage with several workloads also counts under "all"."""
    from loadgen.analysis.compare import window_whole

    groups: dict[tuple[str, str, int], list[tuple[dict, dict]]] = {}
    for s in doc.get("stages", []):
        wls = s.get("workloads") or {}
        for wl, m in wls.items():
            groups.setdefault((wl, s["target"], s["concurrency"]), []).append((s, m))
        if len(wls) > 1:
            groups.setdefault(("all", s["target"], s["concurrency"]), []).append((s, s))
    out: dict[str, dict[str, dict[int, Slice]]] = {}
    for (wl, target, c), parts in groups.items():
        complete = [p for p in parts if window_whole(p[0])]
        use = complete or parts
        d = _merge(use)
        bins = [v for _, m in use for v in _rate(m.get("timeline", {}))]
        sl = Slice(target, wl, c, d, bins, [p[0] for p in use], incomplete=not complete)
        sl.flags = _flags(sl)
        out.setdefault(wl, {}).setdefault(target, {})[c] = sl
    return out


def _rate(tl: dict) -> list[float]:
    b = tl.get("bin_s") or 0
    return [v / b for v in tl.get("tokens", [])] if b > 0 else []


def _flags(sl: Slice) -> list[tuple[str, str]]:
    from loadgen.analysis.compare import cut_words, window_whole

    out = []
    for s in sl.stages:
        for r in s["client"].get("reasons", []) if s["client"].get("client_bound") else []:
            out.append(("client", f"client-bound: {r}"))
        cut = cut_words(s.get("cut"))
        if not window_whole(s):
            out.append(("incomplete", f"incomplete stage ({cut})" if cut else "incomplete stage (interrupted)"))
        elif cut:
            out.append(("incomplete", f"stage {cut}"))
        for n in s.get("notes", []):
            out.append(("note", str(n)))
    req = sl.d.get("requests", {})
    for cls, f in (req.get("failures") or {}).items():
        out.append(("fail", f"{f.get('count', 0)} failed ({cls}): {f.get('first_message', '')}".rstrip(": ")))
    if req.get("failed") and not req.get("failures"):
        out.append(("fail", f"{req['failed']} failed requests"))
    if sl.d.get("token_counts") == "approximate":
        out.append(("approx", "approximate token counts (no per-chunk usage from the server)"))
    seen, uniq = set(), []
    for f in out:
        if f not in seen:
            seen.add(f)
            uniq.append(f)
    return uniq


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


# --------------------------------------------------------------------------- words


def _c(x: float) -> str:
    return str(int(round(x))) if x >= 10 else f"{x:.1f}".rstrip("0").rstrip(".")


def _strip(text: str) -> str:
    """A recommendation without its "metric:" prefix."""
    _, sep, rest = text.partition(": ")
    return rest if sep else text


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def first_sentence(text: str) -> str:
    """Up to the first full stop that ends a sentence (not a decimal point)."""
    m = re.search(r"\.\s+(?=[A-Z(])", text)
    return text[: m.start() + 1] if m else text


def verdict_kind(a: dict) -> str:
    """One word for a metric's outcome: cross, spec, baseline, tie or mixed."""
    if a["crossovers"]:
        return "cross"
    vs = {c["verdict"] for c in a["comparisons"]}
    if vs == {"spec"}:
        return "spec"
    if vs == {"baseline"}:
        return "baseline"
    if vs <= {"tie"}:
        # a tie too wide to call (crossover.py §3) is not "no difference"
        return "inconclusive" if any(c.get("wide") for c in a["comparisons"]) else "tie"
    if "spec" in vs and "baseline" not in vs:
        return "spec-some"
    if "baseline" in vs and "spec" not in vs:
        return "baseline-some"
    return "mixed"


KIND_CHIP = {"cross": ("crossover", "chip-cross"), "spec": ("speculation wins", "chip-spec"),
             "baseline": ("baseline wins", "chip-base"), "tie": ("no difference", "chip-tie"),
             "spec-some": ("speculation wins some", "chip-spec"), "baseline-some": ("baseline wins some", "chip-base"),
             "mixed": ("mixed, unconfirmed", "chip-tie"), "inconclusive": ("inconclusive", "chip-tie"),
             "not compared": ("not compared", "chip-none")}


def kind_of(m: dict | None) -> str:
    """A metric entry's verdict kind (crossover.json from before "verdict": from its comparisons)."""
    if not m:
        return "not compared"
    return m.get("verdict") or verdict_kind(m["analysis"])


def short(m: dict) -> str:
    """A metric's verdict for a summary line: its first sentence, then what it rests on (the caveat)."""
    rec = m["recommendation"]
    cav = m.get("caveat") or ""
    body = rec[: len(rec) - len(cav)].rstrip() if cav and rec.endswith(cav) else rec
    return " ".join(x for x in (first_sentence(_strip(body)), cav) if x)


def headline(res: dict, metric: str = PRIMARY) -> list[tuple[str, str, str]]:
    """(workload, sentence, kind) per workload, from the primary metric's verdict (see :func:`short`).

    A workload never compared is listed as "not compared", with the sentence that says why.
    """
    out = []
    for wl, per in res["workloads"].items():
        if metric in per:
            out.append((wl, short(per[metric]), kind_of(per[metric])))
        elif (res.get("coverage") or {}).get(wl, {}).get("status") == "not compared":
            out.append((wl, _strip(res["coverage"][wl].get("recommendation", "not compared")), "not compared"))
    order = {"cross": 0, "mixed": 1, "baseline": 2, "baseline-some": 2, "spec": 3, "spec-some": 3, "tie": 4,
             "inconclusive": 4, "not compared": 5}
    return sorted(out, key=lambda t: (order.get(t[2], 5), t[0] == "all", t[0]))


def _policy(xs: list[dict]) -> str:
    """Crossovers (in C order) as an on/off rule in running-batch terms."""
    on = xs[0]["direction"] == "spec_to_baseline"
    parts = []
    for i, x in enumerate(xs):
        v = f"≈{_c(x['estimate'])} ({_c(x['ci_low'])}–{_c(x['ci_high'])})"
        parts.append(f"{'on' if on else 'off'} below a running batch of {v}" if i == 0
                     else f"{'on' if on else 'off'} from there to {v}")
        on = not on
    return "speculation " + ", ".join(parts) + f", {'on' if on else 'off'} above it"


def sglang_hint(doc: dict, res: dict, metric: str = PRIMARY) -> str | None:
    """For an SGLang speculative server: the throughput crossover(s) in running-batch terms."""
    server = servers(doc).get(res["spec"])
    if not server or server.get("engine") != "sglang":
        return None
    mrr = max_running(server)
    if mrr is None:
        return None
    inside, beyond = [], []
    for wl, per in res["workloads"].items():
        if metric not in per:
            continue
        xs = sorted(per[metric]["analysis"]["crossovers"], key=lambda x: x["estimate"])
        if not xs:
            continue
        if all(x["ci_high"] <= mrr for x in xs):
            inside.append(f"{wl}: {_policy(xs)}")
        else:
            beyond.append(f"{', '.join('C≈' + _c(x['estimate']) for x in xs if x['ci_high'] > mrr)} ({wl})")
    if not inside and not beyond:
        return None
    parts = []
    if inside:
        parts.append(f"For SGLang: at concurrency ≤ max_running_requests ({mrr}) the running batch is ≈ C, so as an "
                     f"adaptive threshold in batch-size terms — {'; '.join(inside)}.")
    if beyond:
        parts.append(f"The crossover at {', '.join(beyond)} lies beyond max_running_requests ({mrr}): there the "
                     "running batch stays at that cap and further requests queue, so it is not a batch-size threshold.")
    if (server.get("server_info") or {}).get("speculative_adaptive"):
        parts.append("(The speculative server already ran with speculative_adaptive on.)")
    return " ".join(parts)


# --------------------------------------------------------------------------- charts


def _xs(per_target: dict[str, dict[int, Slice]]) -> list[int]:
    return sorted({c for t in per_target.values() for c in t})


def _crossover_marks(a: dict | None) -> tuple[list[Span], list[VLine]]:
    spans, lines = [], []
    if not a:
        return spans, lines
    pct = f"{a['confidence'] * 100:g} %"
    for x in a["crossovers"]:
        label = f"C≈{_c(x['estimate'])}"
        spans.append(Span(x["ci_low"], x["ci_high"], CROSS_COLOUR,
                          f"crossover {label}, {pct} interval {_c(x['ci_low'])}–{_c(x['ci_high'])}"))
        lines.append(VLine(x["estimate"], CROSS_COLOUR, label))
    for x in a.get("candidates", []):
        lines.append(VLine(x["estimate"], TIE_COLOUR, f"C≈{_c(x['estimate'])}?"))
    return spans, lines


def _tip(sl: Slice, text: str) -> str:
    extra = "".join(f"\n⚠ {t}" for _, t in sl.flags)
    return f"{sl.target} C={sl.c}: {text}{extra}"


def throughput_chart(res: dict, wl: str, per_target: dict[str, dict[int, Slice]], a: dict | None) -> Chart:
    conf = res["confidence"]
    series = []
    for label, color in ((res["baseline"], BASELINE_COLOUR), (res["spec"], SPEC_COLOUR)):
        st = per_target.get(label, {})
        cs = sorted(st)
        ys = [st[c].get(PRIMARY) for c in cs]
        ivs = [mean_interval(st[c].rate_bins, conf) for c in cs]
        band = ([iv[0] if iv else None for iv in ivs], [iv[1] if iv else None for iv in ivs])
        tips = [_tip(st[c], f"{y:.1f} tok/s" + (f" ({iv[0]:.0f}–{iv[1]:.0f})" if iv else ""))
                for c, y, iv in zip(cs, ys, ivs)]
        series.append(Series(label, cs, ys, color, band=band, tips=tips, flags=[st[c].severity for c in cs]))
    spans, lines = _crossover_marks(a)
    return Chart("Output throughput", series, ylabel="tokens/s", spans=spans, vlines=lines, yzero=True,
                 note=f"bands: {conf * 100:g} % interval of each stage's mean over its time bins; "
                      "purple: crossover and its interval")


def delta_chart(res: dict, a: dict | None, label: str = "output throughput") -> Chart:
    if not a:
        return Chart(f"Δ {label}, speculation vs baseline", [], empty="no stage measured by both targets")
    comps = [c for c in a["comparisons"] if c["delta"] is not None]
    cs = [c["concurrency"] for c in comps]
    ys = [c["delta"] * 100 for c in comps]
    lo = [c["ci_low"] * 100 if c["ci_low"] is not None else None for c in comps]
    hi = [c["ci_high"] * 100 if c["ci_high"] is not None else None for c in comps]
    tips = [f"C={c['concurrency']}: Δ {c['delta'] * 100:+.1f} %"
            + (f" [{c['ci_low'] * 100:+.1f}, {c['ci_high'] * 100:+.1f}]" if c["ci_low"] is not None else "")
            + f" → {winner_word(c)}" for c in comps]
    spans, lines = _crossover_marks(a)
    s = Series("Δ % (spec − baseline) / baseline", cs, ys, "#334155", band=(lo, hi), tips=tips)
    return Chart(f"Δ {label}, speculation vs baseline", [s], ylabel="Δ %", ysuffix="%", hline=0.0, spans=spans,
                 vlines=lines, note=f"{a['confidence'] * 100:g} % interval per stage; above 0: speculation better"
                 if a["higher_is_better"] else f"{a['confidence'] * 100:g} % interval per stage; below 0: speculation better")


def latency_chart(res: dict, per_target: dict[str, dict[int, Slice]], metric: str, name: str) -> Chart:
    series = []
    for label, color in ((res["baseline"], BASELINE_COLOUR), (res["spec"], SPEC_COLOUR)):
        st = per_target.get(label, {})
        cs = sorted(st)
        for p, dash in (("p50", False), ("p99", True)):
            ys = [st[c].get(metric, p) for c in cs]
            tips = [_tip(st[c], f"{name} {p} {y:.2f} ms") if y is not None else "" for c, y in zip(cs, ys)]
            series.append(Series(f"{label} {p}", cs, ys, color, dash=dash, tips=tips,
                                 flags=[st[c].severity for c in cs]))
    return Chart(f"{name} p50 and p99", series, ylabel="ms (log scale)", ylog=True,
                 note="solid: p50, dashed: p99", empty=f"no {name} samples")


def acceptance_chart(res: dict, per_target: dict[str, dict[int, Slice]]) -> Chart:
    series = []
    spec = per_target.get(res["spec"], {})
    cs = sorted(spec)
    acc = [spec[c].get("accept_length", "mean") for c in cs]
    if any(v is not None for v in acc):
        tips = [_tip(spec[c], f"accept length {v:.2f} tokens/verify step"
                     + (f", accept rate {spec[c].d['accept_rate'] * 100:.0f} %" if spec[c].d.get("accept_rate") else ""))
                if v is not None else "" for c, v in zip(cs, acc)]
        series.append(Series(f"{res['spec']} accept length", cs, acc, SPEC_COLOUR, tips=tips))
    for label, color in ((res["spec"], SPEC_COLOUR), (res["baseline"], BASELINE_COLOUR)):
        st = per_target.get(label, {})
        xs = sorted(st)
        ys = [st[c].get("tokens_per_chunk", "mean") for c in xs]
        tips = [_tip(st[c], f"{v:.2f} tokens per chunk") if v is not None else "" for c, v in zip(xs, ys)]
        series.append(Series(f"{label} tokens/chunk", xs, ys, color, dash=True, tips=tips,
                             flags=[("warn" if st[c].d.get("token_counts") == "approximate" else "") for c in xs]))
    note = "accept length: server-reported tokens per verify step (mean); dashed: tokens per streamed chunk (mean)"
    if not any(v is not None for v in acc):
        note = "the server reported no accept length; dashed: tokens per streamed chunk (mean)"
    return Chart("Accept length and tokens per chunk", series, ylabel="tokens", yzero=True, note=note)


NINES = [(0.0, "p0"), (0.30103, "p50"), (1.0, "p90"), (2.0, "p99"), (3.0, "p99.9"), (4.0, "p99.99"), (5.0, "p99.999")]


def hdr_chart(res: dict, per_target: dict[str, dict[int, Slice]], c: int, metric: str, name: str) -> Chart:
    series = []
    m = HIST_METRICS[metric]
    top = 0.0
    for label, color in ((res["baseline"], BASELINE_COLOUR), (res["spec"], SPEC_COLOUR)):
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


# --------------------------------------------------------------------------- HTML pieces


def _figure(chart: Chart, cls: str = "", width: int = 560, height: int = 300) -> str:
    dashed = ' stroke-dasharray="4 3"'
    legend = "".join(
        f'<span class="key"><svg width="22" height="10"><line x1="1" x2="21" y1="5" y2="5" stroke="{col}" '
        f'stroke-width="2.4"{dashed if dash else ""}/></svg>{escape(lbl)}</span>'
        for lbl, col, dash in legend_items(chart))
    if chart.spans:
        legend += f'<span class="key"><span class="swatch" style="background:{CROSS_COLOUR}"></span>crossover interval</span>'
    flagged = any(f for s in chart.series for f in (s.flags or []))
    if flagged:
        legend += ('<span class="key"><span class="ring" style="border-color:#d39200"></span>client-bound / approx.</span>'
                   '<span class="key"><span class="ring" style="border-color:#d42a2a"></span>failures / incomplete</span>')
    note = f'<div class="note">{escape(chart.note)}</div>' if chart.note else ""
    return (f'<figure class="fig {cls}"><figcaption>{escape(chart.title)}</figcaption>{note}'
            f'<div class="legend">{legend}</div>{svg(chart, width, height)}</figure>')


def _chip(kind: str) -> str:
    text, cls = KIND_CHIP.get(kind, (kind, "chip-tie"))
    return f'<span class="chip {cls}">{escape(text)}</span>'


VERDICT_CLS = {"spec": "v-spec", "baseline": "v-base", "tie": "v-tie"}


def winner_word(c: dict) -> str:
    """A stage's "winner" cell: the better target's role, "tie", or "inconclusive" for a tie too wide to call."""
    if c["verdict"] != "tie":
        return c["verdict"]
    return "inconclusive" if c.get("wide") else "tie"


def _forest(c: dict, scale: float) -> str:
    """A tiny interval bar: the Δ and its interval around zero."""
    if c["ci_low"] is None or c["delta"] is None:
        return ""
    w, h = 120, 14

    def X(v):
        return w / 2 + max(-1.0, min(1.0, v / scale)) * (w / 2 - 3)

    col = {"spec": SPEC_COLOUR, "baseline": BASELINE_COLOUR}.get(c["verdict"], TIE_COLOUR)
    return (f'<svg class="forest" width="{w}" height="{h}"><line x1="{w / 2}" x2="{w / 2}" y1="0" y2="{h}" '
            f'stroke="#98a2b3" stroke-width="1"/><line x1="{X(c["ci_low"]):.1f}" x2="{X(c["ci_high"]):.1f}" y1="7" '
            f'y2="7" stroke="{col}" stroke-width="4" stroke-linecap="round" stroke-opacity="0.55"/>'
            f'<circle cx="{X(c["delta"]):.1f}" cy="7" r="3.2" fill="{col}"/></svg>')


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


def comparison_table(res: dict, per_metric: dict, metric: str, per_target: dict[str, dict[int, Slice]]) -> str:
    m = per_metric[metric]
    a = m["analysis"]
    unit = m["unit"]
    comps = a["comparisons"]
    scale = max([abs(v) for c in comps for v in (c["ci_low"], c["ci_high"]) if v is not None] + [0.05])
    nd = 1 if unit in ("tok/s", "ms") else 3
    rows = []
    for c in comps:
        cc = c["concurrency"]
        d, lo, hi = c["delta"], c["ci_low"], c["ci_high"]
        flags = []
        for label in (res["baseline"], res["spec"]):
            sl = per_target.get(label, {}).get(cc)
            if sl:
                flags += [(k, label, t) for k, t in sl.flags]
        winner = {"spec": res["spec"], "baseline": res["baseline"]}.get(c["verdict"], winner_word(c))
        note = f' title="{escape(c["note"])}"' if c.get("note") else ""
        rows.append(
            f'<tr><td class="num">{cc}</td><td class="num">{c["mean_baseline"]:.{nd}f}</td>'
            f'<td class="num">{c["mean_spec"]:.{nd}f}</td>'
            f'<td class="num">{"–" if d is None else f"{d * 100:+.1f}"}</td>'
            f'<td class="num"{note}>{"–" if lo is None else f"[{lo * 100:+.1f}, {hi * 100:+.1f}]"}</td>'
            f'<td>{_forest(c, scale)}</td><td class="{VERDICT_CLS.get(c["verdict"], "v-tie")}">{escape(winner)}</td>'
            f'<td class="flags">{_flag_badges(flags)}</td></tr>')
    xo = ""
    for x in a["crossovers"]:
        arrow = "speculation stops paying off" if x["direction"] == "spec_to_baseline" else "speculation starts paying off"
        xo += (f'<div class="xo">crossover at <b>C≈{_c(x["estimate"])}</b> ({a["confidence"] * 100:g} % interval '
               f'{_c(x["ci_low"])}–{_c(x["ci_high"])}), between measured C={x["low_c"]} and C={x["high_c"]}: {arrow}</div>')
    for x in a.get("candidates", []):
        xo += (f'<div class="xo cand">unconfirmed flip near C≈{_c(x["estimate"])} (significant stage by stage, '
               f'not across the whole ladder)</div>')
    return (f'<table class="cmp"><thead><tr><th>C</th><th>{escape(res["baseline"])}</th><th>{escape(res["spec"])}</th>'
            f'<th>Δ %</th><th>{a["confidence"] * 100:g} % interval</th><th></th><th>winner</th><th>flags</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table><div class="unit">{escape(m["label"])} in {escape(unit)}; '
            f'Δ = (spec − baseline) / baseline{"" if a["higher_is_better"] else "; lower is better"}</div>{xo}')


def _pct_short(delta: float) -> str:
    """Δ as a short percentage; beyond ±1000 % as a ratio (×12), which reads better."""
    if delta >= 9.5:
        return f"×{1 + delta:.0f}"
    return f"{delta * 100:+.0f}%"


def verdict_matrix(res: dict, per_metric: dict) -> str:
    cs = sorted({c["concurrency"] for m in per_metric.values() for c in m["analysis"]["comparisons"]})
    head = "".join(f"<th>C={c}</th>" for c in cs)
    rows = []
    for name, m in per_metric.items():
        by_c = {c["concurrency"]: c for c in m["analysis"]["comparisons"]}
        cells = []
        for c in cs:
            x = by_c.get(c)
            if x is None:
                cells.append('<td class="m-none">·</td>')
                continue
            d = "–" if x["delta"] is None else _pct_short(x["delta"])
            tip = f"{m['label']} at C={c}: {winner_word(x)}"
            if x["ci_low"] is not None:
                tip += f", Δ {x['delta'] * 100:+.1f} % [{x['ci_low'] * 100:+.1f}, {x['ci_high'] * 100:+.1f}]"
            cells.append(f'<td class="m-{x["verdict"]}" title="{escape(tip)}">{d}</td>')
        rows.append(f'<tr><th class="mname">{escape(m["label"])}</th>{"".join(cells)}</tr>')
    return (f'<table class="matrix"><thead><tr><th></th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
            f'<div class="unit">cell: Δ of speculation vs baseline; orange: speculation better, blue: baseline better, '
            f'grey: tie at the {res["confidence"] * 100:g} % level (per stage)</div>')


def stage_table(res: dict, per_target: dict[str, dict[int, Slice]]) -> str:
    head = ["target", "C", "ok", "failed", "tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "TPOT p50",
            "E2E p50", "tok/chunk", "accept len", "accept rate", "tokens", "client"]
    rows = []

    def f(v, nd=2):
        return "–" if v is None else f"{v:.{nd}f}"

    for label in (res["baseline"], res["spec"]):
        for c, sl in sorted(per_target.get(label, {}).items()):
            req = sl.d.get("requests", {})
            bound = any(k == "client" for k, _ in sl.flags)
            ar = sl.d.get("accept_rate")
            cells = [escape(label), str(c), str(req.get("completed", "–")), str(req.get("failed", "–")),
                     f(sl.get(PRIMARY), 1), f(sl.get("ttft", "p50")), f(sl.get("ttft", "p99")), f(sl.get("itl", "p50")),
                     f(sl.get("itl", "p99")), f(sl.get("tpot", "p50")), f(sl.get("e2e", "p50"), 1),
                     f(sl.get("tokens_per_chunk", "mean")), f(sl.get("accept_length", "mean")),
                     "–" if ar is None else f"{ar * 100:.0f} %",
                     '<span class="b-warn badge">approx.</span>' if sl.d.get("token_counts") == "approximate" else "exact",
                     '<span class="b-warn badge">bound</span>' if bound else "ok"]
            cls = ' class="rowfail"' if req.get("failed") or sl.incomplete else ""
            rows.append(f"<tr{cls}>" + "".join(f"<td>{v}</td>" for v in cells) + "</tr>")
    return (f'<table class="stages"><thead><tr>{"".join(f"<th>{h}</th>" for h in head)}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table><div class="unit">latencies in ms; tok/s = output tokens '
            f'arriving per second of the steady window; accept len = server-reported tokens per verify step</div>')


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "workload"


# --------------------------------------------------------------------------- the page


@dataclass
class Page:
    html: str
    charts: dict[str, list[Chart]]
    """workload → the charts that also become PNGs."""


def build(doc: dict, res: dict, dropped: list[str] | None = None, title: str = "") -> Page:
    run = doc.get("run", {})
    sl = slices(doc)
    base, spec = res["baseline"], res["spec"]
    conf = res["confidence"]
    pngs: dict[str, list[Chart]] = {}
    sections, nav = [], []
    wls = [w for w in res["workloads"] if w != "all"] + (["all"] if "all" in res["workloads"] else [])
    for wl in wls:
        per_metric = res["workloads"][wl]
        per_target = sl.get(wl, {})
        a = per_metric.get(PRIMARY, {}).get("analysis")
        anchor = "wl-" + _slug(wl)
        cov = (res.get("coverage") or {}).get(wl, {})
        kind = kind_of(per_metric.get(PRIMARY))
        nav.append(f'<a href="#{anchor}">{escape(wl)} {_chip(kind)}</a>')
        thr = throughput_chart(res, wl, per_target, a)
        dlt = delta_chart(res, a)
        ttft = latency_chart(res, per_target, "ttft", "TTFT")
        itl = latency_chart(res, per_target, "itl", "ITL")
        acc = acceptance_chart(res, per_target)
        pngs[wl] = [thr, dlt, ttft, itl, acc]
        # HDR percentile curves: one pair per concurrency, the one nearest the crossover shown first
        cs = sorted(set(per_target.get(base, {})) & set(per_target.get(spec, {}))) or _xs(per_target)
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
                          + "".join(_figure(hdr_chart(res, per_target, c, m, n)) for m, n in LATENCIES) + "</div>")
        hdr = (f'<div class="tabs" data-tabs><div class="tabbar"><span class="tablabel">stage:</span>{"".join(tabs)}</div>'
               f'{"".join(panels)}</div>') if cs else '<p class="muted">no stage to show</p>'
        # tables: one tab per metric
        mtabs, mpanels = [], []
        for i, (name, m) in enumerate(per_metric.items()):
            pid = f"{anchor}-tbl-{_slug(name)}"
            mtabs.append(f'<button type="button" data-panel="{pid}" class="{"on" if i == 0 else ""}">'
                         f'{escape(m["label"])}</button>')
            mpanels.append(f'<div class="tabpanel" id="{pid}"{"" if i == 0 else " hidden"}>'
                           f'{comparison_table(res, per_metric, name, per_target)}</div>')
        table = (f'<div class="tabs" data-tabs><div class="tabbar">{"".join(mtabs)}</div>{"".join(mpanels)}</div>'
                 if per_metric else '<p class="muted">no concurrency measured by both targets</p>')
        recs = "".join(
            f'<li>{_chip(kind_of(m))} <b>{escape(m["label"])}</b>: {escape(_strip(m["recommendation"]))}</li>'
            for m in per_metric.values())
        if PRIMARY in per_metric:
            lead = escape(_cap(_strip(per_metric[PRIMARY]["recommendation"])))
        else:  # never compared (or not for this metric): say so, never "no difference"
            lead = escape(_cap(_strip(cov.get("recommendation") or "not compared: no concurrency has output "
                                      "throughput measured by both targets.")))
        title_wl = "all workloads together" if wl == "all" else wl
        sections.append(f"""
<section class="card workload" id="{anchor}">
  <h2>{escape(title_wl)} {_chip(kind)}</h2>
  <p class="lead">{lead}</p>
  {_truth_html(per_metric.get(PRIMARY, {}))}
  <div class="grid2">{_figure(thr)}{_figure(dlt)}</div>
  <h3>Who wins where</h3>
  {verdict_matrix(res, per_metric) if per_metric else ""}
  <h3>Crossover table</h3>
  {table}
  <h3>Recommendations, every metric</h3>
  <ul class="recs">{recs}</ul>
  <h3>Latency and acceptance vs concurrency</h3>
  <div class="grid3">{_figure(ttft, width=400, height=290)}{_figure(itl, width=400, height=290)}{_figure(acc, width=400, height=290)}</div>
  <h3>Latency by percentile (HDR)</h3>
  {hdr}
  <details><summary>Every stage figure</summary>{stage_table(res, per_target)}</details>
</section>""")

    # summary
    items = headline(res)
    lines = "<ul>" + "".join(f'<li>{_chip(kind)} <b>{escape(wl)}</b>: {escape(text)}</li>'
                             for wl, text, kind in items) + "</ul>" if len(items) > 1 else ""
    hint = sglang_hint(doc, res)
    hint_html = f'<p class="hint">{escape(hint)}</p>' if hint else ""
    top = escape(_top_sentence(res))
    if len(items) == 1:
        top = f"{_chip(items[0][2])} " + top
    flags_html = _flags_card(sl, res, dropped or [], run)
    meta_html = _meta_card(doc, res)
    started = run.get("started_unix")
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)) if isinstance(started, (int, float)) else ""
    html = PAGE.format(
        title=escape(title or "loadgen report"),
        css=CSS, js=JS,
        heading=escape(title or "loadgen report"),
        sub=escape(" · ".join(x for x in (when, _wall(run), f"{len(doc['stages'])} stages",
                                           f"loadgen {run.get('loadgen_version', __version__)}") if x)),
        top=top,
        lines=lines, hint=hint_html, conf=f"{conf * 100:g}",
        nav="".join(nav), flags=flags_html, facts=escape(_facts_line(doc, res)), meta=meta_html, sections="".join(sections),
        generated=escape(f"report by loadgen {__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"),
    )
    return Page(html, pngs)


def _wall(run: dict) -> str:
    a, b = run.get("started_unix"), run.get("finished_unix")
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b >= a:
        return f"{(b - a) / 60:.1f} min" if b - a >= 60 else f"{b - a:.0f} s"
    return ""


def _target_word(label: str, server: dict | None) -> str:
    info = (server or {}).get("server_info") or {}
    bits = [server.get("engine")] if server and server.get("engine") not in (None, "unknown") else []
    if info.get("speculative_algorithm"):
        bits.append(str(info["speculative_algorithm"]))
    return f"{label} ({', '.join(bits)})" if bits else label


def _facts_line(doc: dict, res: dict) -> str:
    run = doc.get("run", {})
    srv = servers(doc)
    ladder = run.get("ladder") or sorted({s["concurrency"] for s in doc.get("stages", [])})
    wls = run.get("workloads") or [w for w in res["workloads"] if w != "all"]
    parts = [f"{_target_word(res['baseline'], srv.get(res['baseline']))} vs "
             f"{_target_word(res['spec'], srv.get(res['spec']))}",
             "ladder " + ",".join(map(str, ladder)), "workloads " + ", ".join(map(str, wls))]
    if run.get("simulator"):
        parts.append(f"simulator {run['simulator'].get('profile', '')}".strip())
    return " · ".join(parts)


def _top_sentence(res: dict) -> str:
    """The one-line answer at the top of the page."""
    items = headline(res)
    if not items:
        return "No concurrency was measured by both targets, so nothing can be compared."
    crossing = [(wl, t) for wl, t, k in items if k == "cross"]
    if len(items) == 1:
        return _cap(items[0][1])  # headline's short form: first sentence and what it rests on
    if crossing:
        wl, t = crossing[0]
        t = first_sentence(t).rstrip(".")
        more = len(crossing) - 1
        return f"{wl}: {t}" + (f" — and {more} more workload{'s' if more > 1 else ''} cross over, "
                                                   "see below." if more else ".")
    kinds = {k for _, _, k in items}
    caveats = any((per.get(PRIMARY) or {}).get("caveat") for per in res["workloads"].values())
    rests = " (see below what each verdict rests on)." if caveats else "."
    if kinds == {"spec"}:
        return "Speculation wins output throughput at every measured concurrency in every workload" + rests
    if kinds == {"baseline"}:
        return "The baseline wins output throughput at every measured concurrency in every workload" + rests
    never = [wl for wl, _, k in items if k == "not compared"]
    if never:
        return (f"No output-throughput crossover in any workload compared; {', '.join(never)} "
                f"{'was' if len(never) == 1 else 'were'} not compared. The verdict per workload is below.")
    return "No output-throughput crossover in any workload; the verdict per workload is below."


def _flags_card(sl, res: dict, dropped: list[str], run: dict) -> str:
    from loadgen.analysis.compare import run_cut_words

    items = []
    advice: dict[str, list[str]] = {}
    for wl, per_target in sl.items():
        for label, by_c in per_target.items():
            for c, s in sorted(by_c.items()):
                for kind, text in s.flags:
                    items.append((kind, f"{wl} · {label} C={c}", text))
                if any(k == "client" for k, _ in s.flags):
                    for st in s.stages:
                        tip = (st.get("client") or {}).get("advice")
                        if tip and f"{label} C={c}" not in advice.setdefault(tip, []):
                            advice[tip].append(f"{label} C={c}")
    for d in dropped:
        items.append(("fail", "results file", d))
    # planned stages that neither finished nor were analysed: the verdicts leave them out (crossover.Scope)
    for wl, cov in (res.get("coverage") or {}).items():
        for m in cov.get("missing", []):
            items.append(("missing", f"{wl} C={m['concurrency']}", f"not measured by both targets: {m['why']}"))
    cut = run_cut_words(run)
    if cut:
        items.append(("incomplete", "run", f"{cut}; only the stages that finished are analysed"))
    if not items:
        return ('<section class="card ok"><b>No flags:</b> no stage was client-bound, no request failed, '
                'token counts are exact.</section>')
    counts = {}
    for kind, _, _ in items:
        counts[kind] = counts.get(kind, 0) + 1
    names = {"client": "client-bound", "fail": "with failures", "approx": "approximate token counts",
             "incomplete": "incomplete", "note": "notes", "missing": "planned but not compared"}
    summary = ", ".join(f"{n} {names.get(k, k)}" for k, n in counts.items())
    lis = "".join(f'<li class="f-{k}"><b>{escape(who)}</b>: {escape(text)}</li>' for k, who, text in items)
    explain = ""
    if "client" in counts and advice:
        # the self-check's own advice for what it measured (stage.ClientHealth), not a fixed remedy
        tips = "; ".join(f"{escape(tip)} ({escape(', '.join(who))})" for tip, who in advice.items())
        explain += ("<p>Client-bound: loadgen itself distorted the figures there (latencies over-stated, throughput "
                    f"under-stated); before trusting those stages: {tips}.</p>")
    elif "client" in counts:  # results from before the self-check gave advice
        explain += ("<p>Client-bound: loadgen itself was too busy to stamp chunks on time, so latencies there may be "
                    "over-stated and throughput under-stated; rerun with more <code>--processes</code> or on a quieter "
                    "machine before trusting those stages.</p>")
    if "approx" in counts:
        explain += ("<p>Approximate token counts: the server sent no per-chunk usage, so tokens per chunk and ITL are "
                    "estimated (docs/metrics.md §Token counts).</p>")
    return (f'<section class="card flags"><h2>Flags <small>{escape(summary)}</small></h2>{explain}'
            f'<details{" open" if len(items) <= 8 else ""}><summary>{len(items)} flagged item(s)</summary>'
            f'<ul>{lis}</ul></details></section>')


def _meta_card(doc: dict, res: dict) -> str:
    run = doc.get("run", {})
    srv = servers(doc)
    roles = {res["baseline"]: "baseline", res["spec"]: "speculative"}
    targets = run.get("targets") or [{"label": lbl} for lbl in roles]
    rows = []
    for t in targets:
        label = t.get("label", "?")
        s = srv.get(label) or {}
        info = s.get("server_info") or {}
        algo = info.get("speculative_algorithm")
        spec_txt = "–"
        if algo:
            bits = [str(algo)] + [f"{k.replace('speculative_', '')}={info[k]}" for k in
                                  ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
                                  if info.get(k) is not None]
            spec_txt = ", ".join(bits)
        elif s.get("speculative") is False:
            spec_txt = "off"
        model = ", ".join(map(str, s.get("models") or [])) or info.get("model_path") or "–"
        mrr = max_running(s)
        rows.append("<tr>" + "".join(f"<td>{escape(str(v))}</td>" for v in (
            label, roles.get(label, "–"), t.get("url", "–"), t.get("protocol", "–"), s.get("engine", "–"),
            info.get("version", "–"), model, spec_txt, mrr if mrr else "–")) + "</tr>")
    ladder = run.get("ladder") or sorted({s["concurrency"] for s in doc.get("stages", [])})
    wls = run.get("workloads") or ([run["workload"]] if run.get("workload") else list(res["workloads"]))
    started, finished = run.get("started_unix"), run.get("finished_unix")
    dur = f"{(finished - started) / 60:.1f} min" if isinstance(started, (int, float)) and isinstance(finished, (int, float)) else "–"
    sim = run.get("simulator")
    facts = [("ladder", ", ".join(map(str, ladder))), ("workloads", ", ".join(map(str, wls))),
             ("stages", str(len(doc.get("stages", [])))), ("wall time", dur),
             ("confidence", f"{res['confidence'] * 100:g} % (crossovers: whole-ladder, Šidák)"),
             ("seed", str(run.get("seed", "–"))), ("loadgen", str(run.get("loadgen_version", "–")))]
    if sim:
        facts.insert(2, ("simulator", ", ".join(f"{k} {v}" for k, v in sim.items())))
    if run.get("combined_from"):
        facts.append(("combined from", ", ".join(map(str, run["combined_from"]))))
    if run.get("argv"):
        facts.append(("command", "loadgen " + " ".join(map(str, run["argv"]))))
    dl = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts)
    raw = escape(orjson.dumps(srv, option=orjson.OPT_INDENT_2).decode()) if srv else "none recorded"
    return f"""<section class="card meta"><h2>Run</h2>
<table class="targets"><thead><tr><th>target</th><th>role</th><th>URL</th><th>protocol</th><th>engine</th><th>version</th>
<th>model</th><th>speculation</th><th>max running</th></tr></thead><tbody>{"".join(rows)}</tbody></table>
<dl class="facts">{dl}</dl>
<details><summary>What each server said about itself</summary><pre>{raw}</pre></details></section>"""


# --------------------------------------------------------------------------- entry points


def write_pngs(out_dir: Path, charts: dict[str, list[Chart]]) -> list[Path]:
    """Two PNGs per workload: throughput (+ Δ) and latency (+ acceptance)."""
    from loadgen.report.charts import png

    paths = []
    for wl, (thr, dlt, ttft, itl, acc) in charts.items():
        slug = _slug(wl)
        paths.append(png([thr, dlt], out_dir / "plots" / f"{slug}-throughput.png", title=f"{wl}: output throughput"))
        paths.append(png([ttft, itl, acc], out_dir / "plots" / f"{slug}-latency.png",
                         title=f"{wl}: latency and acceptance"))
    return paths


def render(out_dir: str | Path, *, doc: dict | None = None, res: dict | None = None, png: bool = True,
           title: str = "") -> Path:
    """Write ``out_dir/report.html`` (and ``out_dir/plots/*.png`` unless ``png`` is False); return its path."""
    out = Path(out_dir)
    if doc is None:
        doc = load(out / "run.json")
    doc, dropped = usable(doc)
    if not doc["stages"]:
        raise LoadgenError(f"{out / 'run.json'}: no finished stage to report")
    if res is None:
        res = analysis(out, doc)
    page = build(doc, res, dropped, title or f"loadgen report: {out.resolve().name}")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.html"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(page.html, encoding="utf-8")
    tmp.replace(path)
    if png:
        try:
            write_pngs(out, page.charts)
        except ImportError:
            pass  # matplotlib missing: the HTML is complete without the PNGs
    return path


# --------------------------------------------------------------------------- page template

CSS = """
:root{--ink:#1f2733;--muted:#5b6573;--line:#e4e7ec;--bg:#f4f5f7;--card:#fff;--base:#3a68c4;--spec:#e0641a;
--cross:#7a3fc2;--warn:#d39200;--fail:#d42a2a;--tie:#8b94a3}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,
"Helvetica Neue",Arial,sans-serif}
main{max-width:1240px;margin:0 auto;padding:20px 24px 40px}
header.top{display:flex;justify-content:space-between;align-items:flex-end;gap:16px;margin:6px 0 14px}
header.top h1{font-size:22px;margin:0;letter-spacing:-.01em}
header.top .sub{color:var(--muted);font-size:13px}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:16px 20px;margin:14px 0;
box-shadow:0 1px 2px rgba(16,24,40,.04)}
.card h2{font-size:17px;margin:0 0 10px;display:flex;align-items:center;gap:10px}
.card h2 small{font-weight:400;color:var(--muted);font-size:13px}
.card h3{font-size:14px;margin:22px 0 8px;color:#344054;border-top:1px solid var(--line);padding-top:14px}
.summary .answer{font-size:19px;font-weight:600;margin:2px 0 10px;line-height:1.35}
.summary ul{margin:0;padding-left:0;list-style:none}
.summary li{margin:5px 0}
.hint{background:#f5f0fd;border-left:3px solid var(--cross);padding:8px 12px;border-radius:4px;margin:12px 0 0}
.lead{font-size:15px;margin:0 0 12px}
.muted{color:var(--muted)}
.chip{display:inline-block;font-size:11px;font-weight:600;padding:1px 8px;border-radius:10px;vertical-align:1px;
white-space:nowrap}
.chip-cross{background:#efe6fb;color:var(--cross)}.chip-spec{background:#fdebdf;color:#b44b0c}
.chip-base{background:#e4ecfa;color:#2a519f}.chip-tie{background:#eef0f3;color:#4b5563}
.chip-none{background:#fff;color:#667085;border:1px dashed #98a2b3}
nav.wls{position:sticky;top:0;z-index:5;background:rgba(244,245,247,.94);backdrop-filter:blur(4px);
padding:8px 0;display:flex;gap:8px;flex-wrap:wrap;border-bottom:1px solid var(--line)}
nav.wls a{color:var(--ink);text-decoration:none;background:#fff;border:1px solid var(--line);border-radius:16px;
padding:3px 12px;font-weight:600;font-size:13px}
nav.wls a:hover{border-color:#98a2b3}
[hidden]{display:none!important}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(440px,1fr));gap:14px}
.grid3{display:grid;grid-template-columns:repeat(auto-fit,minmax(360px,1fr));gap:14px}
figure.fig{margin:0;border:1px solid var(--line);border-radius:8px;padding:10px 10px 4px;background:#fff;min-width:0}
figcaption{font-weight:600;font-size:13.5px}
.note{color:var(--muted);font-size:12px;margin-top:1px}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;color:#344054;margin:6px 0 2px}
.key{display:inline-flex;align-items:center;gap:5px}
.swatch{display:inline-block;width:14px;height:10px;opacity:.35;border-radius:2px}
.ring{display:inline-block;width:11px;height:11px;border:2px solid;border-radius:50%}
svg.chart{width:100%;height:auto;display:block;overflow:visible}
svg.chart text{font-family:inherit}
svg.chart .grid{stroke:#eceef2;stroke-width:1}
svg.chart .frame{fill:none;stroke:#d0d5dd;stroke-width:1}
svg.chart .zero{stroke:#667085;stroke-width:1.2}
svg.chart .tick{font-size:11px;fill:#667085}
svg.chart .alabel{font-size:11.5px;fill:#475467}
svg.chart .vlabel{font-size:11.5px;font-weight:700}
svg.chart .empty{font-size:13px;fill:#98a2b3}
svg.chart g.pt:hover .dot{r:5.5}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
table.cmp{font-size:13px;min-width:640px}
table.cmp th,table.cmp td{padding:4px 10px;border-bottom:1px solid var(--line);text-align:left;vertical-align:middle}
table.cmp th{font-size:12px;color:var(--muted);font-weight:600}
td.num{text-align:right;font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
.v-spec{color:#b44b0c;font-weight:700}.v-base{color:#2a519f;font-weight:700}.v-tie{color:var(--muted)}
.unit{font-size:12px;color:var(--muted);margin:6px 0}
.xo{margin:6px 0 0;padding:6px 10px;background:#f5f0fd;border-radius:6px;font-size:13px}
.xo.cand{background:#f2f4f7;color:var(--muted)}
table.matrix{font-size:12.5px}
table.matrix th,table.matrix td{padding:4px 8px;text-align:center;border:2px solid #fff}
table.matrix th.mname{text-align:right;font-weight:500;color:#344054;white-space:nowrap}
table.matrix thead th{font-size:12px;color:var(--muted);font-weight:600}
.m-spec{background:#fbd9c4;color:#8a3507;font-weight:600}.m-baseline{background:#cfdcf5;color:#1f3f80;font-weight:600}
.m-tie{background:#f0f1f4;color:#667085}.m-none{color:#c0c5cd}
.badge{display:inline-block;font-size:11px;padding:0 6px;border-radius:4px;margin:1px 2px;white-space:nowrap;cursor:help}
.badge small{opacity:.75}
.b-warn{background:#fdf3d7;color:#8a5a00}.b-fail{background:#fde2e2;color:#a61b1b}.b-note{background:#eef0f3;color:#4b5563}
.flags.card{border-left:4px solid var(--warn)}
.flags ul{margin:6px 0 0;padding-left:18px;font-size:13px}
.flags li.f-fail,.flags li.f-incomplete,.flags li.f-missing{color:#a61b1b}
.ok.card{border-left:4px solid #2f9e6b;font-size:13px}
ul.recs{padding-left:0;list-style:none;margin:0}
ul.recs li{margin:5px 0}
.tabs .tabbar{display:flex;flex-wrap:wrap;gap:6px;margin:4px 0 10px;align-items:center}
.tabbar .tablabel{font-size:12px;color:var(--muted);margin-right:2px}
.tabbar button{font:inherit;font-size:12.5px;border:1px solid var(--line);background:#fff;border-radius:14px;
padding:2px 11px;cursor:pointer;color:#344054}
.tabbar button.on{background:var(--ink);border-color:var(--ink);color:#fff}
details{margin-top:14px}
details summary{cursor:pointer;color:#344054;font-weight:600;font-size:13px}
table.stages{font-size:12px;margin-top:8px}
table.stages th,table.stages td{padding:3px 8px;border-bottom:1px solid var(--line);text-align:right;white-space:nowrap}
table.stages th:first-child,table.stages td:first-child{text-align:left}
tr.rowfail td{background:#fff5f5}
table.targets{font-size:12.5px;margin-bottom:10px}
table.targets th,table.targets td{padding:3px 10px;border-bottom:1px solid var(--line);text-align:left}
table.targets th{color:var(--muted);font-weight:600;font-size:12px}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px;margin:6px 0;font-size:13px}
dl.facts dt{color:var(--muted)}dl.facts dd{margin:0;word-break:break-word}
pre{font-size:11.5px;background:#f8f9fb;border:1px solid var(--line);border-radius:6px;padding:10px;overflow:auto;
max-height:360px}
code{font-size:12px;background:#f2f4f7;padding:0 4px;border-radius:3px;white-space:nowrap}
footer{color:var(--muted);font-size:12px;text-align:center;margin-top:24px}
@media print{nav.wls{position:static}.tabpanel[hidden]{display:block!important}}
"""

JS = """
(function(){
  var groups = document.querySelectorAll('[data-tabs]');
  Array.prototype.forEach.call(groups, function(group){
    var bar = group.querySelector('.tabbar');
    if (!bar) return;
    bar.addEventListener('click', function(ev){
      var b = ev.target.closest('button[data-panel]');
      if (!b) return;
      Array.prototype.forEach.call(bar.querySelectorAll('button[data-panel]'), function(x){
        x.classList.toggle('on', x === b);
      });
      Array.prototype.forEach.call(group.children, function(p){
        if (p.classList.contains('tabpanel')) p.hidden = p.id !== b.getAttribute('data-panel');
      });
    });
  });
})();
"""

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{css}</style></head>
<body><main>
<header class="top"><div><h1>{heading}</h1><div class="sub">{sub}</div><div class="sub">{facts}</div></div></header>
<section class="card summary"><h2>Verdict <small>output throughput, {conf} % intervals</small></h2>
<p class="answer">{top}</p>
{lines}{hint}</section>
{flags}
<nav class="wls">{nav}<a href="#run">run details</a></nav>
{sections}
<div id="run">{meta}</div>
<footer>{generated}</footer>
</main>
<script>{js}</script>
</body></html>
"""

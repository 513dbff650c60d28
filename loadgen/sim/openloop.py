"""The simulator's scheduler in virtual time under an open-loop arrival schedule: the truth for rate ladders.

In: a profile and mode, planned arrival offsets (wall seconds, as the client sends them), the
requests' (prompt tokens, acceptance, output tokens) from ``virtual.workload_mix``, the time scale
and the server's limits. Out: ``simulate_schedule`` → one :class:`VirtualRequest` per arrival
(planned, admitted, first token, end, every step's emission, or rejected); ``rate_truth`` →
a :class:`RateTruth`, the latency percentiles, throughput, batch and saturation of the requests
planned inside a window, for the schedule ``loadgen.timing.arrivals`` gives a rate and seed.

The real ``Scheduler`` plans and applies every forward, as in ``virtual.py``, with time advanced
by each forward's modelled cost. An arrival that lands while a forward runs waits for the next
forward (the live scheduler only looks at its queue between forwards); an idle server jumps to
the next arrival. Model time is wall time × ``time_scale`` (``--time-scale 5`` runs the
schedule five times faster), so a wall rate r is a model rate r / time_scale and every figure
here is given back in wall units, what loadgen measures against a scaled simulator.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Iterable, Iterator

from loadgen.errors import LoadgenError
from loadgen.sim import profiles
from loadgen.sim.profiles import Profile
from loadgen.sim.scheduler import QueueFull, Scheduler, SchedulerConfig, SimRequest
from loadgen.sim.truth import TruthRecord

LONG_RUN_REQUESTS = 4000
"""Window requests of a ``long_run``: p99 from 40 samples beyond it, 3√N = 190 queue noise."""


@dataclass(frozen=True)
class VirtualRequest:
    """One arrival's life, all times in wall seconds from the schedule's start."""

    planned_s: float
    admitted_s: float | None
    """When its prefill forward began; None when rejected."""
    first_token_s: float | None
    end_s: float
    """Its last token (or, rejected, its planned time: SGLang answers 503 at once)."""
    prompt_tokens: int
    output_tokens: int
    rejected: bool
    step_s: tuple[float, ...] = ()
    """End of every forward that gave it tokens (the first is its prefill); the stream's events."""
    step_tokens: tuple[int, ...] = ()

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.planned_s

    @property
    def tpot_s(self) -> float | None:
        """(end − first token) / (tokens − 1), loadgen's TPOT; None for one token or a rejection."""
        if self.first_token_s is None or self.output_tokens <= 1:
            return None
        return (self.end_s - self.first_token_s) / (self.output_tokens - 1)


@dataclass
class _Trace:
    """Per forward: its start (model ms), cost (model ms), running batch and waiting queue at its start."""

    start_ms: list[float]
    cost_ms: list[float]
    running: list[int]
    waiting: list[int]


def _simulate(prof: Profile, mode: str, arrivals_s: Iterable[float], mix: list[tuple[int, float, int]], *,
              time_scale: float, max_running: int, max_queued: int | None, seed: int,
              measured_until_s: float | None = None) -> tuple[list[VirtualRequest], _Trace]:
    """Run the schedule to its end, or (``measured_until_s``) until every arrival planned before that
    instant has finished, taking later arrivals only as far as they can share a batch with those."""
    if time_scale <= 0 or not math.isfinite(time_scale):
        raise LoadgenError(f"time scale must be > 0, got {time_scale:g}")
    if not mix:
        raise LoadgenError("an open-loop schedule needs at least one request shape in its mix")
    run = _Schedule(prof, mode, arrivals_s, mix, time_scale=time_scale, max_running=max_running,
                    max_queued=max_queued, seed=seed, measured_until_s=measured_until_s)
    sched = run.sched
    while not run.done():
        if not sched.running and not sched.waiting and run.nxt is not None:
            run.t_ms = max(run.t_ms, run.nxt * run.ms_per_s)  # idle until the next arrival
        run.take_arrivals()
        if not sched.running and not sched.waiting:
            continue
        run.forward()
    # what is still in flight (after the measured window) is cut off: left out of every summary
    return [r for r in run.out if r is not None], run.trace


class _Schedule:
    """One open-loop schedule going through the real scheduler in model time: the arrivals not yet sent, the
    requests in flight, each one's life once it ends, and (with ``measured_until_s``) how many measured
    arrivals are still to finish and to be admitted."""

    def __init__(self, prof: Profile, mode: str, arrivals_s: Iterable[float], mix: list[tuple[int, float, int]], *,
                 time_scale: float, max_running: int, max_queued: int | None, seed: int,
                 measured_until_s: float | None) -> None:
        self.finished: list[SimRequest] = []
        self.sched = Scheduler(SchedulerConfig(prof, mode, max_running=max_running, max_queued=max_queued),
                               on_finish=self.finished.append)
        self.mode, self.mix, self.max_queued, self.measured_until_s = mode, mix, max_queued, measured_until_s
        self.ms_per_s = 1000.0 * time_scale  # wall s → model ms
        self.rng = random.Random(f"loadgen.openloop:{seed}")
        self.it: Iterator[float] = iter(arrivals_s)
        self.nxt = next(self.it, None)
        self.out: list[VirtualRequest | None] = []
        self.live: dict[int, tuple[SimRequest, float]] = {}  # index → (request, admitted model ms)
        self.planned: list[float] = []
        self.open_measured = 0  # measured arrivals not yet finished
        self.unadmitted_measured = 0  # of those, still waiting
        self.trace = _Trace([], [], [], [])
        self.t_ms = 0.0
        self.last_planned = -math.inf

    def submit(self, i: int, at_s: float) -> None:
        n_prompt, p, n_out = self.mix[i % len(self.mix)]
        truth = TruthRecord(rid=str(i), route="virtual", stream=True, mode=self.mode, received_ns=0,
                            prompt_tokens=n_prompt, prompt_kind="virtual", accept_p=p)
        req = SimRequest(rid=str(i), prompt_tokens=n_prompt, target_tokens=n_out, finish_type="length",
                         accept_p=p, rng=random.Random(self.rng.random()), truth=truth)
        self.out.append(None)
        self.planned.append(at_s)
        try:
            self.sched.submit(req)
        except QueueFull:  # SGLang's 503 "The request queue is full.", at once
            self.out[i] = VirtualRequest(at_s, None, None, at_s, n_prompt, 0, True)
            return
        self.live[i] = (req, math.nan)
        if self.measured_until_s is not None and at_s < self.measured_until_s:
            self.open_measured += 1
            self.unadmitted_measured += 1

    def done(self) -> bool:
        if self.measured_until_s is not None and self.nxt is not None and self.nxt >= self.measured_until_s:
            return self.open_measured == 0
        return self.nxt is None and not self.sched.running and not self.sched.waiting

    def take_arrivals(self) -> None:
        """Arrivals up to now join the queue; past the measured window, only once every measured request is
        admitted: FIFO admits none of them before, and a saturated queue would hold them by the million."""
        until = self.measured_until_s
        while self.nxt is not None and self.nxt * self.ms_per_s <= self.t_ms:
            nxt = self.nxt
            if until is not None and nxt >= until and self.unadmitted_measured and self.max_queued is None:
                break
            if nxt < self.last_planned:
                raise LoadgenError(f"arrival times must not decrease: {nxt:g} s after {self.last_planned:g} s")
            self.last_planned = nxt
            self.submit(len(self.out), nxt)
            self.nxt = next(self.it, None)

    def forward(self) -> None:
        """One forward of the scheduler: its trace, the requests it admits, model time advanced by its cost, and
        the requests it finishes turned into their VirtualRequest."""
        sched, trace = self.sched, self.trace
        trace.start_ms.append(self.t_ms)
        trace.running.append(len(sched.running))
        trace.waiting.append(len(sched.waiting))
        admitted, ms = sched.next_forward()
        trace.cost_ms.append(ms)
        for req in admitted:
            i = int(req.rid)
            self.live[i] = (req, self.t_ms)
            if self.measured_until_s is not None and self.planned[i] < self.measured_until_s:
                self.unadmitted_measured -= 1
        self.t_ms += ms
        sched.complete_forward(admitted, int(round(self.t_ms * 1e6)))
        for req in self.finished:
            self.open_measured -= _retire(self.out, self.live, req, self.planned, self.ms_per_s,
                                          self.measured_until_s)
        self.finished.clear()


def _retire(out, live, req: SimRequest, planned: list[float], ms_per_s: float, until_s: float | None) -> int:
    """Turn a finished request into its VirtualRequest; 1 when it was a measured one."""
    i = int(req.rid)
    _, adm_ms = live.pop(i)
    steps = req.truth.steps  # step_end_ns, n_tokens, ... in model ns
    ns_per_s = ms_per_s * 1e6
    times = tuple(steps[k] / ns_per_s for k in range(0, len(steps), 2))
    counts = tuple(steps[k] for k in range(1, len(steps), 2))
    out[i] = VirtualRequest(planned[i], adm_ms / ms_per_s, times[0] if times else None,
                            req.truth.finished_ns / ns_per_s, req.prompt_tokens, req.produced, False, times, counts)
    return int(until_s is not None and planned[i] < until_s)


def simulate_schedule(profile: Profile | str, mode: str, arrivals_s: Iterable[float],
                      mix: list[tuple[int, float, int]], *, time_scale: float = 1.0, max_running: int = 0,
                      max_queued: int | None = None, seed: int = 0) -> list[VirtualRequest]:
    """Every request of an open-loop schedule: request i arrives at ``arrivals_s[i]`` wall seconds with
    ``mix[i % len(mix)]``'s (prompt tokens, acceptance, output tokens); ``max_running`` 0 = the mode's cap;
    ``max_queued`` set, an arrival finding that many waiting is rejected (``rejected``). In arrival order."""
    prof = profiles.load(profile) if isinstance(profile, str) else profile
    prof.check_modes([mode], "open-loop schedule")
    reqs, _ = _simulate(prof, mode, list(arrivals_s), mix, time_scale=time_scale, max_running=max_running,
                        max_queued=max_queued, seed=seed)
    return reqs


def percentile(xs: list[float], q: float) -> float | None:
    """Nearest rank: the smallest sample with at least q % of the samples at or below it (None if empty)."""
    if not xs:
        return None
    xs = sorted(xs)
    return xs[max(1, math.ceil(q / 100.0 * len(xs))) - 1]


@dataclass(frozen=True)
class RateTruth:
    """What the simulator's scheduler gives the requests planned inside one window of a rate's schedule.

    Latencies in wall milliseconds, from the planned send (no dispatch lag: the truth sends on time);
    percentiles by nearest rank (:func:`percentile`); None where there is no sample."""

    mode: str
    rate: float
    """Offered, wall requests/s (the arrival process's rate)."""
    arrival: str
    time_scale: float
    warmup_s: float
    window_s: float
    planned: int
    """Requests planned inside [warmup, warmup + window)."""
    completed: int
    rejected: int
    ttft_p50: float | None
    ttft_p90: float | None
    ttft_p99: float | None
    tpot_p50: float | None
    tpot_p90: float | None
    tpot_p99: float | None
    e2e_p50: float | None
    e2e_p99: float | None
    itl_p50: float | None
    """Per token: each later event's gap ÷ its tokens, once per token (loadgen's ITL)."""
    itl_p99: float | None
    offered_rps: float
    """Planned inside the window / window (the schedule's own luck, around ``rate``)."""
    achieved_rps: float
    """Requests (of any plan) that finished inside the window / window."""
    output_tps: float
    """Tokens emitted inside the window / window."""
    mean_batch: float
    """Running requests over the window, weighted by each forward's duration."""
    waiting_start: int
    waiting_end: int
    """Waiting queue at the window's edges."""
    growth: float
    """Requests in the server (running + waiting) gained over the window, by a least-squares line
    through their count at every forward."""
    e2e_mean: float | None = None
    """Mean E2E from the planned send (loadgen's per-window ``e2e_planned_mean``)."""
    decode_rate_mean: float | None = None
    """Mean over requests of 1 / TPOT, tokens/s (loadgen's ``decode_rate``; higher is better)."""
    saturated: bool = False
    """The server falls behind without bound: ``growth`` exceeds 5 and three times the count's scatter
    about that line (a stable server's count wanders around λ·E2E and comes back; a saturated one
    climbs by (λ − μ)·window), or, with a bounded queue that cannot grow, more than 1 in 20 of the
    window's requests were refused."""

    def metric(self, name: str) -> float | None:
        if name not in METRICS:
            raise LoadgenError(f"unknown open-loop metric {name!r}; known: {', '.join(METRICS)}")
        return getattr(self, name)


METRICS = ("ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90", "tpot_p99", "e2e_p50", "e2e_p99",
           "itl_p50", "itl_p99", "e2e_mean", "decode_rate_mean")
"""The RateTruth figures an SLO or a rate crossover can name (ms, lower is better; ``decode_rate_mean`` in
tokens/s, higher is better: a crossover is where the difference changes sign either way)."""


def rate_truth(profile: Profile | str, mode: str, rate: float, *, mix: list[tuple[int, float, int]],
               arrival: str = "poisson", seed: int = 0, time_scale: float = 1.0, warmup_s: float | None = None,
               window_s: float | None = None, long_run: bool = False, requests: int = LONG_RUN_REQUESTS,
               max_running: int = 0, max_queued: int | None = None) -> RateTruth:
    """The truth for ``rate`` wall requests/s of ``arrival`` with ``seed``: the very planned offsets the
    client sends (``loadgen.timing.arrivals``), run until every request planned before the window's end
    has finished, summarised over the requests planned inside [warmup_s, warmup_s + window_s).

    ``long_run``: a steady-state answer instead of one short schedule's luck: the window holds
    ``requests`` planned requests (window_s = requests / rate) after a warm-up of a tenth as many,
    unless ``warmup_s`` says otherwise."""
    from loadgen.timing.arrivals import arrivals

    prof = profiles.load(profile) if isinstance(profile, str) else profile
    prof.check_modes([mode], "open-loop truth")
    proc = arrivals(rate, arrival)
    if long_run:
        window_s = requests / rate
        warmup_s = requests / 10 / rate if warmup_s is None else warmup_s
    if warmup_s is None or window_s is None or warmup_s < 0 or not window_s > 0:
        raise LoadgenError("rate truth: give warmup_s ≥ 0 and window_s > 0, or long_run=True")
    w0, w1 = warmup_s, warmup_s + window_s
    reqs, trace = _simulate(prof, mode, proc.times(seed), mix, time_scale=time_scale, max_running=max_running,
                            max_queued=max_queued, seed=seed, measured_until_s=w1)
    return _summary(reqs, trace, mode=mode, rate=rate, arrival=proc.name, time_scale=time_scale, w0=w0, w1=w1)


def _summary(reqs: list[VirtualRequest], trace: _Trace, *, mode: str, rate: float, arrival: str,
             time_scale: float, w0: float, w1: float) -> RateTruth:
    import bisect

    inside = [r for r in reqs if w0 <= r.planned_s < w1]
    served = [r for r in inside if not r.rejected]
    ms = 1000.0
    ttft = [(r.first_token_s - r.planned_s) * ms for r in served if r.first_token_s is not None]
    tpot = [r.tpot_s * ms for r in served if r.tpot_s is not None]
    e2e = [(r.end_s - r.planned_s) * ms for r in served]
    itl: list[float] = []
    for r in served:
        ts, ks = r.step_s, r.step_tokens
        for k in range(1, len(ts)):
            itl.extend([(ts[k] - ts[k - 1]) * ms / ks[k]] * ks[k])
    window = w1 - w0
    finished = sum(1 for r in reqs if not r.rejected and w0 <= r.end_s < w1)
    tokens = sum(k for r in reqs for t, k in zip(r.step_s, r.step_tokens) if w0 <= t < w1)
    ms_per_s = 1000.0 * time_scale
    starts = trace.start_ms
    lo = bisect.bisect_left(starts, w0 * ms_per_s)
    hi = bisect.bisect_left(starts, w1 * ms_per_s)
    busy = sum(trace.cost_ms[lo:hi])
    batch = sum(b * c for b, c in zip(trace.running[lo:hi], trace.cost_ms[lo:hi])) / busy if busy else 0.0

    def waiting_at(k: int) -> int:
        return trace.waiting[min(k, len(trace.waiting) - 1)] if trace.waiting else 0

    q0, q1 = waiting_at(lo), waiting_at(max(lo, hi - 1))  # the last forward begun inside the window
    n = len(inside)
    rejected = n - len(served)
    growth, scatter = _trend(starts[lo:hi], [a + b for a, b in zip(trace.running[lo:hi], trace.waiting[lo:hi])],
                             w1 * ms_per_s - w0 * ms_per_s)
    return RateTruth(
        mode=mode, rate=rate, arrival=arrival, time_scale=time_scale, warmup_s=w0, window_s=window,
        planned=n, completed=len(served), rejected=rejected,
        ttft_p50=percentile(ttft, 50), ttft_p90=percentile(ttft, 90), ttft_p99=percentile(ttft, 99),
        tpot_p50=percentile(tpot, 50), tpot_p90=percentile(tpot, 90), tpot_p99=percentile(tpot, 99),
        e2e_p50=percentile(e2e, 50), e2e_p99=percentile(e2e, 99),
        itl_p50=percentile(itl, 50), itl_p99=percentile(itl, 99),
        e2e_mean=sum(e2e) / len(e2e) if e2e else None,
        decode_rate_mean=sum(1000.0 / x for x in tpot if x > 0) / len(tpot) if tpot else None,
        offered_rps=n / window, achieved_rps=finished / window, output_tps=tokens / window, mean_batch=batch,
        waiting_start=q0, waiting_end=q1, growth=growth,
        saturated=growth > max(5.0, 3.0 * scatter) or rejected > 0.05 * n,
    )  # fmt: skip


def _trend(ts: list[float], ys: list[int], span: float) -> tuple[float, float]:
    """(slope × span, residual standard deviation) of a least-squares line through (ts, ys)."""
    n = len(ts)
    if n < 3:
        return 0.0, 0.0
    mt, my = sum(ts) / n, sum(ys) / n
    stt = sum((t - mt) ** 2 for t in ts)
    if stt <= 0:
        return 0.0, 0.0
    slope = sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / stt
    resid = sum((y - my - slope * (t - mt)) ** 2 for t, y in zip(ts, ys)) / (n - 2)
    return slope * span, math.sqrt(resid)

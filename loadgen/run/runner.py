"""The stage runner: a target at a fixed concurrency for a while, as a StageResult.

Closed loop: ``C`` users each send a request, read it to the end, and send the
next. Timeline of a stage:

    start ── warm-up ──┬── steady window ──┬── cool-down ──┐
                       ws                  we              end

Chunk-level metrics and throughput take every chunk that arrives in [ws, we).
Request-level metrics take every request that *started* in [ws, we); the load is
kept up after ``we`` until each of those has finished, so none of them is cut
short and none finishes under a lighter load than it started in. Requests
started during cool-down are then cancelled and not counted.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import multiprocessing
import signal
from collections import deque
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from loadgen.client.stream import StreamClient, Timeouts
from loadgen.errors import LoadgenError
from loadgen.client.loops import new_event_loop
from loadgen.record import RequestRecord
from loadgen.request import GenRequest
from loadgen.stage.selfcheck import CpuMeter, LoopLagMonitor
from loadgen.stage.result import ClientHealth, Slo, StageAccumulator, StageResult
from loadgen.client.target import Target
from loadgen.client.tokencount import Tokenizer

RequestSource = Callable[[int], Iterator[GenRequest]]
"""seed → an endless, deterministic sequence of requests."""

_now = time.perf_counter_ns
CONNECT_BACKOFF_S = 0.2


@dataclass
class StageSpec:
    concurrency: int
    duration_s: float | None = 30.0
    """Length of the steady window; or None with ``requests`` set."""
    requests: int | None = None
    """Close the steady window once this many requests have started inside it."""
    warmup_s: float = 5.0
    """The shortest warm-up. With ``max_warmup_s`` unset the window opens exactly here."""
    max_warmup_s: float | None = None
    """Adaptive warm-up: the window opens at the first moment after ``warmup_s`` when the load is
    measured to be steady (every user started, the token rate settled; see :class:`Steadiness`),
    and at the latest here. None: a fixed warm-up of ``warmup_s``."""
    ramp_s: float = 0.0
    """Spread the users' first requests evenly over this many seconds.

    Users that all start at once stay in lock-step when their requests take
    equally long: every prefill lands in one step and the throughput comes in
    waves. Spread over about one request's duration, arrivals interleave as in
    real traffic. Keep ``warmup_s`` ≥ ``ramp_s`` + one request duration.
    """
    bin_s: float | None = None
    """Timeline bin width; default: a twentieth of the window (1 s in request-count mode)."""
    max_cooldown_s: float = 600.0
    max_stage_s: float | None = None
    """Budget for the whole stage, from its start to its end. Hit, the stage is cut where it is
    (warm-up, window or cool-down), kept, marked incomplete, and its note says so."""
    budget_by: str = "max-stage-time"
    """The option the budget came from, for the note ("max-stage-time" or "max-run-time")."""
    expected_request_s: float | None = None
    """A request's duration as guessed before the stage (for the time estimate and budget split)."""

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise LoadgenError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.duration_s is None and not self.requests:
            raise LoadgenError("a stage needs a duration or a request count")
        if self.duration_s is not None and self.duration_s <= 0:
            raise LoadgenError(f"stage duration must be > 0, got {self.duration_s}")
        if self.warmup_s < 0:
            raise LoadgenError(f"warm-up must be >= 0, got {self.warmup_s}")
        if self.max_stage_s is not None and self.max_stage_s <= 0:
            raise LoadgenError(f"--{self.budget_by}: the stage budget must be > 0 s, got {self.max_stage_s:g}")

    def estimate_s(self) -> float:
        """How long the stage should take: warm-up, window, and a cool-down of one request."""
        d = self.expected_request_s or 0.0
        warm = self.warmup_s if self.max_warmup_s is None else min(self.max_warmup_s, max(self.warmup_s, self.ramp_s + 2.0))
        window = self.duration_s if self.duration_s is not None else 10.0
        est = warm + window + d
        return min(est, self.max_stage_s) if self.max_stage_s else est


@dataclass
class RunOptions:
    slo: Slo = None  # type: ignore[assignment]
    timeouts: Timeouts = Timeouts()
    tokenizer: Tokenizer | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.slo is None:
            self.slo = Slo()


class Steadiness:
    """Says when a closed loop has settled: every user started and the token rate flat.

    Sampled every ``every_s``; steady when the tokens that arrived over the last
    ``span_s`` and over the ``span_s`` before differ by at most ``tolerance`` of
    the larger (or by at most a few tokens on a slow server). The span is a
    quarter of a request's duration, 1-10 s: long enough that a decode step or a
    prefill is a small part of it, short enough not to stretch the warm-up.
    """

    def __init__(self, span_s: float, tolerance: float = 0.15, every_s: float = 0.25) -> None:
        self.span_s = span_s
        self.tolerance = tolerance
        self.every_s = every_s
        self._samples: deque[tuple[int, int]] = deque()
        self._failures: deque[tuple[int, int]] = deque()

    def add(self, t_ns: int, tokens: int, failures: int = 0) -> None:
        self._samples.append((t_ns, tokens))
        self._failures.append((t_ns, failures))
        while len(self._failures) > 2 and self._failures[1][0] <= t_ns - int(self.span_s * 1e9):
            self._failures.popleft()
        horizon = t_ns - int(2 * self.span_s * 1e9) - int(self.every_s * 2e9)
        while len(self._samples) > 2 and self._samples[1][0] <= horizon:
            self._samples.popleft()

    def _at(self, t_ns: int) -> tuple[int, int] | None:
        """The last sample (time, tokens) at or before ``t_ns``."""
        best = None
        for sample in self._samples:
            if sample[0] > t_ns:
                break
            best = sample
        return best

    def settled(self) -> bool:
        if not self._samples:
            return False
        t, now = self._samples[-1]
        mid, old = self._at(t - int(self.span_s * 1e9)), self._at(t - int(2 * self.span_s * 1e9))
        if mid is None or old is None or not (old[0] < mid[0] < t):
            return False
        # rates, not counts: the two spans differ by up to one sampling interval
        recent = (now - mid[1]) / (t - mid[0]) * self.span_s * 1e9
        before = (mid[1] - old[1]) / (mid[0] - old[0]) * self.span_s * 1e9
        if recent <= 0:
            # nothing arriving is not a steady load, however flat — unless requests are failing: a
            # server that died or refuses steadily is measured as that (its failures counted), not waited on
            return self._failures[-1][1] > self._failures[0][1]
        return abs(recent - before) <= max(self.tolerance * max(recent, before), 3)


async def run_stage(
    target: Target,
    spec: StageSpec,
    source: RequestSource,
    opts: RunOptions,
    *,
    stage_index: int = 0,
    start_at_ns: int | None = None,
    user_offset: int = 0,
    user_stride: int = 1,
    progress: Callable[[dict], None] | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    window_probe: "WindowProbe | None" = None,
    opened: Callable[[int], None] | None = None,
    open_at: Callable[[], int | None] | None = None,
) -> StageResult:
    """One stage in this process; ``user_offset/stride`` pick this process's share of the users.

    ``on_record`` sees every finished record (the client benchmark maps request
    ids to send times with it, to compare TTFT with a server's send log).
    ``window_probe`` is told when the window opens and closes (the server's own
    counters over the window). Several processes share one adaptive window
    through ``opened`` (this process found the load steady at that instant) and
    ``open_at`` (the instant one of them found, or None).
    """
    users = range(user_offset, spec.concurrency, user_stride)
    n_users = len(users)
    requests = source(opts.seed + stage_index)
    seq = itertools.count()
    tag = f"{target.label}-s{stage_index}-p{user_offset}"
    with _frozen_heap():
        async with StreamClient(
            target.url, target.make_protocol(), target=target.label, concurrency=max(1, n_users),
            timeouts=opts.timeouts, headers=target.headers, tokenizer=opts.tokenizer,
        ) as client:
            await client.warm(n_users)
            if start_at_ns is not None:
                await asyncio.sleep(max(0.0, (start_at_ns - _now()) / 1e9))
            t0 = start_at_ns or _now()
            deadline = t0 + int(spec.max_stage_s * 1e9) if spec.max_stage_s else None
            window_ns = int(spec.duration_s * 1e9) if spec.duration_s is not None else None
            bin_s = spec.bin_s or (spec.duration_s / 20 if spec.duration_s is not None else 1.0)
            state = StageState(FAR, FAR, spec.requests)
            state.t0 = t0
            lag = LoopLagMonitor()
            cpu = CpuMeter()
            acc_box: list[StageAccumulator] = []
            folder = RecordFolder(None)
            started_users = [0]
            lock_step = spec.concurrency > 1 and spec.ramp_s == 0
            first_rids: set[str] = set()
            """Users' first requests still running."""

            def all_streaming() -> bool:
                """Every user has started and its first request has ended or is streaming tokens.
                Until then the server is still taking the first prompts in (measured on an H200 at
                C=256 with temperature 0.8: 167 tokens in a 10 s window whose rate had "settled" at zero)."""
                if started_users[0] < n_users:
                    return False
                if lock_step and state.first_done < n_users:
                    # users started together with nothing to spread them by: until each has finished a
                    # first request the batch is one lock-step wave, whose flat rate is not the mix to come
                    return False
                return all((r := client.inflight.get(rid)) is not None and len(r.chunk_ns) > 0 for rid in first_rids)
            ended: list[tuple[int, int]] = []
            """(end, output tokens) of every completed request, to set beside the server's counters."""

            def open_window(ws: int) -> None:
                """Fix the window at ``ws`` (now, or a moment ahead that every process shares)."""
                acc = StageAccumulator(ws, ws + window_ns if window_ns is not None else ws + FAR_NS,
                                       int(bin_s * 1e9), opts.slo)
                acc_box.append(acc)
                folder.attach(acc)
                state.open(ws, window_ns)
                lag.start(ws, state.we)
                ended[:] = [x for x in ended if x[0] >= ws - ENDED_KEEP_NS]  # the warm-up's, before the scrape

            async def user(delay_s: float) -> None:
                if delay_s > 0:
                    await asyncio.sleep(delay_s)
                started_users[0] += 1
                first = True
                while not state.stop_new:
                    req = next(requests)
                    t = _now()
                    inside = state.admit(t)
                    if state.stop_new and not inside:
                        return
                    rid = f"{tag}-{next(seq)}"
                    if first:
                        first_rids.add(rid)
                    rec = await client.stream(req, rid, start_ns=t)
                    if window_probe is not None and rec.ok and state.server is None and (
                            state.ws == FAR or rec.end_ns >= state.ws - ENDED_KEEP_NS):
                        # only around the window's scrapes: a long stage must not keep every request
                        ended.append((rec.end_ns, rec.output_tokens or rec.tokens_received))
                    if not rec.ok:
                        state.failures += 1
                    if first:
                        first = False
                        first_rids.discard(rid)
                        state.first_done += 1
                    folder.put(rec)
                    if on_record is not None:
                        on_record(rec)
                    if inside:
                        state.finished_inside()
                    if rec.error_class == "connect":
                        # Nothing listens: retrying at full speed would only burn the client's CPU.
                        await asyncio.sleep(CONNECT_BACKOFF_S)

            async def warm_up() -> None:
                ws = await find_window_start()
                if window_probe is not None:
                    # the server's counters just before the window, so the scrape (a few ms of the loop,
                    # 3-9 ms measured on the simulator) is not inside the window it measures
                    await _sleep_until(ws - OPEN_SCRAPE_LEAD_NS)
                    await window_probe.at_open()
                await _sleep_until(ws)
                cpu.mark_start()

            async def find_window_start() -> int:
                t_min = t0 + int(spec.warmup_s * 1e9)
                if spec.max_warmup_s is None:
                    open_window(t_min)
                    return t_min
                cap = t0 + int(max(spec.max_warmup_s, spec.warmup_s) * 1e9)
                if deadline is not None:
                    # leave the window and one request's cool-down inside the stage's budget
                    room = (window_ns or 0) + int((spec.expected_request_s or 0.0) * 1e9)
                    squeezed = max(t_min, min(cap, deadline - room))
                    state.warmup_squeezed = squeezed < cap
                    cap = squeezed
                steady = Steadiness(min(10.0, max(1.0, (spec.expected_request_s or spec.ramp_s or 4.0) / 4)))
                while True:
                    shared = open_at() if open_at is not None else None
                    if shared is not None:
                        open_window(shared)
                        return shared
                    t = _now()
                    steady.add(t, client.tokens_seen, state.failures)
                    if t >= cap or (t >= t_min and steady.settled() and all_streaming()):
                        state.warmup_capped = t >= cap and (cap > t_min or state.warmup_squeezed)
                        state.measured_steady = t < cap
                        # an instant a little ahead: every process sees it before it comes, and the
                        # server's counters are read before it
                        if opened is None:
                            open_window(t + OPEN_AHEAD_NS)
                            return t + OPEN_AHEAD_NS
                        opened(t + OPEN_AHEAD_NS)
                        continue
                    await asyncio.sleep(steady.every_s)

            async def phases() -> None:
                await warm_up()
                state.warm_users = state.first_done
                await state.wait_window_closed()
                acc_box[0].close(state.we)
                lag.close_window(state.we)
                cpu.mark_end()
                if window_probe is not None:
                    state.server = await window_probe.at_close()
                    span = window_probe.span_ns
                    if state.server is not None and span is not None:
                        # what a counter that moves at request end (llama.cpp) should have added between
                        # its two scrapes, by the client's own count: the like-for-like check
                        mine = [k for e, k in ended if span[0] < e <= span[1]]
                        state.server["client_ended_between_scrapes"] = {"requests": len(mine),
                                                                        "output_tokens": sum(mine)}
                try:
                    await asyncio.wait_for(state.wait_inside_done(), spec.max_cooldown_s)
                except asyncio.TimeoutError:
                    state.cut = Cut("cool-down", (_now() - t0) / 1e9, "max-cooldown")

            step = spec.ramp_s / spec.concurrency
            tasks = [asyncio.create_task(user(u * step)) for u in users]
            tasks.append(asyncio.create_task(folder.run()))
            if progress is not None:
                tasks.append(asyncio.create_task(_report_progress(progress, client, folder, state, spec, t0)))
            try:
                if deadline is None:
                    await phases()
                else:
                    try:
                        await asyncio.wait_for(phases(), max(0.0, (deadline - _now()) / 1e9))
                    except asyncio.TimeoutError:
                        state.cut_here(spec.budget_by)
            except asyncio.CancelledError:
                # Ctrl-C / SIGTERM: keep what the window measured so far, cut at this instant.
                state.cut_here("interrupt")
            finally:
                state.stop_new = True
                if state.cut is not None and state.cut.phase == "window" and acc_box:
                    cut_ns = max(acc_box[0].lo, min(acc_box[0].hi, _now()))
                    acc_box[0].close(cut_ns)
                    lag.close_window(cut_ns)
                    cpu.mark_end()
                streaming = list(client.inflight.values())
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await lag.stop()
                if acc_box:
                    folder.drain()
                    # Requests still streaming when the stage ends: their chunks so far arrived in the
                    # window as much as any (a long request started in warm-up can outlive the cool-down).
                    for rec in streaming:
                        _as_cancelled(rec)
                        acc_box[0].add(rec)
    if not acc_box:  # cut before the window opened: an empty window at the cut
        t_cut = t0 + int((state.cut.at_s if state.cut else 0.0) * 1e9)
        acc_box.append(StageAccumulator(t_cut, t_cut, int(bin_s * 1e9), opts.slo))
    acc = acc_box[0]
    health = ClientHealth(lag.hist, [cpu.pct] if cpu.pct is not None else [], acc.coalesced_reads,
                          kernel_stamps=lag.kernel_stamps and not target.url.startswith("https"))
    res = acc.result(
        target=target.label, url=target.url, protocol=target.protocol, concurrency=spec.concurrency,
        client=health, stage_index=stage_index,
    )
    res.server = state.server
    res.notes.extend(_stage_notes(state, spec, res, n_users))
    if state.cut is not None:
        # Cut in the cool-down, the window ran its whole length: its chunks (throughput, ITL) are all
        # there and it stays usable, flagged by its cut and note (request-level figures miss the slowest
        # window requests). On the H200 three such stages were dropped from the comparison as incomplete.
        res.incomplete = state.cut.phase != "cool-down"
        res.cut = {"phase": state.cut.phase, "at_s": round(state.cut.at_s, 3), "by": state.cut.by}
        if state.cut.by == "interrupt":
            raise _Cut(res)
    return res


FAR = (1 << 62)
"""A window edge not yet known (int ns, later than any clock reading)."""
FAR_NS = int(1e18)
OPEN_AHEAD_NS = int(0.5e9)
"""An adaptive window opens this far after the load was found steady: with several processes,
which look every 0.25 s (Steadiness.every_s), each has fixed the same instant before it comes."""
OPEN_SCRAPE_LEAD_NS = int(0.2e9)
"""The server's counters are read this long before the window opens."""
ENDED_KEEP_NS = int(5e9)
"""Requests that ended this long before the window are kept for the scrape comparison (the lead, 0.2 s,
plus a scrape that waits up to a decode step: 0.75 s measured on the H200 at C=256)."""


@dataclass
class Cut:
    phase: str
    """"warm-up", "window" or "cool-down": where the stage was when it was cut."""
    at_s: float
    """Seconds since the stage started."""
    by: str
    """"interrupt", "max-stage-time", "max-run-time" or "max-cooldown"."""


class WindowProbe:
    """Told when a stage's window opens and closes; what ``at_close`` returns is the stage's ``server``."""

    span_ns: tuple[int, int] | None = None
    """When it looked at the server (perf_counter ns), once ``at_close`` has returned."""

    async def at_open(self) -> None:  # pragma: no cover - interface
        pass

    async def at_close(self) -> dict | None:  # pragma: no cover - interface
        return None


def _as_cancelled(rec: RequestRecord) -> None:
    rec.fail("cancelled", "request cancelled when the stage ended")
    if not rec.end_ns:
        rec.end_ns = _now()
    if any(k < 0 for k in rec.chunk_tokens):
        # no final usage came: each event of unknown count is taken as one token
        for i, k in enumerate(rec.chunk_tokens):
            if k < 0:
                rec.chunk_tokens[i] = 1
        rec.token_counts_exact = False


_BY = {"interrupt": "interrupted", "max-stage-time": "--max-stage-time reached",
       "max-run-time": "--max-run-time reached", "max-cooldown": "cool-down limit reached"}


def _stage_notes(state: "StageState", spec: StageSpec, res: StageResult, n_users: int) -> list[str]:
    """What a reader must know about how this stage went, told as it happened."""
    notes = []
    cut = state.cut
    if cut is not None:
        why = _BY[cut.by]
        if cut.by == "max-cooldown":
            why = f"cool-down exceeded {spec.max_cooldown_s:g} s"
        elif cut.by == "max-stage-time":
            why = f"--max-stage-time ({spec.max_stage_s:g} s) reached"
        elif cut.by == "max-run-time":
            why = f"its share of --max-run-time ({spec.max_stage_s:.0f} s of what was left) was spent"
        if cut.phase == "warm-up":
            notes.append(f"{why} during the warm-up, {cut.at_s:.1f} s into the stage: the window never opened, "
                         "nothing was measured")
        elif cut.phase == "window":
            planned = f" of {spec.duration_s:g} s" if spec.duration_s is not None else ""
            notes.append(f"{why} in the window, {cut.at_s:.1f} s into the stage: the window was cut to "
                         f"{res.window_s:.1f} s{planned}; requests still running were cancelled")
        else:
            notes.append(f"{why} in the cool-down, {cut.at_s:.1f} s into the stage: the window is complete, "
                         f"but {state.inside_running} request(s) started in it had not finished and count as "
                         "cancelled (request-level figures miss the slowest)")
    window_opened = state.ws != FAR
    if window_opened and res.total.started == 0 and not (cut is not None and cut.phase == "window"):
        notes.append("no request started inside the steady window")
    if window_opened and state.warm_users < n_users and not state.measured_steady:
        notes.append(f"{n_users - state.warm_users} of {n_users} users had not finished a first request when "
                     "the window opened: the load may not have been steady yet (longer --warmup)")
    if window_opened and state.warmup_capped and state.warmup_squeezed:
        # on the H200 the last stage of a tight --max-run-time opened its window 3 s in, while its 256
        # first requests were still being taken in: 16.7 tok/s measured against ~250 after
        notes.append(f"the load was not measured steady before the warm-up was cut short "
                     f"({(state.ws - state.t0) / 1e9:.1f} s) to leave the window room in the stage's budget "
                     f"({spec.max_stage_s:.0f} s, {spec.budget_by}): the window opened there")
    elif window_opened and state.warmup_capped:
        notes.append(f"the load was not measured steady before the warm-up's cap "
                     f"({(state.ws - state.t0) / 1e9:.1f} s): the window opened there")
    e2e = res.total.hists["e2e"]
    if window_opened and spec.duration_s is not None and e2e.count and cut is None:
        typical = e2e.percentile(50) / 1e6
        if typical > res.window_s:
            notes.append(f"the window ({res.window_s:.1f} s) is shorter than this stage's typical request "
                         f"(E2E p50 {typical:.1f} s): request-level figures rest on the "
                         f"{res.total.completed} requests that started in it; longer --duration for more")
    return notes


async def _sleep_until(t_ns: int) -> None:
    await asyncio.sleep(max(0.0, (t_ns - _now()) / 1e9))


class RecordFolder:
    """Folds finished records into the accumulator one per event-loop iteration.

    The loop that folds is the loop that reads the streams and sends the next
    requests. When many streams end in one decode step, folding all their
    records in one go held it for tens of milliseconds (50 streams of 200
    chunks: 60 ms): every user's next request waited that long, and where the
    kernel gives no receive stamp (loadgen.client.loops) reads that arrived meanwhile
    were stamped with a stale poll instant. One record per iteration keeps each
    hold to about a third of a millisecond (200 chunks).
    """

    def __init__(self, acc: StageAccumulator | None) -> None:
        self.acc = acc
        """None until the window is fixed (adaptive warm-up): records finished before it are dropped."""
        self.pending: deque[RequestRecord] = deque()
        self._wake = asyncio.Event()

    def attach(self, acc: StageAccumulator) -> None:
        self.acc = acc
        self._wake.set()

    def put(self, rec: RequestRecord) -> None:
        if self.acc is None or rec.end_ns < self.acc.lo:
            return  # ended in the warm-up: no chunk in the window, not started in it
        self.pending.append(rec)
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.pending:
                self.acc.add(self.pending.popleft())
                await asyncio.sleep(0)

    def drain(self) -> None:
        while self.pending:
            self.acc.add(self.pending.popleft())


class _Cut(Exception):
    """Inside the loop: the stage was cut short (a KeyboardInterrupt raised in a task is re-raised by
    asyncio from the loop machinery and leaves a 'Task exception was never retrieved' behind)."""

    def __init__(self, partial: StageResult) -> None:
        super().__init__()
        self.partial = partial


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a stage, carrying what that stage measured until then."""

    def __init__(self, partial: StageResult | None = None) -> None:
        super().__init__()
        self.partial = partial


async def _report_progress(progress, client: StreamClient, folder: RecordFolder, state: "StageState",
                           spec: StageSpec, t0: int) -> None:
    """Once a second: phase, elapsed time, requests finished, tokens/s (chunk arrivals over the last
    second) and the stage's remaining time as far as it can be told."""
    last_tokens, last_t = client.tokens_seen, _now()
    while True:
        await asyncio.sleep(1.0)
        t = _now()
        tps = (client.tokens_seen - last_tokens) / ((t - last_t) / 1e9)
        last_tokens, last_t = client.tokens_seen, t
        acc = folder.acc
        progress({"phase": state.phase(t), "elapsed_s": (t - t0) / 1e9,
                  "completed": acc.completed if acc else 0, "failed": acc.failed if acc else 0,
                  "tokens_per_s": tps, "remaining_s": _remaining_s(state, spec, t)})


def _remaining_s(state: "StageState", spec: StageSpec, t: int) -> float | None:
    """The stage's time still to go: the rest of the warm-up (its cap, the pessimistic end), the
    window, and a cool-down of one request's duration; bounded by the stage's budget."""
    d = spec.expected_request_s or 0.0
    window = spec.duration_s if spec.duration_s is not None else None
    phase = state.phase(t)
    if phase == "warm-up":
        cap = spec.max_warmup_s if spec.max_warmup_s is not None else spec.warmup_s
        rest = max(0.0, cap - (t - state.t0) / 1e9) + (window or 0.0) + d
    elif phase == "window":
        rest = (max(0.0, (state.we - t) / 1e9) if window is not None else 0.0) + d
    else:
        rest = max(0.0, d - (t - state.we) / 1e9)
    if spec.max_stage_s:
        rest = min(rest, max(0.0, spec.max_stage_s - (t - state.t0) / 1e9))
    return rest


@contextmanager
def _frozen_heap():
    """Objects that exist when a stage starts live through it: frozen, the collector's full passes
    (tens of ms in a big process) no longer stall the loop, and with it every chunk stamp."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class StageState:
    """Which requests belong to the window, and when the window and the stage end.

    ``ws``/``we`` may be unknown (``FAR``) until the warm-up has found the load
    steady; :meth:`open` fixes them.
    """

    def __init__(self, ws: int, we: int, max_requests: int | None) -> None:
        self.ws, self.we = ws, we
        self.t0 = ws
        self.max_requests = max_requests
        self.admitted = 0
        self.first_done = 0
        self.failures = 0
        """Requests that failed so far (any phase): a failing server's load is steady at zero tokens."""
        """Users whose first request has ended."""
        self.warm_users = 0
        """Users whose first request had ended when the window opened."""
        self.inside_running = 0
        self.stop_new = False
        self.warmup_capped = False
        self.warmup_squeezed = False
        """The stage's budget brought the warm-up's cap forward."""
        self.measured_steady = False
        """The window opened because the load was measured steady (not at a fixed warm-up or its cap)."""
        self.cut: Cut | None = None
        self.server: dict | None = None
        self._closed = asyncio.Event()
        self._inside_done = asyncio.Event()

    def open(self, ws: int, window_ns: int | None) -> None:
        self.ws = ws
        self.we = ws + window_ns if window_ns is not None else ws + FAR_NS

    def phase(self, t: int) -> str:
        if self.ws == FAR or t < self.ws:
            return "warm-up"
        return "cool-down" if self.window_closed else "window"

    def cut_here(self, by: str) -> None:
        t = _now()
        self.cut = Cut(self.phase(t), (t - self.t0) / 1e9, by)

    @property
    def window_closed(self) -> bool:
        return self._closed.is_set()

    def admit(self, t: int) -> bool:
        if t >= self.we:
            self._close(self.we)
            return False
        if t < self.ws:
            return False
        if self.max_requests is not None and self.admitted >= self.max_requests:
            self._close(t)
            return False
        self.admitted += 1
        self.inside_running += 1
        return True

    def _close(self, we: int) -> None:
        if not self._closed.is_set():
            self.we = we
            self._closed.set()

    def finished_inside(self) -> None:
        self.inside_running -= 1
        if self._closed.is_set() and self.inside_running == 0:
            self._inside_done.set()

    async def wait_window_closed(self) -> None:
        while not self._closed.is_set():
            remaining = (self.we - _now()) / 1e9
            try:
                await asyncio.wait_for(self._closed.wait(), timeout=max(0.0, min(remaining, 1.0)))
            except asyncio.TimeoutError:
                if _now() >= self.we:
                    self._close(self.we)

    async def wait_inside_done(self) -> None:
        if self.inside_running == 0:
            return
        await self._inside_done.wait()


def run_stage_sync(target, spec, source, opts, *, stage_index=0, loop_kind="auto", stop_event=None,
                   **kw) -> StageResult:
    """Run one stage on a fresh event loop; Ctrl-C (or SIGTERM) ends it as KeyboardInterrupt.

    The signals are taken by the loop itself: a KeyboardInterrupt raised inside
    a transport callback would be logged and swallowed by uvloop, and the run
    would go on as if nothing had been pressed. ``stop_event`` (a
    multiprocessing event, in worker processes) cuts the stage as a signal does.
    """
    loop = new_event_loop(loop_kind)
    main = loop.create_task(run_stage(target, spec, source, opts, stage_index=stage_index, **kw))
    interrupted = []
    installed = []

    def on_signal() -> None:
        interrupted.append(True)
        main.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(sig)
        try:
            loop.add_signal_handler(sig, on_signal)
            installed.append((sig, previous))
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread (e.g. Locust's loop thread): the caller handles signals
    watch = None
    if stop_event is not None:
        async def watch_stop() -> None:
            while not stop_event.is_set():
                await asyncio.sleep(0.1)
            on_signal()
        watch = loop.create_task(watch_stop())
    try:
        result = loop.run_until_complete(main)
    except _Cut as cut:
        raise Interrupted(cut.partial) from None
    except asyncio.CancelledError:
        if interrupted:
            raise Interrupted() from None
        raise
    finally:
        if watch is not None:
            watch.cancel()
            loop.run_until_complete(asyncio.gather(watch, return_exceptions=True))
        for sig, previous in installed:
            loop.remove_signal_handler(sig)
            signal.signal(sig, previous)  # the loop's removal does not always restore it (uvloop)
        loop.close()
    if interrupted:  # the stage may have finished in the same instant: the user still asked to stop
        raise Interrupted(result)
    return result


def _worker(args) -> None:
    """One process's share of a stage: its result (or the partial one, when cut) goes to ``results``."""
    (target, spec, source, opts, stage_index, start_at, offset, stride, loop_kind,
     results, progress_q, stop_event, open_ns, window_probe) = args
    # Ctrl-C in a terminal reaches the whole process group. Until the stage's loop takes the signals
    # (and cuts this share as the parent's stop_event would), it must not kill the worker mid-start.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def opened(t: int) -> None:
        with open_ns.get_lock():
            if open_ns.value == 0 or t < open_ns.value:
                open_ns.value = t

    def progress(p: dict) -> None:
        progress_q.put((offset, p))

    try:
        res = run_stage_sync(target, spec, source, opts, stage_index=stage_index, loop_kind=loop_kind,
                             start_at_ns=start_at, user_offset=offset, user_stride=stride,
                             stop_event=stop_event, progress=progress, opened=opened, window_probe=window_probe,
                             open_at=lambda: open_ns.value or None)
        results.put((offset, "done", res.to_dict()))
    except Interrupted as exc:
        results.put((offset, "cut", exc.partial.to_dict() if exc.partial is not None else None))
    except BaseException as exc:  # noqa: BLE001 - the parent reports it in one line
        results.put((offset, "error", f"{type(exc).__name__}: {exc}"))


def run_stage_processes(target, spec, source, opts, *, processes: int, stage_index=0, loop_kind="auto",
                        progress=None, on_record=None, window_probe=None) -> StageResult:
    """The stage's users spread over ``processes`` processes that share one window.

    CLOCK_MONOTONIC is system-wide, so every process opens and closes the window
    at the same instant (an adaptive warm-up's instant is shared through
    ``open_ns``); their results merge into one. Progress lines are the sum of
    the processes' own; Ctrl-C or SIGTERM in this process cuts every worker's
    share where it is and the merged partial stage is kept, as with one process.
    """
    if processes <= 1:
        return run_stage_sync(target, spec, source, opts, stage_index=stage_index, loop_kind=loop_kind,
                              progress=progress, on_record=on_record, window_probe=window_probe)
    import queue as _queue

    processes = min(processes, spec.concurrency)
    start_at = _now() + int(2e9)  # time for the workers to start and warm their pools
    ctx = multiprocessing.get_context("spawn")
    results, progress_q, stop_event = ctx.Queue(), ctx.Queue(), ctx.Event()
    open_ns = ctx.Value("q", 0)
    workers = [ctx.Process(target=_worker, daemon=True, args=(
        (target, spec, source, opts, stage_index, start_at, i, processes, loop_kind, results, progress_q,
         stop_event, open_ns, window_probe if i == 0 else None),)) for i in range(processes)]
    for w in workers:
        w.start()
    got: dict[int, tuple[str, object]] = {}
    latest: dict[int, dict] = {}
    interrupted = False
    try:
        while len(got) < processes:
            try:
                while True:
                    i, p = progress_q.get_nowait()
                    latest[i] = p
            except _queue.Empty:
                pass
            if latest and progress is not None and len(latest) == processes:
                progress(_sum_progress(list(latest.values())))
                latest.clear()
            try:
                i, kind, payload = results.get(timeout=0.2)
                got[i] = (kind, payload)
            except _queue.Empty:
                if not any(w.is_alive() for w in workers) and results.empty():
                    break
    except KeyboardInterrupt:
        interrupted = True
        stop_event.set()
        deadline = time.monotonic() + 30.0
        while len(got) < processes and time.monotonic() < deadline:
            try:
                i, kind, payload = results.get(timeout=0.5)
                got[i] = (kind, payload)
            except _queue.Empty:
                if not any(w.is_alive() for w in workers):
                    break
    finally:
        stop_event.set()
        for w in workers:
            w.join(5.0)
            if w.is_alive():
                w.kill()
                w.join(5.0)
    errors = [p for k, p in got.values() if k == "error"]
    dicts = [p for k, p in got.values() if k in ("done", "cut") and p is not None]
    cut = interrupted or any(k == "cut" for k, _ in got.values())
    if errors and not cut:
        raise LoadgenError(f"a stage worker process failed: {errors[0]}")
    merged = None
    if dicts:
        parts = [StageResult.from_dict(d) for d in dicts]
        merged = parts[0]
        for r in parts[1:]:
            merged.merge(r)
        if len(dicts) < processes:
            merged.incomplete = True
            merged.notes.append(f"{processes - len(dicts)} of {processes} client processes returned nothing: "
                                "their users' requests are missing")
    if cut:
        raise Interrupted(merged)
    if merged is None:
        raise LoadgenError("no stage worker process returned a result")
    return merged


def _sum_progress(parts: list[dict]) -> dict:
    """One progress line for several processes: counts and rates add, phase and time are the slowest's."""
    order = {"warm-up": 0, "window": 1, "cool-down": 2}
    rem = [p["remaining_s"] for p in parts if p.get("remaining_s") is not None]
    return {"phase": min((p["phase"] for p in parts), key=lambda ph: order.get(ph, 0)),
            "elapsed_s": max(p["elapsed_s"] for p in parts),
            "completed": sum(p["completed"] for p in parts), "failed": sum(p["failed"] for p in parts),
            "tokens_per_s": sum(p["tokens_per_s"] for p in parts), "remaining_s": max(rem) if rem else None}

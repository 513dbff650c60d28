"""One stage's window lifecycle, from the warm-up to the StageResult: the same for every front.

In: a :class:`StageSpec`, the stage's start instant ``t0``, and, while it
runs, what the stage's users report (token count, readiness, finished
records). Out: a :class:`StageResult` with its client health, cut and notes.
Timeline of a stage:

    t0 ── warm-up ──┬── steady window ──┬── cool-down ──┐
                    ws                  we              end

The warm-up lasts ``warmup_s``, or (adaptive, ``max_warmup_s`` set) until the
load is measured steady, at most to its cap; several processes share one
instant (``opened``/``open_at``). The window opens and closes on shared
instants; after it the load is kept up until every request started inside
has ended (at most ``max_cooldown_s``); then the users are cancelled and any
record still streaming is folded as cancelled (its window chunks count).
``loadgen run`` (loadgen/run/stage.py) and the Locust stage
(loadgen/locust/live.py) both drive their users through this one class; the
users' loops are theirs.
"""

from __future__ import annotations

import asyncio
import gc
import time
from contextlib import contextmanager
from typing import Callable

from loadgen.client.target import Target
from loadgen.record import CANCELLED, RequestRecord
from loadgen.run.spec import Cut, StageSpec, WindowProbe
from loadgen.serverview.checks import ClientView, add_checks, ended_between, ended_inside
from loadgen.run.window import (ENDED_KEEP_NS, FAR, MIN_SPAN_S, OPEN_AHEAD_NS, OPEN_SCRAPE_LEAD_NS, RecordFolder,
                                StageState, Steadiness)
from loadgen.stage.result import ClientHealth, Slo, StageAccumulator, StageResult
from loadgen.stage.selfcheck import CpuMeter, LoopLagMonitor

_now = time.perf_counter_ns
CLOSE_ROOM_NS = 1_000_000_000

WARMUP, WINDOW, COOLDOWN = "warm-up", "window", "cool-down"


class Lifecycle:
    """The window of one stage in one process: open, close, cool-down, cut, result.

    ``notes``, ``overrun`` and ``fold_streaming`` are how a front's stage has
    always ended, kept as they are so no figure moves: ``loadgen run`` writes
    its stage notes, turns a cool-down past ``max_cooldown_s`` into a cut (the
    window stays usable) and folds still-streaming records as cancelled;
    Locust's stage (its conductor notes the merged stage) marks such a stage
    incomplete and drops what was still streaming when its users were stopped.
    """

    def __init__(self, spec: StageSpec, slo: Slo, t0: int, n_users: int, *, probe: WindowProbe | None = None,
                 notes: bool = True, overrun: str = "cut", fold_streaming: bool = True,
                 on_phase: Callable[[str], None] | None = None) -> None:
        self.spec, self.slo, self.t0, self.n_users = spec, slo, t0, n_users
        self.probe = probe
        self.notes, self.overrun, self.fold_streaming = notes, overrun, fold_streaming
        self.on_phase = on_phase
        self.deadline = t0 + int(spec.max_stage_s * 1e9) if spec.max_stage_s else None
        self.window_ns = int(spec.duration_s * 1e9) if spec.duration_s is not None else None
        self.bin_s = spec.bin_width_s
        self.state = StageState(FAR, FAR, spec.requests)
        self.state.t0 = t0
        self.lag = LoopLagMonitor()
        self.cpu = CpuMeter()
        self.acc: StageAccumulator | None = None
        self.folder = RecordFolder(None)
        self.ended: list[tuple] = []
        """(end ns, output tokens, verify_ct, accepted, proposed drafts) of every completed request near the
        window's scrapes, to set beside the server's counters (loadgen.serverview.checks.ended_between)."""
        self.cooldown_overran = False
        self.open_once_read = False
        """The window's instant is this process's own and is brought forward to when the server's counters have
        been read (the opening scrape), at the latest to the instant set."""
        self.tokens_open: tuple[int, int] | None = None
        self.past_first_open: tuple[int, int] | None = None
        self.positions_open: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        if spec.max_warmup_s is None:
            # a fixed warm-up: the window is known before any user starts
            self.open_window(t0 + int(spec.warmup_s * 1e9))

    # --- the window's edges ---------------------------------------------------------------------
    def open_window(self, ws: int) -> None:
        """Fix the window at ``ws`` (now, or a moment ahead that every process shares)."""
        state = self.state
        state.open(ws, self.window_ns)
        self.acc = StageAccumulator(state.ws, state.we, int(self.bin_s * 1e9), self.slo)
        self.folder.attach(self.acc)
        self.lag.start(state.ws, state.we)
        self.ended[:] = [x for x in self.ended if x[0] >= ws - ENDED_KEEP_NS]  # the warm-up's, before the scrape

    def _close_window(self, we: int) -> None:
        self.acc.close(we)
        self.lag.close_window(we)
        self.cpu.mark_end()

    def _phase(self, phase: str) -> None:
        if self.on_phase is not None:
            self.on_phase(phase)

    def record_end(self, rec: RequestRecord) -> None:
        """A finished request, kept (only around the window's scrapes) for the server-counter comparison."""
        state = self.state
        if self.probe is not None and rec.ok and state.server is None and (
                state.ws == FAR or rec.end_ns >= state.ws - ENDED_KEEP_NS):
            # only around the window's scrapes: a long stage must not keep every request
            self.ended.append((rec.end_ns, rec.output_tokens or rec.tokens_received, rec.verify_ct,
                               rec.accepted_drafts, rec.proposed_drafts, _last_token_ns(rec)))

    # --- the phases -----------------------------------------------------------------------------
    async def drive(self, *, tokens: Callable[[], int] | None = None, waiting: Callable[[], int] | None = None,
                    opened: Callable[[int], None] | None = None,
                    open_at: Callable[[], int | None] | None = None,
                    past_first: Callable[[], int] | None = None,
                    positions: Callable[[], tuple[int, ...]] | None = None) -> None:
        """Warm-up, window and cool-down, within the stage's budget (hit, the stage is cut there).

        ``tokens`` (tokens seen so far) and ``waiting`` (users whose first request is not streaming yet)
        feed an adaptive warm-up; ``past_first`` (tokens seen past the first of each event: a per-step
        server's accepted drafts) and ``positions`` (per draft position, the events long enough to reach it:
        its accepted drafts there) are read beside ``tokens`` at the scrapes; ``waiting`` at the window's
        opening is the stage's ``warmup`` record.
        ``opened``/``open_at`` share the window's instant between processes.
        A cancellation (Ctrl-C, an aborted Locust stage) goes through to the caller.
        """
        phases = self._phases(tokens, waiting, opened, open_at, past_first, positions)
        if self.deadline is None:
            await phases
            return
        try:
            await asyncio.wait_for(phases, max(0.0, (self.deadline - _now()) / 1e9))
        except asyncio.TimeoutError:
            self.state.cut_here(self.spec.budget_by)

    def interrupted(self) -> None:
        """Ctrl-C / SIGTERM: keep what the window measured so far, cut at this instant."""
        self.state.cut_here("interrupt")

    async def _phases(self, tokens, waiting, opened, open_at, past_first, positions) -> None:
        state, spec, probe = self.state, self.spec, self.probe
        ws = await self._find_window_start(tokens, waiting, opened, open_at)
        seen = tokens or (lambda: 0)
        firsts = past_first or (lambda: None)  # None: not counted, the acceptance check says so
        reached = positions or (lambda: None)
        if probe is not None:
            # the server's counters just before the window, so the scrape (a few ms, 3-9 ms measured
            # on the simulator) is not inside the window it measures; the client's token count read
            # on both sides of it, for a server that counts per step (vLLM)
            await _sleep_until(ws - OPEN_SCRAPE_LEAD_NS)
            before, first_before, reached_before = seen(), firsts(), reached()

            def read_open(_) -> None:
                self.tokens_open = (before, seen())
                self.past_first_open = None if first_before is None else (first_before, firsts())
                self.positions_open = None if reached_before is None else (reached_before, reached())

            # not awaited past the window's start: a slow page (llama.cpp took 749 ms at C=256 on
            # the H200) must not hold the window's own bookkeeping back
            opening = asyncio.ensure_future(probe.at_open())
            opening.add_done_callback(read_open)
            await asyncio.wait({opening}, timeout=max(0.0, (ws - _now()) / 1e9))
            if self.open_once_read:
                # read: the window need not wait out the rest of the scrape's lead (the simulator's page
                # answered in 8-32 ms of the 0.2 s, median 13: ~6.5 s of the README crossover's 36 stages)
                ws = min(ws, _now())
                self.open_window(ws)
        await _sleep_until(ws)
        self.cpu.mark_start()
        self._phase(WINDOW)
        state.warm_users = state.first_done
        state.not_streaming = waiting() if waiting is not None else None
        await state.wait_window_closed()
        self._phase(COOLDOWN)
        self._close_window(state.we)
        if probe is not None:
            await opening
            before, first_before, reached_before = seen(), firsts(), reached()
            state.server = await probe.at_close()
            tokens_close = (before, seen())
            past_first_close = None if first_before is None else (first_before, firsts())
            positions_close = None if reached_before is None else (reached_before, reached())
            span = probe.span_ns
            if state.server is not None and span is not None:
                # what a counter that moves at request end (SGLang, llama.cpp) should have added
                # between its two scrapes, by the client's own count: the like-for-like check
                edges = probe.edges_ns
                narrow = wide = None
                if edges is not None:
                    # ended for sure after the opening read and before the closing one, and possibly. The
                    # scrapes are stamped in their own thread, a request's end by this loop when it gets to it:
                    # up to the loop's lag later (a C=30 simulator stage beside a busy suite stamped ~3
                    # requests past the closing scrape's answer, 'disagree' by 3.4 %). The lag is the monitor's
                    # peak over the whole stage plus its period: the scrapes lie outside the window its figures
                    # cover, and with the window's 7.3 ms alone one request of 63 (1.4 %) fell on the wrong side
                    lag = self.lag.peak_ns + int(self.lag.interval_s * 1e9)
                    narrow = ended_inside(self.ended, edges[0][1] + lag, edges[1][0], surely=True)
                    wide = ended_inside(self.ended, edges[0][0], edges[1][1] + lag, surely=False)
                view = ClientView(spec.concurrency, max(1, round(spec.concurrency / max(1, self.n_users))),
                                  ended_between(self.ended, *span), self.tokens_open, tokens_close, probe.max_running,
                                  ended_narrow=narrow, ended_wide=wide, open_loop=spec.open_loop,
                                  past_first_open=self.past_first_open, past_first_close=past_first_close,
                                  positions_open=self.positions_open, positions_close=positions_close)
                add_checks(state.server, view)
        try:
            await asyncio.wait_for(state.wait_inside_done(), spec.max_cooldown_s)
        except asyncio.TimeoutError:
            if self.overrun == "cut":
                state.cut = Cut("cool-down", (_now() - self.t0) / 1e9, "max-cooldown")
            else:
                self.cooldown_overran = True

    async def _find_window_start(self, tokens, waiting, opened, open_at) -> int:
        spec, state, t0 = self.spec, self.state, self.t0
        if spec.max_warmup_s is None:
            return state.ws  # fixed: opened when the stage began
        t_min = t0 + int(spec.warmup_s * 1e9)
        cap = t0 + int(max(spec.max_warmup_s, spec.warmup_s) * 1e9)
        if self.deadline is not None:
            # leave the window inside the stage's budget, and a second for its closing scrape; not a request's
            # cool-down: a stage cut there is compared (its window whole), one with an unsteady window is not.
            # Keeping a cool-down of the guessed 87 s cut the H200's spec C=256 warm-up to 3.8 s of a 100 s budget
            room = (self.window_ns or 0) + CLOSE_ROOM_NS
            squeezed = max(t_min, min(cap, self.deadline - room))
            state.warmup_squeezed = squeezed < cap
            cap = squeezed
        # a quarter of the request the users' starts are spread over (the likely duration at this load,
        # loadgen.run.order.warmed_spec), else of the guessed one: on the README's chat ladder the Little's-law
        # guess ran 1.5-5x the measured request below saturation, and each span and the ramp with it
        steady = Steadiness(min(10.0, max(MIN_SPAN_S, (spec.ramp_s or spec.expected_request_s or 4.0) / 4)))
        # the instant is set ahead so that the server's counters are read before it (OPEN_SCRAPE_LEAD_NS, and one
        # process opens as soon as they are: _phases); several processes need longer, for each to see the instant
        # before it comes (OPEN_AHEAD_NS): one process opening 0.5 s ahead spent 0.3-0.5 s of every stage waiting
        ahead = OPEN_AHEAD_NS if opened is not None else OPEN_SCRAPE_LEAD_NS if self.probe is not None else 0
        while True:
            shared = open_at() if open_at is not None else None
            if shared is not None:
                self.open_window(shared)
                return shared
            t = _now()
            steady.add(t, tokens() if tokens is not None else 0, state.failures)
            if t >= cap or (t >= t_min and steady.settled() and (waiting is None or waiting() == 0)):
                state.warmup_capped = t >= cap and (cap > t_min or state.warmup_squeezed)
                state.measured_steady = t < cap
                # an instant a little ahead: every process sees it before it comes, and the
                # server's counters are read before it
                if opened is None:
                    if self.probe is not None:
                        self.open_once_read = True  # opened by _phases, once the opening scrape has answered
                    else:
                        self.open_window(t + ahead)
                    return t + ahead
                opened(t + ahead)
                continue
            await asyncio.sleep(steady.every_s)

    # --- the end --------------------------------------------------------------------------------
    async def teardown(self, tasks: list[asyncio.Task], inflight: dict[str, RequestRecord],
                       wait_s: float | None = None) -> None:
        """Stop admitting, cancel the users (and helpers) in ``tasks``, fold what is left.

        A window cut short ends at the cut. Requests still streaming (``inflight``)
        are folded as cancelled: their chunks so far arrived in the window as much
        as any (a long request started in warm-up can outlive the cool-down).
        ``wait_s``: how long to wait for the cancelled tasks (None: until they end).
        """
        state, acc = self.state, self.acc
        state.stop_new = True
        if state.cut is not None and state.cut.phase == "window" and acc is not None:
            cut_ns = max(acc.lo, min(acc.hi, _now()))
            self._close_window(cut_ns)
        streaming = list(inflight.values()) if self.fold_streaming else []
        for t in tasks:
            t.cancel()
        if tasks:
            done, _ = await asyncio.wait(tasks, timeout=wait_s)
            for t in done:  # retrieved, so none is logged as "never retrieved"
                if not t.cancelled():
                    t.exception()
        await self.lag.stop()
        if self.probe is not None:
            self.probe.stop_sampling()  # a stage cut before its window closed leaves it sampling
        if acc is not None:
            self.folder.drain()
            for rec in streaming:
                _as_cancelled(rec)
                acc.add(rec)

    def result(self, target: Target, stage_index: int, notes: list[str] | tuple = ()) -> StageResult:
        """The stage's result; ``notes`` (the caller's) come before the lifecycle's own."""
        state, spec = self.state, self.spec
        if self.acc is None:  # cut before the window opened: an empty window at the cut
            t_cut = self.t0 + int((state.cut.at_s if state.cut else 0.0) * 1e9)
            self.acc = StageAccumulator(t_cut, t_cut, int(self.bin_s * 1e9), self.slo)
        acc = self.acc
        health = ClientHealth(self.lag.hist, [self.cpu.pct] if self.cpu.pct is not None else [],
                              acc.coalesced_reads,
                              kernel_stamps=self.lag.kernel_stamps and not target.url.startswith("https"))
        res = acc.result(target=target.label, url=target.url, protocol=target.protocol,
                         concurrency=spec.concurrency, client=health, stage_index=stage_index)
        res.server = state.server
        if state.not_streaming is not None:
            res.warmup = {"users": self.n_users, "not_streaming": state.not_streaming,
                          "first_done": state.warm_users}
        res.notes.extend(notes)
        if self.notes:
            res.notes.extend(stage_notes(state, spec, res, self.n_users))
            res.notes.extend(f"server: {n}" for n in (state.server or {}).get("notes", []))
        if self.cooldown_overran:
            res.incomplete = True
            res.notes.append(f"cool-down exceeded {spec.max_cooldown_s:g} s; "
                             "unfinished window requests counted as cancelled")
        if state.cut is not None:
            # Cut in the cool-down, the window ran its whole length: its chunks (throughput, ITL) are all
            # there and it stays usable, flagged by its cut and note (request-level figures miss the slowest
            # window requests). On the H200 three such stages were dropped from the comparison as incomplete.
            res.incomplete = state.cut.phase != "cool-down"
            res.cut = {"phase": state.cut.phase, "at_s": round(state.cut.at_s, 3), "by": state.cut.by}
        return res


def _as_cancelled(rec: RequestRecord) -> None:
    rec.fail(CANCELLED, "request cancelled when the stage ended")
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


def stage_notes(state: StageState, spec: StageSpec, res: StageResult, n_users: int) -> list[str]:
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


@contextmanager
def frozen_heap():
    """Objects that exist when a stage starts live through it: frozen, the collector's full passes
    (tens of ms in a big process) no longer stall the loop, and with it every chunk stamp."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def _sleep_until(t_ns: int) -> None:
    await asyncio.sleep(max(0.0, (t_ns - _now()) / 1e9))


def _last_token_ns(rec: RequestRecord) -> int:
    """When the last token that arrived before the stream's close arrived (a silent stop token is stamped
    at the close: the server generated it after the one before); 0 when none did."""
    end = rec.end_ns
    for t in reversed(rec.chunk_ns):
        if t < end:
            return t
    return 0

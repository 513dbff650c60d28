"""When a stage's requests go out: the one user loop, and the pacing policy it follows.

In: a stage's :class:`StreamClient` and :class:`Lifecycle` (this process's share of the stage), a request
iterator, and a policy. Out: requests streamed into the lifecycle's window, every finished record folded
there and handed to the front's hooks (the scripted runner's server comparison, Locust's events).

Every request, whoever paces it, goes through one :class:`Sender` (admitted into the window by its send
or planned instant, streamed, folded, handed on). The policy decides only *when*, as Locust's
``wait_time`` is a function on the user (locust/user/wait_time.py) and guidellm's strategies share one
interface for concurrent and Poisson load (scheduler/strategies.py):

- :class:`Closed`: C users; each sends its next request when its last one ended. The runner starts the
  users as tasks (``Closed.start``); Locust's user greenlets each run one ``Closed.user`` through its bridge.
  With sessions (``--turns``, loadgen/workloads/sessions.py) a user's next request is its conversation's next
  turn, carrying the reply that just ended, after the think time; a failed or last turn ends the session and
  the user starts a new one. A session stays on its user; the stage's end ends it.
- :class:`Open`: requests at planned instants (an arrival process or a trace, loadgen/timing) whether or
  not earlier ones have finished, with an optional in-flight cap; one dispatcher per process.

Open loop: request i is sent at its planned instant; with an in-flight cap a request that finds the cap
full waits for a slot, and the wait is dispatch lag. Every record carries its planned instant: it decides
the window the request belongs to (a late send does not move it out), and the latencies from it (TTFT and
E2E from plan) are what a user of that schedule waited. The dispatch lag (handed to the HTTP client −
planned) is recorded per request; a stage whose lag p99 exceeds ``spec.max_lag_ms`` is flagged, never
silently wrong: a client that cannot keep the schedule offers a lighter, smoother load than the one planned
and hides the queueing (vLLM #54101: 1,426 ms of mean dispatch delay). Several processes share one
schedule: process k of n sends arrivals k, k+n, k+2n, … with the requests of those positions, so the union
is the schedule one process would have sent. A phase-shifting workload's request is drawn for its planned
instant (:func:`on_schedule`): its phase is the one at that instant, not at the draw, which comes up to an
inter-arrival earlier.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Callable, Iterable, Iterator

from loadgen.client.stream import Prepared, StreamClient
from loadgen.errors import LoadgenError
from loadgen.record import RequestRecord
from loadgen.request import GenRequest
from loadgen.run.lifecycle import Lifecycle
from loadgen.run.spec import StageSpec
from loadgen.workloads.phases import PhaseStream
from loadgen.workloads.sessions import SessionSource, SessionSpec

NO_SESSIONS = SessionSpec()

_now = time.perf_counter_ns

CONNECT_BACKOFF_S = 0.2
"""A user whose request found nothing listening waits this long before the next (not a busy loop)."""
TIMER_LEAD_NS = 1_000_000
"""The event loop's timers wake up to 1 ms late (epoll's timeout is whole milliseconds, rounded up), so
the dispatcher's timer is set this much early and the last part waited out with a precise sleep; the
loop is held for at most this long per send, only when the next send is that close. Measured with
``loadgen bench dispatch`` (docs/benchmarks.md): on a quiet 16-core host lag p50 0.15 ms and p99 0.3 ms
at constant 50-200 req/s (Poisson: p99 0.6 ms at 50, 1.4-1.7 ms to 500, where sends fall due together);
this 2-core virtual machine adds its own scheduling (a bare 2 ms time.sleep overshoots 0.94 ms at p99)."""
COOLDOWN_BEHIND_NS = 1_000_000_000
"""After the window, a send already this late is skipped (counted in ``skipped_late``): cool-down sends
only keep the load up while the window's requests finish, and a client that far behind has more than
kept it up. Sent anyway, a 4000 req/s stage on a 16-core host sent 94,434 requests for a 3 s window."""


class Sender:
    """One request into the window, the same for every policy and front: stream it, fold it, hand it on.

    ``hooks`` see every finished record after it is folded (the runner's ``on_record``, Locust's edge log
    and its statistics batches).
    """

    def __init__(self, client: StreamClient, life: Lifecycle, tag: str,
                 hooks: Iterable[Callable[[RequestRecord], None]] = ()) -> None:
        self.client, self.life, self.tag = client, life, tag
        self.hooks = tuple(hooks)
        self._seq = itertools.count()
        self.cancelled_inside = 0
        """Window requests whose user was stopped mid-request by its front (Locust stopping users)."""

    async def send(self, req: GenRequest | Prepared, start_ns: int, inside: bool, planned_ns: int | None = None,
                   rid: str | None = None) -> RequestRecord:
        """``req`` with its ``rid`` (a new one when None), or prepared ahead (:meth:`prepare`: its own rid)."""
        state = self.life.state
        if rid is None and not isinstance(req, Prepared):
            rid = self.rid()
        try:
            rec = await self.client.stream(req, rid or "", start_ns=start_ns, planned_ns=planned_ns)
        except asyncio.CancelledError:
            if inside and not state.stop_new:
                # stopped mid-request while the stage still admits (Locust stopped this user): the window
                # must not wait for it
                self.cancelled_inside += 1
                state.finished_inside()
            raise
        self.life.record_end(rec)
        if not rec.ok:
            state.failures += 1
        self.life.folder.put(rec)
        for hook in self.hooks:
            hook(rec)
        if inside:
            state.finished_inside()
        return rec

    def rid(self) -> str:
        return f"{self.tag}-{next(self._seq)}"

    def prepare(self, req: GenRequest) -> Prepared:
        """The request's bytes and id, built now: ahead of its planned instant rather than at it."""
        return self.client.prepare(req, self.rid())


class Closed:
    """C users, each sending its next request when its last one ended (this process's share of them).

    ``ramp_s`` spreads the users' starts over that long; with none and C > 1 they start together, a
    lock-step wave (see :meth:`waiting`).
    """

    open_loop = False

    def __init__(self, requests: Iterator[GenRequest], users: range, concurrency: int, ramp_s: float = 0.0,
                 sessions: SessionSpec = NO_SESSIONS) -> None:
        self.requests, self.users, self.n_users = requests, users, len(users)
        self.sessions = SessionSource(sessions, requests) if sessions.active else None
        """A user's requests are the turns of its conversations (loadgen/workloads/sessions.py), or plain."""
        self.think_s = sessions.think_s
        self.step_s = ramp_s / concurrency if concurrency else 0.0
        self.lock_step = concurrency > 1 and ramp_s == 0
        self.connections = max(1, self.n_users)
        self.warm_connections = self.n_users
        self.running: set[asyncio.Task] = set()
        """Nothing beside the users: a closed loop's requests run inside them."""
        self.started = 0
        self.first_rids: set[str] = set()
        """Users' first requests still running."""
        self.sender: Sender | None = None

    def start(self, sender: Sender, t0: int) -> list[asyncio.Task]:
        """The runner's users as tasks (user ``u`` starts ``u`` ramp steps in)."""
        self.sender = sender
        return [asyncio.create_task(self.user(sender, u * self.step_s)) for u in self.users]

    async def user(self, sender: Sender, delay_s: float = 0.0) -> None:
        """One user until the stage admits no more requests: request, stream to the end, fold, repeat."""
        self.sender = sender
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        state = sender.life.state
        self.started += 1
        first = True
        req: GenRequest | None = None
        while not state.stop_new:
            if req is None:
                conv = self.sessions.start() if self.sessions is not None else None
                req = conv.first() if conv is not None else next(self.requests)
            t = _now()
            inside = state.admit(t)
            if state.stop_new and not inside:
                return
            rid = sender.rid()
            if first:
                self.first_rids.add(rid)
            rec = await sender.send(req, t, inside, rid=rid)
            if first:
                first = False
                self.first_rids.discard(rid)
                state.first_done += 1
            # the session's next turn carries this reply; after its last turn, or a failed one, a new session
            req = conv.after(rec.ok, rec.reply) if conv is not None else None
            if rec.error_class == "connect":
                # Nothing listens: retrying at full speed would only burn the client's CPU.
                await asyncio.sleep(CONNECT_BACKOFF_S)
            elif req is not None and self.think_s > 0:
                await asyncio.sleep(self.think_s)

    def waiting(self) -> int:
        """Users not yet streaming: not started, or their first request neither ended nor streaming tokens.
        Until none is, the server is still taking the first prompts in (measured on an H200 at C=256 with
        temperature 0.8: 167 tokens in a 10 s window whose rate had "settled" at zero)."""
        state = self.sender.life.state if self.sender is not None else None
        if self.lock_step:
            # users started together with nothing to spread them by: until each has finished a first
            # request the batch is one lock-step wave, whose flat rate is not the mix to come
            return self.n_users - (state.first_done if state is not None else 0)
        inflight = self.sender.client.inflight if self.sender is not None else {}
        return self.n_users - self.started + sum(
            1 for rid in self.first_rids if (r := inflight.get(rid)) is None or not r.chunk_ns)

    def block(self, spec: StageSpec) -> None:
        return None


def cap_share(cap: int, offset: int, stride: int) -> int:
    """This process's share of an in-flight cap spread over ``stride`` processes (0: no cap)."""
    if cap <= 0:
        return 0
    return max(1, cap // stride + (1 if offset < cap % stride else 0))


async def _wait_until(t_ns: int, sleep: Callable[[float], None] = time.sleep) -> None:
    ahead = t_ns - _now()
    if ahead > TIMER_LEAD_NS:
        await asyncio.sleep((ahead - TIMER_LEAD_NS) / 1e9)
    elif ahead > 0:
        # the request just handed over starts (its lag stamped, its send begun) before the precise sleep
        # holds the loop: without this, at 100 req/s one send in ten waited behind the next one's sleep
        # (lag p99 1.28 → 0.50 ms on a quiet 16-core host). Not when already late: a yield per late send
        # let a 1000 req/s stage fall a second behind (670 sent/s) where sending the due ones at once kept up
        await asyncio.sleep(0)
    ahead = t_ns - _now()
    if ahead > 0:
        sleep(ahead / 1e9)


class Open:
    """Requests at planned instants, this process's share of one schedule, with an optional in-flight cap.

    ``pairs``: (planned offset s, request) of this share; ``cap``: this share's in-flight cap (0: none);
    ``sleep``: the precise sleep for a send's last part (Locust passes the one gevent did not patch).
    """

    open_loop = True
    n_users = 0
    waiting = None
    """Every send is the schedule's: there is no user whose first request the window waits for."""

    def __init__(self, pairs: Iterable[tuple[float, GenRequest]], cap: int,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.pairs, self.cap, self.sleep = pairs, cap, sleep
        self.slots = asyncio.Semaphore(cap) if cap else None
        self.running: set[asyncio.Task] = set()
        self.counts = {"planned": 0, "sent": 0, "held_by_cap": 0, "skipped_late": 0}
        self.due_ns: int | None = None
        """The next planned send while the dispatcher waits for it (the folder keeps clear of it)."""
        self.t0: int | None = None
        """The instant the schedule's offsets count from, once started."""
        # no connection limit without a cap: aiohttp's pool would queue sends past it unseen
        self.connections = cap
        self.warm_connections = min(cap or 8, 64)

    def start(self, sender: Sender, t0: int) -> list[asyncio.Task]:
        self.t0 = t0
        sender.life.folder.next_send = lambda: self.due_ns
        return [asyncio.create_task(self.run(sender, t0))]

    async def _one(self, sender: Sender, req: Prepared, planned: int, inside: bool) -> None:
        try:
            await sender.send(req, _now(), inside, planned_ns=planned)
        finally:
            if self.slots is not None:
                self.slots.release()

    async def run(self, sender: Sender, t0: int) -> None:
        state, counts, slots = sender.life.state, self.counts, self.slots
        for offset_s, req in self.pairs:
            planned = t0 + int(offset_s * 1e9)
            # its body built and serialised while the dispatcher waits for its instant, not at the hand-over
            ready = sender.prepare(req)
            self.due_ns = planned
            await _wait_until(planned, self.sleep)
            self.due_ns = None
            if state.stop_new:
                return
            if state.window_closed and _now() - planned > COOLDOWN_BEHIND_NS:
                counts["planned"] += 1
                counts["skipped_late"] += 1
                continue
            if slots is not None:
                if slots.locked():
                    counts["held_by_cap"] += 1
                await slots.acquire()
            inside = state.admit(planned)  # the planned instant decides the window
            if state.stop_new and not inside:
                if slots is not None:
                    slots.release()
                return
            counts["planned"] += 1  # planned = sent + skipped_late: what came due before the stage ended
            counts["sent"] += 1
            task = asyncio.create_task(self._one(sender, ready, planned, inside))
            self.running.add(task)
            task.add_done_callback(self.running.discard)

    def block(self, spec: StageSpec) -> dict:
        """The stage's ``open_loop`` block: what was planned and how it was sent."""
        return {"rate": spec.arrivals.rate, "arrival": spec.arrivals.name, "max_in_flight": spec.concurrency or None,
                "max_lag_ms": spec.max_lag_ms, **self.counts}


Pacing = Closed | Open


def pacing_for(spec: StageSpec, requests: Iterator[GenRequest], arrival_seed: int, share: int, n_shares: int,
               *, sleep: Callable[[float], None] = time.sleep, sessions: SessionSpec = NO_SESSIONS) -> Pacing:
    """This process's share (``share`` of ``n_shares``) of the stage's pacing: every k-th user of a closed
    loop, every k-th arrival (with its request) of an open one. The arrivals are drawn from the run's seed
    (their process keys them by rate too), so every target at a rate gets the same schedule."""
    if spec.open_loop:
        check_open_sessions(sessions)
        if sessions.active:
            requests = SessionSource(sessions, requests).single_turns()  # a shared prefix on each request
        times = spec.arrivals.times(arrival_seed)
        policy = Open((), cap_share(spec.concurrency, share, n_shares), sleep)
        pairs = (on_schedule(times, requests, lambda: policy.t0) if isinstance(requests, PhaseStream)
                 else zip(times, requests))
        policy.pairs = itertools.islice(pairs, share, None, n_shares)
        return policy
    return Closed(requests, range(share, spec.concurrency, n_shares), spec.concurrency, spec.ramp_s, sessions)


def on_schedule(times: Iterable[float], stream: PhaseStream, origin: Callable[[], int | None]) -> Iterator[
        tuple[float, GenRequest]]:
    """(planned offset s, request) with each request drawn for its planned instant ``origin() + offset``; drawn
    only once the dispatcher runs, when ``origin`` (its ``t0``) is known. Every process draws every arrival's
    request (and keeps its share), so each process's stream sees the same instants and the union is one schedule."""
    for offset_s in times:
        yield offset_s, stream.at((origin() or 0) + int(offset_s * 1e9))


def check_open_sessions(sessions: SessionSpec) -> None:
    """Multi-turn sessions are closed-loop only: a later turn goes when its reply has ended (and the think time
    passed), so an open loop's arrivals would plan only the first turns and the rate axis, offered requests per
    second, would no longer be what was offered."""
    if sessions.multi_turn:
        raise LoadgenError(f"--turns {sessions.turns}: multi-turn sessions run in a closed loop (--ladder): a later "
                           "turn is sent when the reply before it has ended, so an open loop (--rate, --trace) "
                           "could not plan it")

"""The one stage order, and the plan of each stage: warm-up, window, budget, estimate.

In: the targets (any objects; ``loadgen run`` passes :class:`Target`, the
Locust ramp its config's targets), the ladder of concurrencies, the workloads,
and what earlier stages measured. Out: the stages as :class:`Slot` s in the
order they run, and each one's :class:`StageSpec`.

Order: workload by workload, concurrency by concurrency, every target once at
each. Two targets alternate (A@1, B@1, A@2, …) so slow drift hits both alike;
three or more follow the rows of a Williams design in turn (:func:`rotation`):
each target runs first, and right after each other target, equally often over
N (even N) or 2N (odd N) steps, so none always runs first, last or behind a
given other. When loadgen starts
the servers itself (one GPU box) it is every stage of one target, then every
stage of the next (``by_target``). ``loadgen run``/``crossover``
(loadgen/run/ramp.py) and the Locust conductor (loadgen/locust/conductor.py)
both take their stages from :func:`stage_order`. Plans: :func:`fixed_spec` (a
fixed warm-up: the Locust ramp) and :class:`Schedule` (the scripted ramp's
steady warm-up, the window grown to a request, ``--max-run-time`` shared out).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generic, Sequence, TypeVar

from loadgen.errors import LoadgenError
from loadgen.run.spec import StageSpec
from loadgen.stage.load import LoadPoint
from loadgen.timing.arrivals import Replay, arrivals

T = TypeVar("T")


@dataclass(frozen=True)
class Slot(Generic[T]):
    index: int
    """Position in the order (0, 1, 2, …)."""
    step: int
    """Position in the ladder: every target's stage at one concurrency shares it."""
    workload: str
    load: LoadPoint
    """The ladder's value and what it is: a concurrency, or in an open-loop ladder a rate (req/s) or a trace's
    speed."""
    target: T
    repeat: int = 0
    """Which pass over the ladder this stage is in (``--repeat N``: 0 … N-1; 0 without repeats)."""

    @property
    def value(self):
        return self.load.value


def rotation(n: int) -> list[list[int]]:
    """The orders of ``n`` targets, one per step in turn: [0, 1] for two (A, B at every step, as before
    there were more); for three or more the rows of a Williams design (n rows for even n, 2n for odd):
    over a full cycle each target takes each position, and follows each other target, equally often."""
    if n <= 2:
        return [list(range(n))]
    first = [0]
    lo, hi = 1, n - 1
    while len(first) < n:  # 0, 1, n-1, 2, n-2, …
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    rows = [[(x + r) % n for x in first] for r in range(n)]
    if n % 2:  # odd n: the mirrored rows balance who follows whom
        rows += [row[::-1] for row in rows]
    return rows


def stage_order(targets: Sequence[T], ladder: Sequence[float], workloads: Sequence[str], *,
                by_target: bool = False, extra: Sequence[tuple] = (),
                axis: str = "concurrency", repeats: int = 1) -> list[Slot[T]]:
    """The stages in the order they run: at each concurrency every target once, in :func:`rotation`'s order
    (A@1, B@1, A@2, B@2, … for two) per workload; ``by_target``: all of A, then B, then C.

    ``repeats``: the whole ladder of a workload is run that many times, pass after pass (A@1, B@1, A@2,
    B@2, A@1, B@1, …), so each pass is a run of its own that meets the drift of its own stretch of time,
    as separate runs would. Every target in a pass gets the same prompts; each pass its own
    (:func:`prompt_seed`), so pooled passes are independent samples of the workload. ``extra`` (workload, C): stages run after the ladder for every
    target in turn (a crossover's refinement rounds), once, their steps numbered on from the ladder's;
    (workload, C, step, pass): another pass at the ladder's step (``--passes``: the pass's own prompts)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, not {repeats}")
    rows = rotation(len(targets))
    order, k = [], 0
    for w in workloads:
        for r in range(repeats):
            for step, c in enumerate(ladder):
                order += [(ti, w, step, c, r) for ti in rows[k % len(rows)]]
                k += 1
    if by_target:
        order.sort(key=lambda x: x[0])  # stable: workload, pass and ladder order kept
    for j, (w, c, *again) in enumerate(extra):
        step, rep = again if again else (len(ladder) + j, 0)
        order += [(ti, w, step, c, rep) for ti in rows[k % len(rows)]]
        k += 1
    return [Slot(i, step, w, LoadPoint(axis, c), targets[ti], r)
            for i, (ti, w, step, c, r) in enumerate(order)]


PASS_SEEDS = 10_000
"""Seed offset between passes: past any ladder's steps and refinement rounds."""


def prompt_seed(step: int, repeat: int) -> int:
    """A stage's offset of the run's prompt seed: its ladder step, and its pass. The same prompts again in every
    pass made pooling them a lie: on the README's chat workload 5 passes of the same prompts agreed to 0.1 %
    and narrowed the crossover's interval to 9.4-11, missing the simulator's own 11.9: they resampled the
    server, not the traffic."""
    return step + PASS_SEEDS * repeat


@dataclass(frozen=True)
class OpenPlan:
    """An open-loop ladder: its values are rates (req/s) drawn by ``arrival``, or with ``trace_times``
    a trace's speeds (each stage replays the trace that many times faster)."""

    arrival: str = "poisson"
    max_in_flight: int = 0
    """0: no cap."""
    max_lag_ms: float = 10.0
    trace_times: tuple[float, ...] | None = None
    """The trace's send offsets (s) at speed 1."""

    def schedule(self, value: float):
        if self.trace_times is not None:
            return Replay(tuple(t / value for t in self.trace_times), value)
        return arrivals(value, self.arrival)

    def window_s(self, value: float, warmup_s: float, duration_s: float | None) -> float | None:
        """A trace's window runs from the warm-up's end to its last send; a rate's is ``duration_s``."""
        if self.trace_times is None:
            return duration_s
        last = self.trace_times[-1] / value
        if last - warmup_s < 1.0:
            raise LoadgenError(f"--trace at speed {value:g} lasts {last:.1f} s: nothing is left for a window after "
                               f"the {warmup_s:g} s warm-up (a shorter --warmup or a lower --trace-speed)")
        # just past the last send: a trace's last instant can hold a burst (mooncake-small: 6 sends at 57 s)
        return last - warmup_s + TRACE_END_S


BIN_REQUESTS = 6
"""An open-loop stage's timeline bins hold at least this many planned requests on average: a bin's
TPOT or TTFT p50 is one crossover sample and needs 3 (loadgen.metrics), so at 2 req/s a bin is 3 s."""
TRACE_END_S = 0.001
OPEN_COOLDOWN_MIN_S = 10.0
"""An open-loop stage's cool-down ends at half its window and three requests, or this, whichever is
longer: a server that keeps up ends the window's requests within about one request after it, and a
saturated one's queue never drains while the schedule goes on, so the stage is cut there, its window
kept (loadgen.stage.saturation reads the cut as saturation), rather than run for 600 s (or 108 s
after a 54 s trace window, as twice the window took on the CPU llama-server)."""


def open_spec(plan: OpenPlan, value: float, warmup_s: float, last_e2e_s: float | None, *,
              duration_s: float | None = 30.0, requests: int | None = None, max_stage_s: float | None = None,
              budget_by: str = "max-stage-time", max_cooldown_s: float = 600.0) -> StageSpec:
    """An open-loop stage at ``value`` (a rate, or a trace's speed): a fixed warm-up (the schedule itself
    brings the load up), the window, a bounded cool-down."""
    window = plan.window_s(value, warmup_s, duration_s)
    d = last_e2e_s or 0.0
    cool = float(round(min(max_cooldown_s, max(OPEN_COOLDOWN_MIN_S, (window or 10.0) / 2 + 3 * d))))
    sched = plan.schedule(value)
    # a window bin's percentile needs requests: at least BIN_REQUESTS planned per bin, else a twentieth
    bin_s = max((window or 10.0) / 20, BIN_REQUESTS / sched.rate) if sched.rate > 0 else None
    return StageSpec(plan.max_in_flight, duration_s=window, requests=requests, warmup_s=warmup_s, max_warmup_s=None,
                     bin_s=bin_s, max_stage_s=max_stage_s, budget_by=budget_by, expected_request_s=d or None,
                     max_cooldown_s=cool, arrivals=sched, max_lag_ms=plan.max_lag_ms)


def fixed_spec(concurrency: int, warmup_s: float, *, duration_s: float | None = 30.0, requests: int | None = None,
               bin_s: float | None = None, max_cooldown_s: float = 600.0) -> StageSpec:
    """A stage whose window opens exactly ``warmup_s`` after its users start (no adaptive warm-up, no budget):
    the Locust ramp's, whose users Locust spawns together, so no request duration spreads them."""
    return StageSpec(concurrency, duration_s=duration_s, requests=requests, warmup_s=warmup_s, max_warmup_s=None,
                     bin_s=bin_s, max_cooldown_s=max_cooldown_s)


def e2e_guess(measured: dict[int, float], concurrency: int, scaled: bool = True) -> float | None:
    """A request's duration at ``concurrency``, from the E2E p50 (s) of this target's stages so far.

    From the nearest lower concurrency C' it is scaled by C / C': by Little's law
    that is exact once the server is saturated (requests queue behind its
    running cap), and an overestimate before, which costs warm-up time only. The
    unscaled guess fell short: at C=250 behind a 48-request cap, 107 of 250
    users had not finished a first request when the window opened. Without a
    lower stage (refinement between ladder stages), the nearest higher one.
    ``scaled=False``: the lower stage's duration as it was (a server that keeps up: the estimate's low end).
    """
    if not measured:
        return None
    lower = [c for c in measured if c <= concurrency]
    if lower:
        c = max(lower)
        return measured[c] * concurrency / c if scaled else measured[c]
    return measured[min(measured)]


def e2e_likely(measured: dict[int, float], concurrency: int) -> float | None:
    """A request's likely duration at ``concurrency``: the line through the E2E p50 (s) of this target's two
    nearest lower stages, kept between the nearest one's duration as it was and :func:`e2e_guess`'s Little's-law
    scaling (the two ends a server that keeps up and one saturated give). A decode step that grows with the batch
    makes a request's duration about linear in C: on the README's crossover (ladder 1,5,10,20,30,70, three
    workloads) the line was off a stage's measured p50 by a median 7 % (0.5-1.8x; the chat baseline's within
    1.1 %: 0.913 s for 0.905 at C=10, 3.79 for 3.75 at C=70), the scaling by a median 33 % (up to 5.3x, 2.27 s
    for chat's 0.66 at C=5). With one lower stage, its duration as it was (a server that keeps up: freetext's
    C=5 took 0.82-1.24 s against C=1's 0.87-1.27)."""
    lower = sorted(c for c in measured if c <= concurrency)
    if not lower:
        return e2e_guess(measured, concurrency)
    c2 = lower[-1]
    d2 = measured[c2]
    if len(lower) < 2 or c2 == concurrency:
        return d2
    c1 = lower[-2]
    line = d2 + (d2 - measured[c1]) / (c2 - c1) * (concurrency - c2)
    return min(max(line, d2), d2 * concurrency / c2)


RUN_END_S = 10.0
"""What a run can take past its --max-run-time: the cut stage's teardown and the servers' stop."""

LEAST_WINDOW_S = 1.0
"""The least window a stage measures anything in (a budget that cannot buy it runs no stage)."""


def least_stage_s(warmup_s: float) -> float:
    """The least a stage takes: its minimum warm-up and :data:`LEAST_WINDOW_S` of window."""
    return warmup_s + LEAST_WINDOW_S


NO_GUESS_MAX_WARMUP_S = 120.0
"""The warm-up's cap for a stage with no request duration to go by (a target's first stage): its
steadiness decides. Capped at the minimum warm-up, the H200's first stage at C=256 opened its window
3 s in, with all 256 users still in their first, lock-step request."""
MIN_MAX_WARMUP_S = 2.0
"""The warm-up's cap is never earlier than this, whatever the minimum warm-up: the cap opens a window on a load
never measured steady, so it stays where the simulator's 2 s minimum put it when that was lowered to 1 s (a
window measured steady opens earlier; one that is not, no earlier than before). Predictable's median request
(0.42 s at C=20) scales to a 1.6 s cap at C=30, while its longest took 1.8 s."""


def warmed_spec(concurrency: int, warmup_s: float, last_e2e_s: float | None, *, duration_s: float | None = 30.0,
                requests: int | None = None, adapt_window: bool = False, max_stage_s: float | None = None,
                budget_by: str = "max-stage-time", likely_e2e_s: float | None = None) -> StageSpec:
    """A stage whose users start spread over one request's duration, and a warm-up that ends once the
    load is measured steady.

    ``last_e2e_s``: that duration, as :func:`e2e_guess` makes it; ``likely_e2e_s``, as :func:`e2e_likely`
    does (no longer than ``last_e2e_s``). The users' starts are spread over the likely one (else the guess):
    over more than one request a user's later start meets another's second request, and the warm-up waits
    for the last start (5.3-7.5 s of a freetext C=5 stage that settles 1.2 s after it is spread over its
    1.2 s requests). The warm-up lasts at least ``warmup_s`` and until every user has started and the token
    rate has settled (window.Steadiness); its cap is the old fixed rule, the
    ramp and then the last user's first request with room for it to take half
    as long again as guessed (measured: at C=250 the baseline's requests took
    2.8x C=100's, not 2.5x), from the guess, and no earlier than :data:`MIN_MAX_WARMUP_S`. With
    ``adapt_window`` a window shorter than one request grows to one request, as far as ``max_stage_s`` leaves
    room.
    """
    d = last_e2e_s or 0.0
    likely = min(likely_e2e_s, d) if likely_e2e_s and d else d
    ramp = likely if concurrency > 1 else 0.0
    window = duration_s
    if adapt_window and duration_s is not None and d > duration_s:
        window = d
        if max_stage_s:
            window = max(duration_s, min(d, max_stage_s - max(warmup_s, ramp + 2.0) - d))
    return StageSpec(concurrency, duration_s=window, requests=requests, warmup_s=warmup_s,
                     max_warmup_s=max(warmup_s, MIN_MAX_WARMUP_S, 2.5 * d if d else NO_GUESS_MAX_WARMUP_S),
                     ramp_s=ramp,
                     max_stage_s=max_stage_s,
                     budget_by=budget_by, expected_request_s=d or None)


class Durations:
    """Each (target, workload)'s measured E2E p50 by concurrency, and the guesses made from them."""

    def __init__(self) -> None:
        self.measured: dict[tuple[str, str], dict[int, float]] = {}

    def add(self, target: str, workload: str, c: int, e2e_s: float) -> None:
        self.measured.setdefault((target, workload), {})[c] = e2e_s

    def guess(self, target: str, workload: str, c: int, scaled: bool = True, anywhere: str = "") -> float | None:
        """``scaled``: Little's law from the nearest lower stage (a server whose throughput stops growing);
        else that stage's duration as it was (a server that keeps up): the two ends of the estimate.
        ``anywhere`` (the estimate only): from the nearest lower stage of any target and workload (they share
        --max-tokens): "near" this one's first at that C (scaled 70x from this workload's C=1 alone, a
        simulator run's typical estimate jumped from 3.2-5.6 min to 3.1-20.9 min), "min" the shortest there
        (the estimate's low end); "max" (its high end) this workload's longest, each from its own nearest
        stage, None while it has none: the simulator's chat requests outlast predictable's, and a high end
        from predictable's fell 2-5 s short of a 107 s run."""
        if anywhere:
            at: dict[tuple, float] = {}
            for (t, w), m in self.measured.items():
                lower = [x for x in m if x <= c]
                if lower:
                    at[(max(lower), (t, w) == (target, workload), w == workload)] = e2e_guess(m, c, scaled)
            if at:
                near = max(k[0] for k in at)
                there = {k: v for k, v in at.items() if k[0] == near}
                if anywhere == "min":
                    return min(there.values())
                if anywhere == "max":  # this workload's own, each from its nearest stage: workloads differ
                    own = [v for k, v in at.items() if k[2]]
                    return max(own) if own else None
                return there[max(there)]
        got = self._own_else_others(target, workload, lambda m: e2e_guess(m, c, scaled))
        if got is None and anywhere:
            others = [e2e_guess(m, c, scaled) for m in self.measured.values() if m]
            return max(others) if others else None
        return got

    def likely(self, target: str, workload: str, c: int) -> float | None:
        """A request's likely duration at ``c`` (:func:`e2e_likely`) from this target's stages of this workload,
        else the longest from another target's; None with neither."""
        return self._own_else_others(target, workload, lambda m: e2e_likely(m, c))

    def _own_else_others(self, target: str, workload: str, estimate: Callable[[dict], float | None]) -> float | None:
        """``estimate`` of this target's stages of this workload; without them, the longest of the other targets'
        on it (another target on the same workload is a better guess than none); None with neither."""
        own = self.measured.get((target, workload))
        if own:
            return estimate(own)
        others = [estimate(m) for (t, w), m in self.measured.items() if w == workload and m]
        return max(others) if others else None


def fmt_s(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def _within(bounds: tuple[float, float, float | None], remaining_s: float | None) -> tuple[float, float, float | None]:
    """(low, typical, high) no later than what ``remaining_s`` of --max-run-time leaves (a stage that spends its
    share is cut), and a high end then even before any duration is known."""
    lo, mid, hi = bounds
    if remaining_s is None:
        return lo, mid, hi
    end = max(0.0, remaining_s) + RUN_END_S
    return min(lo, end), min(mid, end), (end if hi is None else min(hi, end))


def fmt_span(lo: float, mid: float, hi: float | None) -> str:
    """An estimate as the log writes it: "about 5.5 min (4.2–9.8 min)", "about 40 s (30–95 s)"; with no upper
    end yet (a workload not measured), "about 77 s (65 s or more)", or "at least 4.8 min" with nothing measured."""
    if hi is None:
        return f"at least {fmt_s(lo)}" if mid <= 1.1 * lo else f"about {fmt_s(mid)} ({fmt_s(lo)} or more)"
    if hi <= 1.1 * lo:
        return f"about {fmt_s(mid)}"
    if lo >= 120:
        span = f"{lo / 60:.1f}–{hi / 60:.1f} min"
    else:
        span = f"{lo:.0f}–{hi:.0f} s" if hi < 120 else f"{fmt_s(lo)}–{fmt_s(hi)}"
    return f"about {fmt_s(mid)} ({span})"


@dataclass
class Schedule:
    """The scripted ramp's stages (``slots``, targets with a ``label``) and the plan of each, from what
    earlier stages measured (``durations``): steady warm-up, window, budget, and the time estimates."""

    slots: list[Slot]
    durations: Durations
    warmup_s: float
    duration_s: float | None = 30.0
    requests: int | None = None
    adapt_window: bool = False
    max_stage_s: float | None = None
    open: OpenPlan | None = None
    """An open-loop ladder (its values rates or trace speeds); None: concurrencies."""
    overruns: list[tuple[float, float]] = field(default_factory=list)
    """(load, seconds): what each stage run so far took beyond its typical estimate (server starts, probes,
    results written, the connections opened and the users' records folded, warm-ups past their typical
    length). The typical estimate counts their mean for each stage left; the high one, for a stage at C,
    the overrun at the nearest lower load measured, times C over that load: on the simulator they grew
    from 0.85 s at C=1 to 2.2 s at C=20 (3 s windows), and their largest so far fell short at 5 of 16."""

    def _allowance(self, c: float) -> float:
        lower = [(x, o) for x, o in self.overruns if x <= c]
        if not lower:
            return max([0.0, *(o for _, o in self.overruns)])
        near = max(x for x, _ in lower)
        return max(0.0, max(o for x, o in lower if x == near)) * (c / near if near > 0 else 1.0)

    def spec(self, i: int, budget: float | None = None, by: str = "max-stage-time", scaled: bool = True,
             anywhere: str = "") -> StageSpec:
        s = self.slots[i]
        if self.open is not None:
            return open_spec(self.open, s.value, self.warmup_s,
                             self.durations.guess(s.target.label, s.workload, s.value, False, anywhere),
                             duration_s=self.duration_s, requests=self.requests, max_stage_s=budget, budget_by=by)
        return warmed_spec(s.value, self.warmup_s, self.durations.guess(s.target.label, s.workload,
                                                                        s.value, scaled, anywhere),
                           duration_s=self.duration_s, requests=self.requests, adapt_window=self.adapt_window,
                           max_stage_s=budget, budget_by=by,
                           likely_e2e_s=self.durations.likely(s.target.label, s.workload, s.value))

    def estimates(self, first: int, scaled: bool = True, skip: frozenset[int] = frozenset()) -> list[float]:
        """The typical time of each stage from ``first`` on (not in ``skip``): the budget's weights."""
        return [self.spec(j, self.max_stage_s, scaled=scaled).estimate_s() for j in range(first, len(self.slots))
                if j not in skip]

    def bounds(self, first: int, this: StageSpec | None = None,
               skip: frozenset[int] = frozenset()) -> tuple[float, float, float | None]:
        """(low, typical, high) seconds of the stages from ``first`` on. Low: warm-ups that end at the last
        user's start, requests as long as at the stage below (a server that keeps up), no cool-down.
        Typical: the budget's weights (:meth:`budget`). High: requests C/C' as long (a server whose
        throughput stops growing), warm-ups to their caps, cool-downs of three requests; None while a stage
        has no request duration of its own workload to go by: the estimate then has no upper end."""
        idx = [j for j in range(first, len(self.slots)) if j not in skip]
        low = [self.spec(j, self.max_stage_s, scaled=False, anywhere="min").estimate_s("low") for j in idx]
        high = [self.spec(j, self.max_stage_s, anywhere="max").estimate_s("high") for j in idx]
        mid = [(self.spec(j, self.max_stage_s, anywhere="near").estimate_s()
                + self.spec(j, self.max_stage_s, scaled=False, anywhere="near").estimate_s()) / 2 for j in idx]
        if this is not None and idx and idx[0] == first:  # the stage about to run, as it was actually planned
            low[0], mid[0], high[0] = this.estimate_s("low"), this.estimate_s(), this.estimate_s("high")
        known = all(self.durations.guess(self.slots[j].target.label, self.slots[j].workload,
                                         self.slots[j].value, anywhere="max") is not None for j in idx)
        mean = max(0.0, sum(o for _, o in self.overruns) / len(self.overruns)) if self.overruns else 0.0
        extra = sum(self._allowance(self.slots[j].value) for j in idx)
        return sum(low), sum(mid) + mean * len(idx), (sum(high) + extra if known else None)

    def left(self, first: int, this: StageSpec | None = None, remaining_s: float | None = None,
             skip: frozenset[int] = frozenset()) -> str:
        """The time the stages from ``first`` on should take, "about T (low–high)" (:meth:`bounds`), the
        high end no later than what ``remaining_s`` (of --max-run-time) leaves: a stage that spends its
        share is cut."""
        return fmt_span(*_within(self.bounds(first, this, skip), remaining_s))

    def after(self, i: int, skip: frozenset[int] = frozenset(),
              remaining_s: float | None = None) -> tuple[float, float, float | None]:
        """The estimated seconds of the stages after stage ``i`` (the run's ETA beyond it): :meth:`bounds`, no
        later than what ``remaining_s`` (of --max-run-time, at stage ``i``'s start) leaves."""
        return _within(self.bounds(i + 1, skip=skip) if i + 1 < len(self.slots) else (0.0, 0.0, 0.0), remaining_s)

    def least_s(self) -> float:
        """A stage needs its minimum warm-up and a second of window to measure anything."""
        return least_stage_s(self.warmup_s)

    def need_s(self, i: int) -> float | None:
        """The least stage ``i`` takes to measure a steady window: a warm-up until every user has started
        and its first request streams, the window and its closing scrape, from a server that keeps up.
        None with no request duration to go by."""
        s = self.slots[i]
        if self.duration_s is None:  # a window of N requests: its length is not known in seconds
            return None
        if self.durations.guess(s.target.label, s.workload, s.value, anywhere="near") is None:
            return None
        spec = self.spec(i, None, scaled=False, anywhere="near")
        return spec.estimate_s() - (spec.expected_request_s or 0.0) + 1.0  # the cool-down may be cut

    def unaffordable(self, i: int, budget: float | None, by: str) -> str:
        """Why stage ``i`` is not run with the share ``budget`` of --max-run-time (``by``), or "": the share is
        less than a steady window takes (:meth:`need_s`), and no other configuration has run at its load yet
        (after one has, skipping would waste that one's stage)."""
        s = self.slots[i]
        need = self.need_s(i)
        if by != "max-run-time" or need is None or budget is None or budget >= need:
            return ""
        if any(x.workload == s.workload and x.value == s.value for x in self.slots[:i]):
            return ""
        return f"the run's budget leaves {budget:.0f} s for it, a steady window takes about {need:.0f} s (--max-run-time)"

    def budget(self, i: int, remaining_s: float | None,
               skip: frozenset[int] = frozenset()) -> tuple[float | None, str] | None:
        """Stage ``i``'s budget and the option it comes from; None: the run's budget has no room for it.

        With ``remaining_s`` (what is left of --max-run-time) each stage gets the share of
        it that its estimate is of the stages left (a stage that spends its share is cut
        and the ladder goes on; one that needs less leaves more for the rest)."""
        budget, by = self.max_stage_s, "max-stage-time"
        if remaining_s is None:
            return budget, by
        # weights: the middle of each stage's estimate (the pessimistic end alone gave the high
        # concurrencies so much that a 20-stage GPU ladder's first stages were starved)
        rest = [(a + b) / 2 for a, b in zip(self.estimates(i, skip=skip), self.estimates(i, scaled=False, skip=skip))]
        share = remaining_s * rest[0] / sum(rest) if sum(rest) > 0 else remaining_s
        least = self.least_s()
        share = max(share, least)
        if remaining_s < least:
            return None
        if budget is None or share < budget:
            budget, by = max(1.0, share), "max-run-time"
        return budget, by

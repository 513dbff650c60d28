"""What a stage is asked to do, and the plain types that travel with it.

In: the run's settings (concurrency, warm-up, window, budgets). Out:
:class:`StageSpec` (one stage's plan), :class:`RunOptions` (what every stage of
a run shares), :class:`Cut` (where a stage was cut short and by what),
:class:`WindowProbe` (what watches the server at the window's edges) and
:class:`Interrupted` (Ctrl-C during a stage, with what it measured). No
behaviour beyond validation and the time estimate lives here: the lifecycle
(loadgen/run/lifecycle.py) and the stage order (loadgen/run/order.py) use them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Protocol

from loadgen.client.stream import Timeouts
from loadgen.client.tokencount import TokenCounter
from loadgen.errors import LoadgenError
from loadgen.request import GenRequest
from loadgen.stage.result import Slo, StageResult
from loadgen.workloads.sessions import SessionSpec

RequestSource = Callable[[int], Iterator[GenRequest]]
"""seed → an endless, deterministic sequence of requests."""


class Schedule(Protocol):
    """An open-loop stage's send times (loadgen.timing: an arrival process, or a trace's replay)."""

    rate: float
    """Offered requests per second."""
    name: str
    """"poisson", "gamma:2", "constant", "trace"…: how the times are drawn."""

    def times(self, seed: int) -> Iterator[float]:
        """Ascending planned offsets in seconds from the stage's start (endless, or a trace's end)."""


OPEN_S = 0.5
"""A window opens this long after its warm-up's end at most: the steadiness poll (0.1 s), the instant set
ahead for every process (0.5 s with several; one opens once the server's scrape answered, within 0.2 s), the
users' connections opened."""


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
    arrivals: Schedule | None = None
    """Open loop (loadgen/run/pacing.py): requests are sent at the planned offsets this gives, whether or
    not earlier ones finished; ``concurrency`` is then the in-flight cap (0: none). None: a closed loop."""
    max_lag_ms: float = 10.0
    """Open loop: a stage whose dispatch lag p99 exceeds this is flagged (the schedule was not kept)."""

    def __post_init__(self) -> None:
        if self.arrivals is not None:
            if self.concurrency < 0:
                raise LoadgenError(f"--max-in-flight must be >= 1, got {self.concurrency}")
        elif self.concurrency < 1:
            raise LoadgenError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.duration_s is None and not self.requests:
            raise LoadgenError("a stage needs a duration or a request count")
        if self.duration_s is not None and self.duration_s <= 0:
            raise LoadgenError(f"stage duration must be > 0, got {self.duration_s}")
        if self.warmup_s < 0:
            raise LoadgenError(f"warm-up must be >= 0, got {self.warmup_s}")
        if self.max_stage_s is not None and self.max_stage_s <= 0:
            raise LoadgenError(f"--{self.budget_by}: the stage budget must be > 0 s, got {self.max_stage_s:g}")

    def estimate_s(self, bound: str = "typical") -> float:
        """How long the stage should take: warm-up, window, and a cool-down of one request. ``bound``
        "low": the least it can take (the warm-up ends no earlier than the last user's start, nothing to
        wait for after the window); "high": the most, a warm-up to its cap and a cool-down of three requests
        (the slowest window request: 1.55 s after a simulator window at C=20 whose E2E p50 was 0.6 s; on
        the H200 the typical figures gave 4.1-6.9 min for a run of 11.9)."""
        d = self.expected_request_s or 0.0
        window = self.duration_s if self.duration_s is not None else 10.0
        if self.max_warmup_s is None:
            warm = self.warmup_s
        elif bound == "high":
            warm = max(self.max_warmup_s, self.warmup_s) + OPEN_S
        elif bound == "low":
            # the warm-up waits for the last user's start, unless the budget squeezes it to leave the window
            # room (lifecycle: the H200's last stage, 65 s of a 101 s share, fell below "about 101 s")
            ramp = self.ramp_s if not self.max_stage_s else min(self.ramp_s, self.max_stage_s - window - 1.0)
            warm = max(self.warmup_s, ramp)
        else:
            warm = min(self.max_warmup_s, max(self.warmup_s, self.ramp_s + 2.0)) + OPEN_S
        cool = {"low": 0.0, "high": 3 * d}.get(bound, d)
        est = warm + window + min(self.max_cooldown_s, cool)
        return min(est, self.max_stage_s) if self.max_stage_s else est

    @property
    def open_loop(self) -> bool:
        return self.arrivals is not None

    @property
    def load(self) -> float:
        """Where the stage sits on its ladder: the offered rate (req/s) in an open loop, else C."""
        return self.arrivals.rate if self.arrivals is not None else self.concurrency

    @property
    def bin_width_s(self) -> float:
        """The timeline's bin width: ``bin_s``, else a twentieth of the window (1 s in request-count mode)."""
        return self.bin_s or (self.duration_s / 20 if self.duration_s is not None else 1.0)


@dataclass
class RunOptions:
    slo: Slo = None  # type: ignore[assignment]
    timeouts: Timeouts = Timeouts()
    tokenizer: TokenCounter | None = None
    seed: int = 0
    sessions: SessionSpec = SessionSpec()
    """How users hold conversations (``--turns``, ``--think-time``, ``--shared-prefix``); one turn: plain requests."""

    def __post_init__(self) -> None:
        if self.slo is None:
            self.slo = Slo()


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

    edges_ns: tuple[tuple[int, int], tuple[int, int]] | None = None
    """Each edge look's (start, end) on loadgen's clock, when it took time (a scrape); None: instants."""
    max_running: int | None = None
    """The server's running cap when its probe found one (SGLang max_running_requests, llama.cpp slots)."""

    async def at_close(self) -> dict | None:  # pragma: no cover - interface
        return None

    def stop_sampling(self) -> None:  # pragma: no cover - interface
        """Stop whatever it does between the edges (the stage ended without closing its window)."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a stage, carrying what that stage measured until then."""

    def __init__(self, partial: StageResult | None = None) -> None:
        super().__init__()
        self.partial = partial

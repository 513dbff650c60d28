"""A stage of the ramp, as plain data: what the conductor sends to each load process.

Everything a process needs to run its share of a stage travels in the plan
(target URL and protocol, workload, lengths, SLOs, timeouts), so a worker on
another machine needs no config file of its own. An open-loop stage (``rate`` set) carries its
rate, arrival process and lag bound too; its ``concurrency`` is then the in-flight cap (0: none)
and its spec is ``loadgen run --rate``'s (loadgen.run.order.open_spec).
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field, replace
from typing import Iterator

from loadgen.client.stream import Timeouts
from loadgen.request import GenRequest
from loadgen.run.order import fixed_spec, prompt_seed
from loadgen.run.spec import StageSpec
from loadgen.stage.load import LoadPoint
from loadgen.stage.result import Slo
from loadgen.client.target import Target
from loadgen.workloads.sessions import SessionSpec


@dataclass
class StagePlan:
    index: int
    """Position in the run (A@1 is 0, B@1 is 1, A@2 is 2, ... for two targets): the results' ``stage_index``."""
    step: int
    """Position in the ladder: every target's stage at one concurrency shares it (and the prompt seed)."""
    target: dict
    concurrency: int
    """A closed loop's users; an open loop's in-flight cap (0: none)."""
    repeat: int | None = None
    """Its pass over the ladder in a ramp with ``run.repeat`` (0 …, the results' ``repeat``); None without."""
    warmup_s: float = 5.0
    spawn_s: float = 0.0
    """Locust spawns the stage's users within this long; they all start together after it (as the runner's)."""
    duration_s: float | None = 30.0
    requests: int | None = None
    bin_s: float | None = None
    max_cooldown_s: float = 600.0
    seed: int = 0
    workload: str = "chat"
    prompt_tokens: str | None = None
    max_tokens: str | None = None
    ignore_eos: bool = False
    turns: int = 1
    think_s: float = 0.0
    shared_prefix: int = 0
    prefix_ratio: float = 1.0
    """Multi-turn sessions, as ``loadgen run --turns`` holds them (loadgen/workloads/sessions.py)."""
    tokenizer: str | None = None
    slo: dict = field(default_factory=dict)
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 120.0
    loop: str = "auto"
    run_id: str = ""
    attempt: int = 0
    """How often this stage was started over (a worker joined before its window closed): part of ``key``, so a
    part of an abandoned attempt is never merged into the new one."""
    start_at_ns: int | None = None
    """Absolute CLOCK_MONOTONIC start for processes on the conductor's host (one shared window)."""
    host: str = ""
    """The conductor's host name: start_at_ns and cpus only apply to processes on the same host."""
    cpus: list | None = None
    """CPUs for load processes on the conductor's host (the embedded simulators have the others)."""
    shares: dict = field(default_factory=dict)
    """Worker client id → share index; each process takes every n-th request of the sequence."""
    scraped: bool = False
    """The master scrapes the target's /metrics over this window: each process keeps what it saw near the
    window's edges (loadgen/locust/edges.py) and keeps its users going until the closing scrape is done."""

    rate: float | None = None
    """Open loop: requests per second, sent at the planned times of ``arrival`` (None: a closed loop)."""
    arrival: str = "poisson"
    max_lag_ms: float = 10.0
    """Open loop: a stage whose dispatch lag p99 exceeds this is flagged (the schedule was not kept)."""

    @property
    def open_loop(self) -> bool:
        return self.rate is not None

    @property
    def load(self) -> LoadPoint:
        """Where the stage sits on its ladder: its rate (open loop) or its concurrency."""
        return LoadPoint("rate", self.rate) if self.rate is not None else LoadPoint("concurrency", self.concurrency)

    @property
    def load_words(self) -> str:
        """How the stage's place on the ladder is said in logs: "C=4" or "rate=2/s"."""
        return self.load.words()

    @property
    def label(self) -> str:
        return self.target["label"]

    @property
    def key(self) -> str:
        return f"{self.run_id}:{self.index}" + (f"+{self.attempt}" if self.attempt else "")

    def to_msg(self) -> dict:
        return asdict(self)

    @classmethod
    def from_msg(cls, d: dict) -> "StagePlan":
        return cls(**d)

    def make_target(self) -> Target:
        t = self.target
        return Target(t["label"], t["url"], t.get("protocol", "sglang"), t.get("model", "default"),
                      dict(t.get("headers") or {}), bool(t.get("spec_details", False)))

    def spec(self) -> StageSpec:
        """The stage's window plan, as the conductor computed it: loadgen.run.order.fixed_spec, or for an
        open loop open_spec (a fixed warm-up, the arrivals, the cool-down bounded as ``loadgen run --rate``'s)."""
        if self.rate is not None:
            from loadgen.run.order import OpenPlan, open_spec

            spec = open_spec(OpenPlan(self.arrival, self.concurrency, self.max_lag_ms), self.rate, self.warmup_s,
                             None, duration_s=self.duration_s, requests=self.requests,
                             max_cooldown_s=self.max_cooldown_s)
            return replace(spec, bin_s=self.bin_s) if self.bin_s else spec  # open_spec's bins hold requests
        return fixed_spec(self.concurrency, self.warmup_s, duration_s=self.duration_s, requests=self.requests,
                          bin_s=self.bin_s, max_cooldown_s=self.max_cooldown_s)

    def sessions(self) -> SessionSpec:
        return SessionSpec(self.turns, self.think_s, self.shared_prefix, self.prefix_ratio)

    def make_slo(self) -> Slo:
        return Slo(**self.slo)

    def make_timeouts(self) -> Timeouts:
        return Timeouts(connect_s=self.connect_timeout_s, read_s=self.read_timeout_s)

    def stream(self) -> Iterator[GenRequest]:
        """The stage's whole request sequence (seed + ladder step, and its pass)."""
        from loadgen.workloads import Lengths, resolve

        lengths = Lengths.parse(self.prompt_tokens, self.max_tokens, self.tokenizer, self.ignore_eos)
        return resolve(self.workload, lengths).requests(self.seed + prompt_seed(self.step, self.repeat or 0))

    def requests_iter(self, share: int = 0, n_shares: int = 1,
                      stream: Iterator[GenRequest] | None = None) -> Iterator[GenRequest]:
        """This process's every n-th element of the stage's sequence (``stream``, or a new one)."""
        it = self.stream() if stream is None else stream
        return it if n_shares <= 1 else itertools.islice(it, share, None, n_shares)

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

from loadgen.client.protocols import DEFAULT_PROTOCOL
from loadgen.request import GenRequest
from loadgen.run.order import fixed_spec, prompt_seed
from loadgen.run.spec import StageSpec
from loadgen.stage.load import LoadPoint
from loadgen.stage.result import Slo
from loadgen.client.target import Target
from loadgen.settings.config import StageKnobs


@dataclass
class StagePlan:
    index: int
    """Position in the run (A@1 is 0, B@1 is 1, A@2 is 2, ... for two targets): the results' ``stage_index``."""
    step: int
    """Position in the ladder: every target's stage at one concurrency shares it (and the prompt seed)."""
    target: dict
    concurrency: int
    """A closed loop's users; an open loop's in-flight cap (0: none)."""
    knobs: StageKnobs
    """The ramp's knobs every stage carries (settings/config.py): lengths, timeouts, sessions, SLOs, seed."""
    workload: str
    repeat: int | None = None
    """Its pass over the ladder in a ramp with ``run.repeat`` (0 …, the results' ``repeat``); None without."""
    spawn_s: float = 0.0
    """Locust spawns the stage's users within this long; they all start together after it (as the runner's)."""
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
    """Open loop: requests per second, sent at the planned times of ``knobs.arrival`` (None: a closed loop)."""

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
        return cls(**{**d, "knobs": StageKnobs(**d["knobs"])})

    def make_target(self) -> Target:
        t = self.target
        return Target(t["label"], t["url"], t.get("protocol", DEFAULT_PROTOCOL), t.get("model", "default"),
                      dict(t.get("headers") or {}), bool(t.get("spec_details", False)))

    def spec(self) -> StageSpec:
        """The stage's window plan, as the conductor computed it: loadgen.run.order.fixed_spec, or for an
        open loop open_spec (a fixed warm-up, the arrivals, the cool-down bounded as ``loadgen run --rate``'s)."""
        k = self.knobs
        if self.rate is not None:
            from loadgen.run.order import OpenPlan, open_spec

            spec = open_spec(OpenPlan(k.arrival, self.concurrency, k.max_dispatch_lag_ms), self.rate, k.warmup_s,
                             None, duration_s=k.duration_s, requests=k.requests, max_cooldown_s=k.max_cooldown_s)
            return replace(spec, bin_s=k.bin_s) if k.bin_s else spec  # open_spec's bins hold requests
        return fixed_spec(self.concurrency, k.warmup_s, duration_s=k.duration_s, requests=k.requests,
                          bin_s=k.bin_s, max_cooldown_s=k.max_cooldown_s)

    def make_slo(self) -> Slo:
        return Slo(**self.knobs.slo)

    def stream(self) -> Iterator[GenRequest]:
        """The stage's whole request sequence (seed + ladder step, and its pass)."""
        from loadgen.workloads import Lengths, resolve

        k = self.knobs
        lengths = Lengths.parse(k.prompt_tokens, k.max_tokens, k.tokenizer, k.ignore_eos)
        return resolve(self.workload, lengths).requests(k.seed + prompt_seed(self.step, self.repeat or 0))

    def requests_iter(self, share: int = 0, n_shares: int = 1,
                      stream: Iterator[GenRequest] | None = None) -> Iterator[GenRequest]:
        """This process's every n-th element of the stage's sequence (``stream``, or a new one)."""
        it = self.stream() if stream is None else stream
        return it if n_shares <= 1 else itertools.islice(it, share, None, n_shares)

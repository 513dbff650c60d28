"""The /metrics text in vLLM's flavour: vLLM v1's ``vllm:`` names, label sets and buckets.

In: the simulator's per-step counters (:class:`loadgen.sim.scheduler.Stats`: tokens, drafts and
accepted drafts per position, counted as each forward completes) and the per-request figures fed
here when a request's first token is written and when it ends. Out: Prometheus text as vLLM's
``PrometheusStatLogger`` (vllm/v1/metrics/loggers.py) and ``SpecDecodingProm``
(vllm/v1/spec_decode/metrics.py) render it through prometheus_client: labels ``engine`` and
``model_name`` (sorted, as prometheus_client writes them), a ``_created`` gauge beside every counter
and histogram, counters ending in ``_total``. The names, types and buckets were checked against those
files (v0.10-v0.12).

When figures move, as in vLLM: tokens, drafts and prefix-cache queries per engine step (the
scheduler's Stats); TTFT at the first token; ITL once per step output per request (not per token:
a speculative step of 3 tokens is one ITL observation); success, e2e, queue time and the per-request
histograms when the request finishes. Latencies are wall-clock seconds as the simulator lived them.
The series loadgen reads are named by vLLM's table (``loadgen.engines.vllm``), the same one the scraper
reads; the others (request_prompt_tokens, request_inference_time_seconds, …) are vLLM's own, written here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from loadgen.engines import vllm
from loadgen.sim.prom import Histogram

_M = vllm.METRICS


def _stem(quantity: str) -> str:
    """The name vLLM's table gives a quantity (or "per_position"), without its prefix and, for a counter, ``_total``."""
    name = _M.per_position.names[0] if quantity == "per_position" else _M.name(quantity)
    return name.removeprefix(_M.prefix).removesuffix("_total")


# vllm/v1/metrics/loggers.py (v0.10-v0.12): the buckets of each histogram
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
FINISH_REASONS = ("stop", "length", "abort")
"""vllm/v1/engine FinishReason as v0.10 prints them (later versions add "error", "repetition")."""


def buckets_1_2_5(max_value: int) -> tuple[int, ...]:
    """vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to max_value."""
    out, scale = [], 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_value:
                return tuple(out)
            out.append(m * scale)
        scale *= 10


@dataclass(frozen=True)
class StepCounters:
    """The per-step counters the scheduler keeps, as the page needs them."""

    prompt_tokens: int
    generation_tokens: int
    drafts: int
    draft_tokens: int
    accepted: int
    accepted_per_pos: tuple[int, ...]
    cached_tokens: int = 0
    """Of prompt_tokens, those the prefix cache held (0 without ``--prefix-cache``)."""


@dataclass
class VllmMetrics:
    """Per-request figures in vLLM's shape; the per-step counters come from the scheduler at render."""

    max_model_len: int
    created: float = field(default_factory=time.time)
    success: dict = field(default_factory=lambda: {r: 0 for r in FINISH_REASONS})
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    tpot: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    queue: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    inference: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    prompt_len: Histogram = field(init=False)
    gen_len: Histogram = field(init=False)

    def __post_init__(self) -> None:
        b = buckets_1_2_5(max(1, self.max_model_len))
        self.prompt_len = Histogram(b)
        self.gen_len = Histogram(b)

    def finished(self, reason: str, *, e2e: float, queue: float, inference: float, tpot: float | None,
                 prompt_tokens: int, generation_tokens: int) -> None:  # fmt: skip
        self.success[reason if reason in self.success else "abort"] += 1
        self.e2e.observe(max(0.0, e2e))
        self.queue.observe(max(0.0, queue))
        self.inference.observe(max(0.0, inference))
        if tpot is not None:
            self.tpot.observe(max(0.0, tpot))
        self.prompt_len.observe(prompt_tokens)
        self.gen_len.observe(generation_tokens)

    def render(self, *, model: str, running: int, waiting: int, kv_usage: float,
               steps: StepCounters, positions: int | None) -> str:  # fmt: skip
        """``positions``: vLLM's num_speculative_tokens, or None without speculative decoding
        (vLLM then registers no spec_decode counters at all)."""
        lines: list[str] = []
        created = self.created

        def labels(**extra: str) -> str:
            lab = {"engine": "0", "model_name": model, **extra}
            return ",".join(f'{k}="{v}"' for k, v in sorted(lab.items()))

        base = labels()

        def family(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP {name} {help_}")
            lines.append(f"# TYPE {name} {kind}")
            lines.extend(f"{name}{{{lab}}} {float(v)!r}" for lab, v in samples)

        def counter(stem: str, help_: str, samples: list[tuple[str, float]]) -> None:
            family(f"{_M.prefix}{stem}_total", "counter", help_, samples)
            family(f"{_M.prefix}{stem}_created", "gauge", help_, [(lab, created) for lab, _ in samples])

        def histogram(stem: str, help_: str, h: Histogram) -> None:
            name = f"{_M.prefix}{stem}"
            lines.append(f"# HELP {name} {help_}")
            lines.append(f"# TYPE {name} histogram")
            cum = 0
            for le, c in zip(h.buckets, h.counts):
                cum += c
                lines.append(f"{name}_bucket{{{labels(le=repr(float(le)))}}} {float(cum)!r}")
            lines.append(f'{name}_bucket{{{labels(le="+Inf")}}} {float(h.n)!r}')
            lines.append(f"{name}_count{{{base}}} {float(h.n)!r}")
            lines.append(f"{name}_sum{{{base}}} {float(h.total)!r}")
            family(f"{name}_created", "gauge", help_, [(base, created)])

        family(_M.name("running"), "gauge", "Number of requests in model execution batches.",
               [(base, running)])  # fmt: skip
        family(_M.name("queued"), "gauge", "Number of requests waiting to be processed.",
               [(base, waiting)])  # fmt: skip
        family(_M.name("kv_usage"), "gauge", "KV-cache usage. 1 means 100 percent usage.",
               [(base, kv_usage)])  # fmt: skip
        # every prompt token is a query, per step as vLLM counts; hits only with --prefix-cache
        counter(_stem("cache_queries"), "Prefix cache queries, in terms of number of queried tokens.",
                [(base, steps.prompt_tokens)])  # fmt: skip
        counter(_stem("cache_hits"), "Prefix cache hits, in terms of number of cached tokens.",
                [(base, steps.cached_tokens)])  # fmt: skip
        counter(_stem("preemptions"), "Cumulative number of preemption from the engine.", [(base, 0)])
        counter(_stem("prompt_tokens"), "Number of prefill tokens processed.", [(base, steps.prompt_tokens)])
        counter(_stem("output_tokens"), "Number of generation tokens processed.", [(base, steps.generation_tokens)])
        counter(_stem("requests"), "Count of successfully processed requests.",
                [(labels(finished_reason=r), n) for r, n in self.success.items()])  # fmt: skip
        histogram("request_prompt_tokens", "Number of prefill tokens processed.", self.prompt_len)
        histogram("request_generation_tokens", "Number of generation tokens processed.", self.gen_len)
        histogram(_stem("ttft"), "Histogram of time to first token in seconds.", self.ttft)
        histogram(_stem("itl"), "Histogram of inter-token latency in seconds.", self.itl)
        histogram("request_time_per_output_token_seconds",
                  "Histogram of time_per_output_token_seconds per request.", self.tpot)  # fmt: skip
        histogram(_stem("e2e"), "Histogram of e2e request latency in seconds.", self.e2e)
        histogram(_stem("queue_time"), "Histogram of time spent in WAITING phase for request.", self.queue)
        histogram("request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
                  self.inference)  # fmt: skip
        if positions is not None:
            counter(_stem("drafts"), "Number of spec decoding drafts.", [(base, steps.drafts)])
            counter(_stem("draft_tokens"), "Number of draft tokens.", [(base, steps.draft_tokens)])
            counter(_stem("accepted_tokens"), "Number of accepted tokens.", [(base, steps.accepted)])
            per_pos = list(steps.accepted_per_pos[:positions]) + [0] * max(0, positions - len(steps.accepted_per_pos))
            counter(_stem("per_position"), "Accepted tokens per draft position.",
                    [(labels(position=str(i)), n) for i, n in enumerate(per_pos)])  # fmt: skip
        return "\n".join(lines) + "\n"

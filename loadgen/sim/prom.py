"""The /metrics text: SGLang's ``sglang:`` Prometheus names, filled from the simulator's state.

The series loadgen reads are named by SGLang's table (``loadgen.engines.sglang``), the same one the
scraper reads; the others (gen_throughput, utilization, …) are SGLang's own, written here.
Latencies are wall-clock seconds as the simulator lived them (at time-scale X
they are X times shorter than the simulated deployment's), so they compare
directly with what a client measures.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from loadgen.engines import sglang, vllm

METRICS_FLAVOURS = (sglang.ENGINE.name, vllm.ENGINE.name)
"""The engines whose /metrics the simulator writes (``--metrics-flavour``): this module's, and promvllm's."""

_M = sglang.METRICS


def _n(quantity: str) -> str:
    """The name SGLang's table gives a quantity, without its prefix."""
    return _M.name(quantity).removeprefix(_M.prefix)


TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
ITL_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
    0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
)  # fmt: skip
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400)


@dataclass
class Histogram:
    buckets: tuple
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect_left(self.buckets, value)] += times
        self.total += value * times
        self.n += times

    def lines(self, name: str, labels: str) -> list[str]:
        out, cum = [], 0
        for le, c in zip(self.buckets, self.counts):
            cum += c
            out.append(f'{name}_bucket{{{labels},le="{float(le)}"}} {cum}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.n}')
        out.append(f"{name}_sum{{{labels}}} {self.total}")
        out.append(f"{name}_count{{{labels}}} {self.n}")
        return out


@dataclass
class Metrics:
    """Tokenizer-side counters and histograms, split by is_streaming as SGLang does."""

    prompt_tokens: dict = field(default_factory=lambda: {True: 0, False: 0})
    generation_tokens: dict = field(default_factory=lambda: {True: 0, False: 0})
    requests: dict = field(default_factory=lambda: {True: 0, False: 0})
    aborted: int = 0
    cached_tokens: int = 0
    """Prompt tokens finished requests found in the prefix cache (0 without ``--prefix-cache``)."""
    spec_verify_calls: int = 0
    http_requests: int = 0
    http_active: int = 0
    events_written: int = 0
    """Stream events written to sockets (the bench's chunks/s)."""
    ttft: dict = field(default_factory=lambda: {s: Histogram(TTFT_BUCKETS) for s in (True, False)})
    e2e: dict = field(default_factory=lambda: {s: Histogram(E2E_BUCKETS) for s in (True, False)})
    tpot: dict = field(default_factory=lambda: {s: Histogram(ITL_BUCKETS) for s in (True, False)})
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    queue_time: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))

    def render(self, *, model: str, sched: dict, spec: dict | None) -> str:
        base = f'model_name="{model}",engine_type="unified"'
        rank = f'{base},{_M.rank_label}="0",pp_rank="0",moe_ep_rank="0"'
        lines: list[str] = []

        def metric(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP {_M.prefix}{name} {help_}")
            lines.append(f"# TYPE {_M.prefix}{name} {kind}")
            lines.extend(f"{_M.prefix}{name}{{{lab}}} {val}" for lab, val in samples)

        for key, help_ in (
            (_n("running"), "The number of running requests."),
            (_n("queued"), "The number of requests in the waiting queue."),
            ("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue."),
            ("gen_throughput", "The generation throughput (token/s)."),
            (_n("cache_hit_rate"), "The prefix cache hit rate."),
            (_n("kv_usage"), "The token usage."),
            ("num_used_tokens", "The number of used tokens."),
            ("utilization", "The utilization."),
            ("num_retracted_reqs", "The number of retracted requests."),
            ("num_paused_reqs", "The number of paused requests."),
            ("is_cuda_graph", "Whether the batch is using CUDA graph."),
            ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
            ("context_len", "The context length."),
        ):
            metric(key, "gauge", help_, [(rank, sched.get(key, 0))])
        if spec is not None:
            for key, help_ in (
                ("spec_accept_length", "The average acceptance length of speculative decoding."),
                ("spec_accept_rate", "The average acceptance rate of speculative decoding."),
                ("spec_num_steps", "The number of speculative decoding steps."),
                ("spec_num_draft_tokens", "The number of draft tokens per verify."),
            ):
                metric(key, "gauge", help_, [(rank, spec.get(key, 0))])
            metric(
                _n("verify_calls"), "counter", "Total speculative verify calls of finished requests.",
                [(base, self.spec_verify_calls)],
            )  # fmt: skip
        stream_lab = {s: f'{base},is_streaming="{str(s).lower()}"' for s in (True, False)}
        for key, src, help_ in (
            (_n("prompt_tokens"), self.prompt_tokens, "Number of prefill tokens processed."),
            (_n("output_tokens"), self.generation_tokens, "Number of generation tokens processed."),
            (_n("requests"), self.requests, "Number of requests processed."),
        ):
            metric(key, "counter", help_, [(stream_lab[s], src[s]) for s in (True, False)])
        metric(_n("aborted_requests"), "counter", "Number of requests aborted.", [(base, self.aborted)])
        # counted when a request ends, as SGLang's tokenizer side does; 0 without --prefix-cache
        metric(_n("cache_hits"), "counter", "Number of cached prompt tokens.", [(base, self.cached_tokens)])
        for key, src, help_ in (
            (_n("ttft"), self.ttft, "Histogram of time to first token in seconds."),
            (_n("e2e"), self.e2e, "Histogram of End-to-end request latency in seconds."),
            ("request_time_per_output_token_seconds", self.tpot, "Histogram of time per output token in seconds."),
        ):
            lines.append(f"# HELP {_M.prefix}{key} {help_}")
            lines.append(f"# TYPE {_M.prefix}{key} histogram")
            for s in (True, False):
                lines.extend(src[s].lines(f"{_M.prefix}{key}", stream_lab[s]))
        for name, h, lab, help_ in ((_M.name("itl"), self.itl, base, "Histogram of inter-token latency in seconds."),
                                    (_M.name("queue_time"), self.queue_time, rank,
                                     "Histogram of queueing time in seconds.")):
            lines.append(f"# HELP {name} {help_}")
            lines.append(f"# TYPE {name} histogram")
            lines.extend(h.lines(name, lab))
        metric("http_requests_total", "counter", "Total HTTP requests.", [(base, self.http_requests)])
        metric("http_requests_active", "gauge", "HTTP requests in flight.", [(base, self.http_active)])
        return "\n".join(lines) + "\n"

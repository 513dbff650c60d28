"""Each engine's metric names: which series mean "tokens generated", "requests running"...

In: nothing (tables). Out: :data:`ENGINES`, name → :class:`Engine`, and :func:`detect`.

Names are sample names as ``prometheus_client``'s parser yields them (counters keep ``_total``);
each quantity lists the aliases engines used across versions, first found wins. Sources, checked
against the engines' code (see /work/figs and docs/metrics.md for the versions):

- SGLang: python/sglang/srt/metrics/collector.py (and observability/metrics_collector.py later):
  tokenizer-side counters, which move when a request **finishes**; scheduler gauges labelled
  ``tp_rank`` (one series per rank: only rank 0 is read, see ``page``).
- vLLM (v1): vllm/v1/metrics/loggers.py and vllm/v1/spec_decode/metrics.py: counters move per
  engine **step** as tokens are produced; labels ``model_name``, ``engine``.
- llama.cpp: tools/server/server.cpp ``/metrics`` (with ``--metrics``): counters move when a
  request **ends** (slot released), measured on b1-0c1e570 (docs/real-servers.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True)
class Series:
    """Where one quantity lives on a page."""

    names: tuple[str, ...]
    """Aliases across versions; the first present on the page is read."""
    agg: str = "sum"
    """Over label sets: "sum" (counts, requests over data-parallel ranks) or "mean" (ratios)."""
    where: Mapping[str, str] = field(default_factory=dict)
    """Only label sets with these label values (vLLM's request_success_total{finished_reason="abort"})."""


def S(*names: str, agg: str = "sum", **where: str) -> Series:
    return Series(tuple(names), agg, dict(where))


COUNTERS = ("output_tokens", "prompt_tokens", "requests", "aborted_requests", "drafts", "draft_tokens",
            "accepted_tokens", "verify_calls", "cache_queries", "cache_hits", "preemptions",
            "decode_steps")
"""The counter quantities a window summary reports (each engine has a subset)."""

GAUGES = ("running", "queued", "kv_usage", "cache_hit_rate")
HISTOGRAMS = ("ttft", "itl", "e2e", "queue_time")


@dataclass(frozen=True)
class Engine:
    name: str
    prefix: str
    counters: Mapping[str, Series]
    gauges: Mapping[str, Series]
    histograms: Mapping[str, Series] = field(default_factory=dict)
    """Base names (no ``_bucket``/``_sum``/``_count``) of the server's latency histograms, in seconds."""
    per_position: Series | None = None
    """A counter labelled ``position="k"``: drafts whose k-th token was accepted."""
    busy_per_step: str | None = None
    """llama.cpp's ``n_busy_slots_per_decode`` gauge (mean busy slots per decode call since start)."""
    counted_when: str = "unknown"
    """"request_end": a request's tokens are added when it ends; "step": as they are produced."""
    counted_when_note: str = ""
    reset: tuple[str, str] | None = None
    """How its prefix cache is emptied: (method, path); ("slots", "") is llama.cpp's per-slot erase."""
    kv_usage_note: str = ""


SGLANG_RANK = "tp_rank"

ENGINES: dict[str, Engine] = {
    "sglang": Engine(
        name="sglang", prefix="sglang:",
        counters={
            "output_tokens": S("sglang:generation_tokens_total"),
            "prompt_tokens": S("sglang:prompt_tokens_total"),
            "requests": S("sglang:num_requests_total"),
            "aborted_requests": S("sglang:num_aborted_requests_total"),
            "verify_calls": S("sglang:spec_verify_calls_total"),
            "cache_hits": S("sglang:cached_tokens_total"),
        },
        gauges={
            "running": S("sglang:num_running_reqs"),
            "queued": S("sglang:num_queue_reqs"),
            "kv_usage": S("sglang:token_usage", agg="mean"),
            "cache_hit_rate": S("sglang:cache_hit_rate", agg="mean"),
        },
        histograms={
            "ttft": S("sglang:time_to_first_token_seconds"),
            "itl": S("sglang:inter_token_latency_seconds"),
            "e2e": S("sglang:e2e_request_latency_seconds"),
            "queue_time": S("sglang:queue_time_seconds"),
        },
        counted_when="request_end",
        counted_when_note=("SGLang's tokenizer-side counters add a request's tokens and verify calls when it "
                           "finishes (as loadgen.sim does): the requests that ENDED between the two scrapes"),
        reset=("POST", "/flush_cache"),
        kv_usage_note="token_usage: used KV tokens / pool size",
    ),
    "vllm": Engine(
        name="vllm", prefix="vllm:",
        counters={
            "output_tokens": S("vllm:generation_tokens_total"),
            "prompt_tokens": S("vllm:prompt_tokens_total"),
            "requests": S("vllm:request_success_total"),
            "aborted_requests": S("vllm:request_success_total", finished_reason="abort"),
            "drafts": S("vllm:spec_decode_num_drafts_total"),
            "draft_tokens": S("vllm:spec_decode_num_draft_tokens_total"),
            "accepted_tokens": S("vllm:spec_decode_num_accepted_tokens_total"),
            "cache_queries": S("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
            "cache_hits": S("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
            "preemptions": S("vllm:num_preemptions_total"),
        },
        gauges={
            "running": S("vllm:num_requests_running"),
            "queued": S("vllm:num_requests_waiting"),
            "kv_usage": S("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", agg="mean"),
        },
        histograms={
            "ttft": S("vllm:time_to_first_token_seconds"),
            "itl": S("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
            "e2e": S("vllm:e2e_request_latency_seconds"),
            "queue_time": S("vllm:request_queue_time_seconds"),
        },
        per_position=S("vllm:spec_decode_num_accepted_tokens_per_pos_total"),
        counted_when="step",
        counted_when_note=("vLLM (v1) adds tokens and drafts per engine step, as they are produced: the tokens "
                           "generated between the two scrapes"),
        reset=("POST", "/reset_prefix_cache"),
        kv_usage_note="kv_cache_usage_perc: a fraction 0-1 despite its name",
    ),
    "llama.cpp": Engine(
        name="llama.cpp", prefix="llamacpp:",
        counters={
            "output_tokens": S("llamacpp:tokens_predicted_total"),
            "prompt_tokens": S("llamacpp:prompt_tokens_total"),
            "drafts": S("llamacpp:spec_decode_num_drafts_total"),
            "draft_tokens": S("llamacpp:spec_decode_num_draft_tokens_total"),
            "accepted_tokens": S("llamacpp:spec_decode_num_accepted_tokens_total"),
            "decode_steps": S("llamacpp:n_decode_total"),
        },
        gauges={
            "running": S("llamacpp:requests_processing"),
            "queued": S("llamacpp:requests_deferred"),
            "kv_usage": S("llamacpp:kv_cache_usage_ratio", agg="mean"),
        },
        per_position=S("llamacpp:spec_decode_num_accepted_tokens_per_pos_total"),
        busy_per_step="llamacpp:n_busy_slots_per_decode",
        counted_when="request_end",
        counted_when_note=("llama.cpp adds a request's tokens and drafts when the request ends (slot released, "
                           "also on cancel): these are the requests that ENDED between the two scrapes, with all "
                           "their tokens, not the tokens generated in the window (measured on b1-0c1e570)"),
        reset=("slots", ""),
    ),
}


def detect(names: set[str] | list[str]) -> str:
    """The engine whose prefix the page's sample names carry, else "unknown"."""
    for engine in ENGINES.values():
        if any(n.startswith(engine.prefix) for n in names):
            return engine.name
    return "unknown"


def interval_names(engine: Engine) -> set[str]:
    """What a sample between the edges needs: the gauges, and the counters a restart would move back."""
    out = {n for s in engine.gauges.values() for n in s.names}
    for q in ("output_tokens", "requests", "decode_steps"):
        if q in engine.counters:
            out.update(engine.counters[q].names)
    return out

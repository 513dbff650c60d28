"""SGLang: everything loadgen knows about it.

- Detected by its ``/server_info`` (older builds: ``/get_server_info``), which carries
  ``internal_states`` or ``speculative_algorithm``; kept whole as the probe's ``server_info``.
  Its ``/v1/models`` says ``owned_by: "sglang"`` only on some builds, so the page is asked whatever
  ``/v1/models`` said. It speculates when ``speculative_algorithm`` is set. Its OpenAI routes report
  acceptance only when a request asks (``spec_details``).
- ``/metrics``: python/sglang/srt/metrics/collector.py (and observability/metrics_collector.py later):
  tokenizer-side counters, which move when a request **finishes**; scheduler gauges labelled
  ``tp_rank`` (one series per rank: only rank 0 is read).
- Cache reset: POST ``/flush_cache``, refused with HTTP 400 while requests run.
- Per-batch speculation: ``--speculative-adaptive --speculative-adaptive-config FILE``
  (``python/sglang/srt/speculative/adaptive_spec_params.py``): a JSON object whose integer-string
  keys are batch-size lower bounds, each ``{"candidate_steps": [...]}`` (+ optional EMA knobs); a
  batch uses the largest key ≤ its size, after padding the size up to the next captured CUDA-graph
  batch size (``adaptive_step_router.py``); steps 0 turns drafting off; each tier runs with
  ``num_draft_tokens = steps + 1``. Only EAGLE/EAGLE3 with ``speculative_eagle_topk`` 1 (else SGLang
  silently keeps static settings: ``adaptive_unsupported_reason``). A single candidate per tier
  pins the steps, so the EMA has nothing to choose. Batch-size keys came with PR #24055; builds with
  only PR #21599 read a flat ``{"candidate_steps": [...]}`` and cannot key by batch size.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from loadgen.engines.base import S, Engine, Metrics, Probe, Reset, Setting, SpecSetup, Tier

ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")

NAME = "sglang"

METRICS = Metrics(
    prefix="sglang:",
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
    kv_usage_note="token_usage: used KV tokens / pool size",
    rank_label="tp_rank",
)


def _is_info(page: Any) -> bool:
    return isinstance(page, dict) and ("internal_states" in page or "speculative_algorithm" in page)


def _speculative(server_info: Mapping) -> bool | None:
    return bool(server_info.get("speculative_algorithm"))


# --- engine terms ---------------------------------------------------------------------------------


def _graph_sizes(info: Mapping) -> list[int] | None:
    if info.get("disable_cuda_graph"):
        return None
    for key in ("cuda_graph_bs_decode", "cuda_graph_bs"):
        v = info.get(key)
        if isinstance(v, list) and v and all(isinstance(x, int) for x in v):
            return sorted(v)
    return None


def _key(t: int, graphs: list[int] | None) -> tuple[int, str]:
    """The tier key whose effective first batch is nearest ``t``. SGLang pads a batch up to the next captured
    CUDA-graph size before choosing its tier, so a key k takes effect from (largest captured size < k) + 1:
    the achievable edges are g + 1 for captured g, and anything above the largest captured size."""
    if not graphs or t > graphs[-1]:
        return t, ""
    edges = sorted({g + 1 for g in graphs if g + 1 <= graphs[-1] + 1})
    k = min(edges, key=lambda e: (abs(e - t), e))
    if k == t:
        return t, ""
    return k, (f"the server captures CUDA graphs at batch sizes {graphs[:12]}{'…' if len(graphs) > 12 else ''} "
               f"and pads a batch up to the next one before choosing the tier, so a tier can start only just above "
               f"a captured size: {k} is the nearest to the measured {t}")


class AdaptiveTiers:
    """``--speculative-adaptive-config``: tiers keyed by running batch, each pinning ``candidate_steps``."""

    def setup(self, label: str, probe: Mapping) -> SpecSetup:
        info = dict(probe.get("server_info") or {})
        algo = info.get("speculative_algorithm")
        if not algo:
            return SpecSetup(label, NAME, False, 0, {"model": info.get("model_path")}, info)
        topk = info.get("speculative_eagle_topk")
        steps = info.get("speculative_num_steps")
        why = ""
        if str(algo).upper() not in ADAPTIVE_ALGORITHMS:
            why = f"{label} runs {algo}; SGLang's adaptive tiers take only EAGLE/EAGLE3"
        elif topk not in (None, 1):
            why = (f"{label} runs EAGLE topk={topk}; SGLang's adaptive tiers take only topk=1 "
                   "(tree drafts keep static settings)")
        elif not isinstance(steps, int) or steps < 1:
            why = f"{label}'s server does not report speculative_num_steps"
        same = {"model": info.get("model_path"), "algorithm": str(algo).upper(),
                "draft": info.get("speculative_draft_model_path"),
                "overlap": not info.get("disable_overlap_schedule", False)}
        return SpecSetup(label, NAME, True, steps if isinstance(steps, int) else None, same, info, why)

    def write(self, tiers: Sequence[Tier], setups: Mapping[str, SpecSetup], reference: str) -> Setting:
        top = max((setups[t.label] for t in tiers if setups[t.label].speculative), key=lambda c: c.steps or 0)
        graphs = _graph_sizes(top.info)
        keyed: dict[str, dict] = {}
        rules, notes, unlisted = [], [], []
        for i, t in enumerate(tiers):
            c = setups[t.label]
            steps = c.steps if c.speculative else 0
            if i == 0:
                key, why = 1, ""
            else:
                key, why = _key(t.start, graphs)
                if why:
                    notes.append(why)
                elif graphs is None and not top.info.get("disable_cuda_graph") and key > 2:
                    unlisted.append(key)
            keyed[str(key)] = {"candidate_steps": [steps]}
            what = f"{steps} steps ({t.label})" if steps else f"speculation off ({t.label})"
            span = f"running batch ≥ {key}{t.where}" if i else "from batch 1"
            rules.append(f"{what} {span}")
        if unlisted:
            ks = ", ".join(map(str, unlisted))
            notes.append(f"SGLang pads a batch up to the next captured CUDA-graph size before choosing the tier, so "
                         f"a tier at k starts just above the largest captured size below k; the server did not list "
                         f"its sizes: capture {', '.join(str(k - 1) for k in unlisted)} (--cuda-graph-bs; "
                         f"--cuda-graph-bs-decode on newer builds) for the tiers at {ks} to start exactly there")
        keys = sorted(int(k) for k in keyed)
        if len(set(keys)) < len(tiers):
            notes.append("two switches fall on the same integer batch size; the later tier wins there")
        config = json.dumps({str(k): keyed[str(k)] for k in keys}, separators=(", ", ": "))
        n = top.steps or 1
        flags = (f"--speculative-algorithm {top.same['algorithm']} --speculative-eagle-topk 1 "
                 f"--speculative-num-steps {n} --speculative-num-draft-tokens {n + 1} "
                 "--speculative-adaptive --speculative-adaptive-config adaptive.json")
        notes += _cap_notes(top, setups.get(reference), reference, int(keys[-1]))
        off = [t.label for t in tiers if not setups[t.label].speculative]
        if off:
            notes.append(f"speculation off on the speculative server is not {off[0]}'s own server: the draft model "
                         "still holds memory (fewer KV pages) and the step-0 tier runs the speculative worker's code "
                         "path; measure the adaptive server itself (loadgen crossover --adaptive LABEL)")
        ties = sorted({x for t in tiers for x in t.tie})
        if ties:
            notes.append(f"where {', '.join(ties)} tie(s) with the chosen configuration the tier could be either "
                         "(ties continue the neighbouring configuration, so they add no switch)")
        notes.append("needs an SGLang build whose adaptive config takes batch-size keys and steps 0 (main's "
                     "adaptive_spec_params.py, default tiers 1/8/32/64, off from 64)")
        text = "--speculative-adaptive with " + "; ".join(rules) + "."
        return Setting(text, config, "; ".join(notes) + ".", flags)


def _cap_notes(top: SpecSetup, ref: SpecSetup | None, reference: str, last: int) -> list[str]:
    """Where max_running_requests keeps the last tier out of reach, or caps below the reference's."""
    notes = []
    cap = top.info.get("max_running_requests")
    if isinstance(cap, int) and last > cap:
        notes.append(f"the last tier starts at batch {last}, above the speculative server's max_running_requests "
                     f"({cap}; SGLang's default under speculation is 48): raise --max-running-requests "
                     "or it is never reached")
    if ref is not None and not ref.speculative and isinstance(cap, int):
        ref_cap = ref.info.get("max_running_requests")
        if isinstance(ref_cap, int) and ref_cap > cap:
            notes.append(f"{reference} ran up to {ref_cap} requests at once, the speculative server caps at {cap}: "
                         "the adaptive server keeps that cap unless --max-running-requests is raised")
    return notes


ENGINE = Engine(
    name=NAME,
    title="SGLang",
    cap_word="max_running_requests",
    probe=Probe(info_paths=("/server_info", "/get_server_info"), asked_always=True, is_info=_is_info),
    speculative=_speculative,
    native_protocol="sglang",
    spec_details=True,
    metrics=METRICS,
    reset=Reset("POST", "/flush_cache", busy=(400,)),
    terms=AdaptiveTiers(),
)

"""llama.cpp's llama-server: everything loadgen knows about it.

- Detected by its ``/v1/models`` (``owned_by: "llamacpp"``) or its ``/props`` (which has
  ``default_generation_settings``); ``/slots`` says whether it speculates (see :func:`server_info`).
- ``/metrics`` (served with ``--metrics``): tools/server/server.cpp: counters move when a request
  **ends** (slot released), measured on b1-0c1e570 (docs/real-servers.md).
- Cache reset: no whole-cache reset; each slot is erased (``POST /slots/{id}?action=erase``), which
  needs its ``/slots`` endpoint (on unless ``--no-slots``) and ``--slot-save-path`` (every slot action
  answers 501 without it, tools/server/server.cpp).
- No load-dependent speculation setting: draft sizes are fixed at launch.
"""

from __future__ import annotations

from typing import Any, Mapping

from loadgen.engines.base import S, Engine, Metrics, Probe, Reset

METRICS = Metrics(
    prefix="llamacpp:",
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
)


def _is_props(page: Any) -> bool:
    return isinstance(page, dict) and "default_generation_settings" in page


def server_info(props: dict, slots: Any) -> dict:
    """What llama.cpp's ``/props`` and ``/slots`` say about its configuration and speculation.

    Measured on llama-server b1-0c1e570 (tests/e2e): ``/props`` has no speculative settings
    at all (its ``default_generation_settings.params["speculative.types"]`` reads "none" on an
    n-gram server too); ``/slots`` gives each slot's ``speculative`` flag and, for a slot that
    has served a request, ``params["speculative.types"]`` (e.g. "none,ngram-simple"). The
    draft sizes (n-gram N and M, ``--draft-max``) are reported nowhere; the number of
    per-position acceptance counters on ``/metrics`` (loadgen.serverview) is the draft max.
    """
    info = {k: props[k] for k in ("build_info", "total_slots", "model_path") if k in props}
    if "build_info" in props:
        info["version"] = props["build_info"]
    dgs = props.get("default_generation_settings")
    if isinstance(dgs, dict) and isinstance(dgs.get("n_ctx"), int):
        info["n_ctx_per_slot"] = dgs["n_ctx"]
    if not isinstance(slots, list) or not all(isinstance(x, dict) for x in slots) or not slots:
        info["slots_endpoint"] = False  # --no-slots (501), or an answer we cannot read
        return info
    info["slots_endpoint"] = True
    flags = [x.get("speculative") for x in slots]
    if all(isinstance(f, bool) for f in flags):
        info["speculative"] = any(flags)
        info["speculative_slots"] = sum(flags)
    types: set[str] = set()
    for x in slots:
        params = x.get("params")
        if isinstance(params, dict) and isinstance(params.get("speculative.types"), str):
            types.update(t for t in params["speculative.types"].split(",") if t and t != "none")
    if types:
        # The key SGLang uses for the same fact, so reports name llama.cpp's drafter too.
        info["speculative_types"] = info["speculative_algorithm"] = ",".join(sorted(types))
    return info


def _speculative(info: Mapping) -> bool | None:
    """Every slot of ``/slots`` says ``"speculative": true|false``; None if ``/slots`` is off (``--no-slots``)."""
    spec = info.get("speculative")
    return spec if isinstance(spec, bool) else None


ENGINE = Engine(
    name="llama.cpp",
    title="llama.cpp",
    cap_word="slots",
    probe=Probe(owned_by="llamacpp", info_paths=("/props",), then_paths=("/slots",), is_info=_is_props,
                server_info=server_info),
    speculative=_speculative,
    # cpp-httplib answers "Keep-Alive: timeout=5, max=100" and no "Connection: close", then closes the socket
    # after the last chunk of every stream (JSON answers keep it): pooled, 39 of 40 requests at C=1 were
    # sent on the dead socket first
    closes_after_stream="llama.cpp",
    metrics=METRICS,
    reset=Reset("POST", "/slots/{id}?action=erase", slots="/slots",
                hints={501: "llama.cpp erases a slot only when started with --slot-save-path"},
                slots_hints={501: "llama.cpp: /slots is off, --no-slots", 0: "llama.cpp started with --no-slots?"}),
    no_terms=("llama.cpp has no load-dependent speculation setting (llama.cpp fixes its draft sizes at launch): "
              "keep the servers and route by load"),
)

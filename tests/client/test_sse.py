"""SSE parsing whatever the TCP boundaries, checked on real SGLang stream shapes."""

from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.client.sse import Event, SSEParser

# Shapes as SGLang 0.5.23 streams them (cumulative /generate, chat, completions; docs/simulator.md).
GENERATE = (
    b'data: {"text":" Paris","output_ids":[11],"meta_info":{"id":"a","finish_reason":null,"completion_tokens":1}}\n\n'
    b'data: {"text":" Paris is the","output_ids":[11,22,33],"meta_info":{"id":"a","finish_reason":null,"completion_tokens":3}}\n\n'
    + 'data: {"text":" Paris est la capitale \u00e9\u00e9 \u2014 \U0001f600","meta_info":{"id":"a","completion_tokens":6}}\n\n'.encode()
    + b"data: [DONE]\n\n"
)
CHAT = (
    b'data: {"id":"b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning_content":null},"logprobs":null,"finish_reason":null,"matched_stop":null}]}\n\n'
    b'data: {"id":"b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":null,"content":"Hello"},"logprobs":null,"finish_reason":null,"matched_stop":null}]}\n\n'
    b"event: sglext_ids\ndata: {\"ids\":[1,2]}\n\n"
    b": keep-alive comment\n\n"
    b'data: {"id":"b","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3}}\n\n'
    b"data: [DONE]\n\n"
)


def parse_whole(stream: bytes) -> list[Event]:
    p = SSEParser()
    return p.feed(stream) + p.close()


def parse_split(stream: bytes, cuts: list[int]) -> list[Event]:
    p = SSEParser()
    out, prev = [], 0
    for c in sorted(set(cuts)) + [len(stream)]:
        out += p.feed(stream[prev:c])
        prev = c
    return out + p.close()


def test_whole_streams():
    ev = parse_whole(GENERATE)
    assert len(ev) == 4 and ev[-1].data == b"[DONE]"
    assert "\U0001f600" in ev[2].data.decode()
    ev = parse_whole(CHAT)
    assert [e.name for e in ev] == [b"", b"", b"sglext_ids", b"", b""]
    assert ev[2].data == b'{"ids":[1,2]}'


def test_crlf_and_cr_line_ends_split_between_reads():
    crlf = GENERATE.replace(b"\n", b"\r\n")
    cr = GENERATE.replace(b"\n", b"\r")
    for stream in (crlf, cr):
        for cut in range(len(stream)):
            assert parse_split(stream, [cut]) == parse_whole(GENERATE)


def test_data_without_space_and_multiline_data():
    ev = parse_whole(b"data:{\"a\":1}\n\ndata: x\ndata: y\n\n")
    assert ev == [Event(b'{"a":1}'), Event(b"x\ny")]


def test_last_event_without_blank_line_is_kept_at_close():
    p = SSEParser()
    assert p.feed(b'data: {"a":1}\n\ndata: [DONE]') == [Event(b'{"a":1}')]
    assert p.close() == [Event(b"[DONE]")]


def test_error_event_mid_stream_is_an_event():
    ev = parse_whole(b'data: {"text":"a"}\n\ndata: {"error": {"message": "boom"}}\n\ndata: [DONE]\n\n')
    assert ev[1].data.startswith(b'{"error"')


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([GENERATE, CHAT, GENERATE.replace(b"\n", b"\r\n"), CHAT.replace(b"\n", b"\r\n")]),
       st.lists(st.integers(min_value=0, max_value=2000), max_size=40))
def test_any_rechunking_gives_the_same_events(stream, cuts):
    cuts = [c % (len(stream) + 1) for c in cuts]
    assert parse_split(stream, cuts) == parse_whole(stream.replace(b"\r\n", b"\n"))

"""The interface every wire protocol implements, and the per-stream state it fills.

A protocol adapter knows one server API: how to build the request body from a
GenRequest and what each streamed event means (tokens carried, usage, finish,
errors, acceptance). Engine quirks live in adapters, never in the client.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import orjson

from loadgen import engines
from loadgen.request import GenRequest

UNKNOWN = -1
"""Returned by ``on_event`` for an event that carries text but no token count."""


@dataclass(slots=True)
class StreamState:
    """What an adapter learns from one stream's events."""

    completion_tokens: int = 0
    """Running server count, when the server sends one per event."""
    final_completion_tokens: int | None = None
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    error_class: str | None = None
    error_message: str | None = None
    server_id: str | None = None
    accept_length: float | None = None
    verify_ct: int | None = None
    accepted_drafts: int | None = None
    proposed_drafts: int | None = None
    server_reasoning_tokens: int | None = None
    """The server's count of reasoning tokens, from its usage."""
    cached_tokens: int | None = None
    """Prompt tokens the server says it served from its prefix cache, from its usage or timings."""
    chunks: array = field(default_factory=lambda: array("l"))
    """The record's chunk counts as the read loop appends them (after each event's ``on_event``): an adapter
    that tells reasoning from output notes where the kind changed by this length, with no per-chunk work."""
    thinking: bool = False
    """The last text-carrying event was reasoning."""
    switches: list[int] = field(default_factory=list)
    """Chunk indices where the stream went into reasoning, then out of it, alternately (``thinking``)."""
    done: bool = False
    """The stream's end marker ([DONE]) was seen."""
    reply: list[str] | None = None
    """The answer's text of each event, when the request asked for its reply (a session's turn, whose reply goes
    into its next prompt); None otherwise: one test per text event is all it costs then."""
    extra: dict = field(default_factory=dict)
    """Engine-specific facts worth keeping (e.g. llama.cpp ``timings``)."""

    def fail(self, error_class: str, message: str) -> None:
        if self.error_class is None:
            self.error_class = error_class
            self.error_message = str(message)[:500]

    def switch(self) -> None:
        """The event being read carries the other kind (reasoning or output) than the one before it."""
        self.thinking = not self.thinking
        self.switches.append(len(self.chunks))

    def reasoning_spans(self, n_chunks: int) -> tuple[tuple[int, int], ...]:
        """The chunk index ranges that carried reasoning, the last closed at ``n_chunks`` if still open;
        empty ranges (a switch on an event that carried no token) dropped."""
        cuts = [*self.switches, n_chunks] if len(self.switches) % 2 else self.switches
        return tuple((lo, hi) for lo, hi in zip(cuts[::2], cuts[1::2]) if hi > lo)


class Protocol:
    """One server API. Subclasses set ``name`` and ``path`` and implement both methods."""

    name: str = ""
    path: str = ""

    def __init__(self, model: str = "default") -> None:
        self.model = model

    def build(self, req: GenRequest, rid: str) -> dict:
        """The JSON body of a streaming request."""
        raise NotImplementedError

    @staticmethod
    def closes_after_stream(headers) -> bool:
        """Whether the server will close this connection once the stream ends, although it did not say so
        (the engine's ``closes_after_stream``, by its ``Server`` header, which arrives with the stream's
        headers, before the connection could go back to the pool)."""
        return engines.closes_after_stream(headers.get("Server", ""))

    @staticmethod
    def reply_text(parts: list[str]) -> str:
        """The reply's text from the parts :attr:`StreamState.reply` collected (each event's new text)."""
        return "".join(parts)

    def on_event(self, state: StreamState, data: bytes, text_out: list | None = None) -> int:
        """Digest one SSE event's data; return the tokens it carried.

        0 for events that carry no token (role, finish, usage, [DONE]);
        ``UNKNOWN`` for an event with text but no server count. When
        ``text_out`` is given, the event's new text is appended to it (for
        tokenizer-based counting after the request, off the hot path).
        """
        raise NotImplementedError


def event_object(state: StreamState, data: bytes) -> dict | None:
    """The event's JSON object, or None for events that end here: [DONE], non-objects, errors.

    An error event (``data: {"error": ...}``, HTTP 200) is how SGLang and vLLM
    report a failure after the stream started; it fails the request.
    """
    if data == b"[DONE]":
        state.done = True
        return None
    obj = orjson.loads(data)
    if not isinstance(obj, dict):
        state.fail("bad_event", f"event is not a JSON object: {data[:80]!r}")
        return None
    err = obj.get("error")
    if err is not None:
        msg = err.get("message", err) if isinstance(err, dict) else err
        state.fail("server_error", str(msg))
        return None
    return obj


def spec_fields(state: StreamState, info: dict) -> None:
    """Acceptance facts from SGLang's meta_info or sglext.spec_tokens_details.

    Accepts every name SGLang has used across versions (protocol notes §1.5).
    """
    verify = info.get("spec_verify_ct")
    if verify:
        state.verify_ct = int(verify)
    length = info.get("spec_accept_length")
    if length:
        state.accept_length = float(length)
    for key in ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num"):
        if info.get(key) is not None:
            state.accepted_drafts = int(info[key])
            break
    for key in ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num"):
        if info.get(key) is not None:
            state.proposed_drafts = int(info[key])
            break

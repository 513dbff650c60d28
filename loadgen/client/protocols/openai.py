"""What the OpenAI completions and chat streams share (protocol notes §2).

Per-chunk token counts come from ``continuous_usage_stats`` (cumulative usage on
every content event, SGLang and vLLM). A server that sends usage only at the end
(llama.cpp, TGI, older servers) makes content events return ``UNKNOWN``; the
client reconciles them with the final usage after the stream (tokencount.py).
Usage is trusted per chunk only while every text-carrying chunk so far had it:
usage that first shows up on a finish chunk is a total, not a delta.
"""

from __future__ import annotations

from loadgen.client.protocols.base import UNKNOWN, Protocol, StreamState, event_object, spec_fields
from loadgen.request import GenRequest


class OpenAIStream(Protocol):
    """Shared parsing; subclasses say where the text is and build the body."""

    def __init__(self, model: str = "default", spec_details: bool = False) -> None:
        super().__init__(model)
        self.spec_details = spec_details
        """Ask SGLang for the sglext.spec_tokens_details event (SGLang-only field)."""

    def _common_body(self, req: GenRequest) -> dict:
        body = {
            "model": self.model,
            "max_tokens": req.max_tokens,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        if req.ignore_eos:
            body["ignore_eos"] = True
        if req.seed is not None:
            body["seed"] = req.seed
        if self.spec_details:
            body["return_spec_tokens_details"] = True
        body.update(req.extra)
        return body

    @staticmethod
    def _choice_text(state: StreamState, choice: dict) -> str:
        raise NotImplementedError

    def on_event(self, state: StreamState, data: bytes, text_out: list | None = None) -> int:
        obj = event_object(state, data)
        if obj is None:
            return 0
        if state.server_id is None and (sid := obj.get("id")) is not None:
            state.server_id = str(sid)
        usage = obj.get("usage")
        sglext = obj.get("sglext")
        if sglext:
            details = sglext.get("spec_tokens_details")
            if isinstance(details, list):
                details = details[0] if details else None
            if isinstance(details, dict):
                spec_fields(state, details)
        timings = obj.get("timings")
        if timings:
            state.extra["timings"] = timings
            _llama_draft_fields(state, timings)
        choices = obj.get("choices")
        if not choices:
            if usage:
                _final_usage(state, usage)
            return 0
        choice = choices[0]
        text = self._choice_text(state, choice)
        finish = choice.get("finish_reason")
        if finish is not None:
            state.finish_reason = str(finish)
            if finish == "abort":
                state.fail("server_abort", "server aborted the request")
        continuous = state.extra.get("continuous", True)
        ct = usage.get("completion_tokens") if usage else None
        if ct is not None and continuous:
            ct = int(ct)
            tokens = ct - state.completion_tokens
            state.completion_tokens = ct
            if (prompt := usage.get("prompt_tokens")) is not None:
                state.prompt_tokens = int(prompt)
            if finish is not None:
                state.final_completion_tokens = ct
                _reasoning_usage(state, usage)
                _cached_usage(state, usage)
        else:
            if text:
                state.extra["continuous"] = False
                tokens = UNKNOWN
            else:
                tokens = 0
            if usage:
                _final_usage(state, usage)
        if text_out is not None and tokens == UNKNOWN:
            text_out.append(text)
        if state.reply is not None and text and not state.thinking:
            # a session's next prompt carries the answer, not the thought (as chat clients send history back)
            delta = choice.get("delta")
            state.reply.append((delta.get("content") or "") if delta is not None else text)
        return tokens


def _final_usage(state: StreamState, usage: dict) -> None:
    if usage.get("completion_tokens") is not None:
        state.final_completion_tokens = int(usage["completion_tokens"])
    if usage.get("prompt_tokens") is not None:
        state.prompt_tokens = int(usage["prompt_tokens"])
    _reasoning_usage(state, usage)
    _cached_usage(state, usage)


def _cached_usage(state: StreamState, usage: dict) -> None:
    # OpenAI's prompt_tokens_details.cached_tokens (vLLM; SGLang with --enable-cache-report); llama.cpp's own
    # count is its timings' cache_n (read with the timings)
    details = usage.get("prompt_tokens_details")
    n = details.get("cached_tokens") if isinstance(details, dict) else None
    if isinstance(n, int):
        state.cached_tokens = n


def _reasoning_usage(state: StreamState, usage: dict) -> None:
    # OpenAI's completion_tokens_details.reasoning_tokens; SGLang puts its own count at the top of usage
    details = usage.get("completion_tokens_details")
    n = details.get("reasoning_tokens") if isinstance(details, dict) else None
    if n is None:
        n = usage.get("reasoning_tokens")
    if isinstance(n, int):
        state.server_reasoning_tokens = n


def _llama_draft_fields(state: StreamState, timings: dict) -> None:
    # llama.cpp reports drafts per request in `timings` (draft_n proposed, draft_n_accepted), and the prompt
    # tokens its slot reused from the cache (cache_n; prompt_n is what it computed).
    if isinstance(cached := timings.get("cache_n"), int) and state.cached_tokens is None:
        state.cached_tokens = cached
    if timings.get("draft_n") is not None:
        state.proposed_drafts = int(timings["draft_n"])
        state.accepted_drafts = int(timings.get("draft_n_accepted") or 0)


class Completions(OpenAIStream):
    name = "completions"
    path = "/v1/completions"

    def build(self, req: GenRequest, rid: str) -> dict:
        body = self._common_body(req)
        body["prompt"] = req.as_prompt()
        return body

    @staticmethod
    def _choice_text(state: StreamState, choice: dict) -> str:
        return choice.get("text") or ""


class Chat(OpenAIStream):
    name = "chat"
    path = "/v1/chat/completions"

    def build(self, req: GenRequest, rid: str) -> dict:
        body = self._common_body(req)
        body["messages"] = req.as_messages()
        return body

    @staticmethod
    def _choice_text(state: StreamState, choice: dict) -> str:
        # Reasoning deltas (SGLang, llama.cpp and older vLLM: reasoning_content; vLLM now: reasoning) are
        # completion tokens too, counted in usage like the answer's; the state notes where the kind changes.
        # An answer event pays one flag test beyond reading its text.
        delta = choice.get("delta")
        if not delta:
            return ""
        text = delta.get("content")
        if text:
            if state.thinking:
                # the answer starts; this event may end the thought too (one step across </think>)
                state.switch()
                return (delta.get("reasoning_content") or delta.get("reasoning") or "") + text
            return text
        thought = delta.get("reasoning_content") or delta.get("reasoning")
        if thought and not state.thinking:
            state.switch()
        return thought or ""

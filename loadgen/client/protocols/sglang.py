"""SGLang's native ``POST /generate`` (protocol notes §1).

Tokens per event = Δ ``meta_info.completion_tokens``, which is cumulative in both
the default (cumulative text) and ``--incremental-streaming-output`` modes, so
neither mode needs the text to be diffed.
"""

from __future__ import annotations

from loadgen.client.protocols.base import UNKNOWN, Protocol, StreamState, event_object, spec_fields
from loadgen.request import GenRequest


class SGLangGenerate(Protocol):
    name = "sglang"
    path = "/generate"

    def build(self, req: GenRequest, rid: str) -> dict:
        params = {
            "max_new_tokens": req.max_tokens,
            "temperature": req.temperature,
            "top_p": req.top_p,
        }
        if req.ignore_eos:
            params["ignore_eos"] = True
        if req.seed is not None:
            params["sampling_seed"] = req.seed
        params.update(req.extra)
        return {"text": req.as_prompt(), "sampling_params": params, "stream": True, "rid": rid}

    @staticmethod
    def reply_text(parts: list[str]) -> str:
        # /generate streams the whole text so far in each event by default, each event's new text with
        # --incremental-streaming-output: cumulative when every event's text starts with the one before and the
        # text grew. An event may add no text (the finishing one carries only the EOS token): demanding growth
        # at every event read such a stream as incremental and joined its cumulative texts, a 178-token reply
        # sent back as ~16,000 tokens
        if not parts:
            return ""
        cumulative = all(b.startswith(a) for a, b in zip(parts, parts[1:])) and (
            len(parts) == 1 or len(parts[-1]) > len(parts[0]))
        return parts[-1] if cumulative else "".join(parts)

    def on_event(self, state: StreamState, data: bytes, text_out: list | None = None) -> int:
        obj = event_object(state, data)
        if obj is None:
            return 0
        meta = obj.get("meta_info") or {}
        if state.server_id is None and (sid := meta.get("id")) is not None:
            state.server_id = str(sid)
        if (prompt := meta.get("prompt_tokens")) is not None:
            state.prompt_tokens = int(prompt)
        ct = meta.get("completion_tokens")
        if ct is not None:
            ct = int(ct)
            tokens = ct - state.completion_tokens
            state.completion_tokens = ct
        else:
            tokens = UNKNOWN if (obj.get("text") or obj.get("output_ids")) else 0
        if state.reply is not None and (text := obj.get("text")):
            state.reply.append(text)
        finish = meta.get("finish_reason")
        if finish is not None:
            kind = finish.get("type") if isinstance(finish, dict) else str(finish)
            state.finish_reason = kind
            if ct is not None:
                state.final_completion_tokens = ct
            if isinstance(reasoning := meta.get("reasoning_tokens"), int):
                state.server_reasoning_tokens = reasoning  # its text does not mark them: counted apart nowhere
            if isinstance(cached := meta.get("cached_tokens"), int):
                state.cached_tokens = cached
            if kind == "abort":
                status = finish.get("status_code") if isinstance(finish, dict) else None
                message = finish.get("message", "aborted") if isinstance(finish, dict) else "aborted"
                state.fail("server_abort", f"{message} (status {status})" if status else message)
            spec_fields(state, meta)
        return tokens

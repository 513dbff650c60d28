"""Wire protocols, one adapter per server API, chosen by name."""

from __future__ import annotations

from loadgen.errors import LoadgenError
from loadgen.client.protocols.base import UNKNOWN, Protocol, StreamState
from loadgen.client.protocols.openai import Chat, Completions
from loadgen.client.protocols.sglang import SGLangGenerate

PROTOCOLS: dict[str, type[Protocol]] = {
    "sglang": SGLangGenerate,
    "completions": Completions,
    "chat": Chat,
}
DEFAULT_PROTOCOL = "sglang"
"""A target's protocol when none is named: the embedded simulator's and SGLang's native ``/generate``."""


def get_protocol(name: str, model: str = "default", spec_details: bool = False) -> Protocol:
    try:
        cls = PROTOCOLS[name]
    except KeyError:
        raise LoadgenError(f"unknown protocol {name!r}; known: {', '.join(PROTOCOLS)}") from None
    if cls is SGLangGenerate:
        return cls(model)
    return cls(model, spec_details=spec_details)


__all__ = ["DEFAULT_PROTOCOL", "UNKNOWN", "Protocol", "StreamState", "PROTOCOLS", "get_protocol"]

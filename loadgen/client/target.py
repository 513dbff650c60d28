"""A server under test: where it is and which protocol it speaks."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlparse

from loadgen import redact
from loadgen.errors import LoadgenError
from loadgen.client.protocols import DEFAULT_PROTOCOL, PROTOCOLS, Protocol, get_protocol


@dataclass
class Target:
    label: str
    url: str
    protocol: str = DEFAULT_PROTOCOL
    model: str = "default"
    headers: dict = field(default_factory=dict)
    spec_details: bool = False
    """Ask for SGLang's sglext.spec_tokens_details on OpenAI routes (SGLang-only field)."""

    def __post_init__(self) -> None:
        # sent as given, written masked (loadgen/redact.py): header values and a URL's password
        redact.remember_headers(self.headers)
        redact.remember_url(self.url)
        parsed = urlparse(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise LoadgenError(f"target {self.label!r}: url {redact.url(self.url)!r} is not an http(s) URL")
        if self.protocol not in PROTOCOLS:
            raise LoadgenError(
                f"target {self.label!r}: unknown protocol {self.protocol!r}; known: {', '.join(PROTOCOLS)}"
            )
        self.url = self.url.rstrip("/")

    def make_protocol(self) -> Protocol:
        return get_protocol(self.protocol, self.model, self.spec_details)

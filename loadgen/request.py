"""What a workload hands to the client: one generation request, engine-neutral.

Protocol adapters (loadgen/protocols/) turn it into an SGLang /generate body or an
OpenAI completions/chat body; nothing here knows about wire formats.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Turn:
    """Where a request sits in a multi-turn session (loadgen/workloads/sessions.py)."""

    session: int
    """The session's number, unique among this process's sessions of the stage (from 1)."""
    index: int
    """The turn, from 1."""
    of: int
    """The turns the session was planned to have (``--turns``)."""

    @property
    def last(self) -> bool:
        return self.index >= self.of


@dataclass(frozen=True)
class GenRequest:
    """One request, produced deterministically by a workload from a seed."""

    workload: str
    """Label of the workload that produced it; every record carries it."""
    max_tokens: int
    prompt: str | None = None
    """Completion-style prompt. Exactly one of ``prompt`` / ``messages`` is set."""
    messages: tuple[dict, ...] | None = None
    """Chat messages, ``({"role": ..., "content": ...}, ...)``."""
    temperature: float = 0.0
    top_p: float = 1.0
    ignore_eos: bool = False
    seed: int | None = None
    """Sampling seed sent to servers that accept one."""
    extra: dict = field(default_factory=dict)
    """Extra sampling parameters passed through to the server verbatim."""
    phase: int = 0
    """Index of the phase of a phase-shifting workload it was drawn in (0 for any other workload)."""
    turn: Turn | None = None
    """Its place in a multi-turn session; None outside one."""

    @property
    def wants_reply(self) -> bool:
        """A session's turn before its last: the client keeps its reply's text, which goes into the next prompt."""
        return self.turn is not None and not self.turn.last

    def as_prompt(self) -> str:
        """The request as one prompt string, for routes that take no messages."""
        if self.prompt is not None:
            return self.prompt
        parts = [f"{m['role'].capitalize()}: {m['content']}" for m in self.messages or ()]
        return "\n".join(parts) + "\nAssistant:"

    def as_messages(self) -> list[dict]:
        """The request as chat messages, for the chat route."""
        if self.messages is not None:
            return [dict(m) for m in self.messages]
        return [{"role": "user", "content": self.prompt or ""}]

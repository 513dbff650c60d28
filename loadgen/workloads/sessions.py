"""Multi-turn sessions: conversations whose later turns carry the model's real earlier replies.

In: a :class:`SessionSpec` (turns, think time, shared system prefix), a workload's seeded requests and, after
each turn, the reply the server streamed. Out: each turn's :class:`GenRequest`, tagged with its
:class:`~loadgen.request.Turn`: turn 1 is the workload's request (chat messages; a completion-style one becomes
one user message, ``as_messages``), turn k+1 is the history so far, the reply of turn k as an assistant
message, and the next user message.

A session draws all its turns' requests from the stream at once, when it starts (session n of a process takes
the stream's requests n·T … n·T+T−1): the user messages, their max tokens and sampling come from the workload's
seeded stream, so every target gets the same user turns in the same order; only the replies are each server's
own. Turn k+1's user message is the last message of the session's k+1-th request. A session keeps the
workload label of its first request (in a mix, later turns may come from other workloads' requests).

The shared prefix (``--shared-prefix N``) is a system message of N tokens by loadgen's own token rule
(loadgen/workloads/tokens.py: N space-separated words), the same text for every session of a stage and every
target, put before each session's first message; with ``--prefix-ratio R`` only that share of the sessions
carry it (session n does when ⌊(n+1)·R⌋ > ⌊n·R⌋, an even spread) and the others a text of their own of the
same length, so the prompt lengths stay the same and only what a server can cache moves.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Iterator

from loadgen.errors import LoadgenError
from loadgen.request import GenRequest, Turn

_WORDS = ("system", "policy", "answer", "always", "briefly", "user", "context", "question", "reply", "follow",
          "rules", "assistant", "helpful", "format", "careful", "details", "steps", "explain", "clear", "tone",
          "facts", "check", "source", "example", "summary", "request", "task", "output", "list", "table")
SHARED_KEY = 0
"""The key of the shared prefix's text; a session of its own under --prefix-ratio has key n + 1."""


@dataclass(frozen=True)
class SessionSpec:
    """How a stage's users hold conversations; ``SessionSpec()`` is one turn and no prefix: plain requests."""

    turns: int = 1
    think_s: float = 0.0
    """Seconds between a reply's end and the next turn's send (a user reading it)."""
    shared_prefix: int = 0
    """Tokens of the system prompt every session shares (0: none)."""
    prefix_ratio: float = 1.0
    """The share of sessions whose system prompt is the shared one; the others get one of their own."""

    def __post_init__(self) -> None:
        if self.turns < 1:
            raise LoadgenError(f"--turns: a session needs at least one turn, got {self.turns}")
        if not (self.think_s >= 0 and math.isfinite(self.think_s)):
            raise LoadgenError(f"--think-time: must be a duration >= 0, got {self.think_s!r}")
        if self.shared_prefix < 0:
            raise LoadgenError(f"--shared-prefix: must be >= 0 tokens, got {self.shared_prefix}")
        if not 0.0 <= self.prefix_ratio <= 1.0:
            raise LoadgenError(f"--prefix-ratio: must lie in [0, 1], got {self.prefix_ratio:g}")
        if self.prefix_ratio < 1.0 and not self.shared_prefix:
            raise LoadgenError("--prefix-ratio needs --shared-prefix (the share of sessions that carry it)")

    @property
    def active(self) -> bool:
        """Whether requests go through sessions at all (more than one turn, or a prefix to put first)."""
        return self.turns > 1 or self.shared_prefix > 0

    @property
    def multi_turn(self) -> bool:
        return self.turns > 1

    def to_dict(self) -> dict:
        return {"turns": self.turns, "think_s": self.think_s, "shared_prefix": self.shared_prefix,
                "prefix_ratio": self.prefix_ratio}

    def shares_prefix(self, n: int) -> bool:
        """Whether session ``n`` (from 0) carries the shared prefix (an even spread of ``prefix_ratio``)."""
        r = self.prefix_ratio
        return math.floor((n + 1) * r + 1e-9) > math.floor(n * r + 1e-9)


def prefix_text(tokens: int, key: int = SHARED_KEY) -> str:
    """``tokens`` words drawn from ``key``: exactly that many tokens by loadgen's token rule, the same text for
    the same key in every process."""
    rng = random.Random(f"loadgen-prefix-{key}")
    return " ".join(rng.choice(_WORDS) for _ in range(tokens))


def user_message(req: GenRequest) -> str:
    """The user message a request brings to a later turn: its last message (a completion prompt: all of it)."""
    messages = req.as_messages()
    return str(messages[-1].get("content") or "") if messages else ""


class Conversation:
    """One session: its turns' requests, drawn when it started, and the history so far."""

    def __init__(self, spec: SessionSpec, number: int, requests: list[GenRequest], prefix: str | None) -> None:
        self.spec, self.number, self.requests = spec, number, requests
        first = requests[0]
        head = [{"role": "system", "content": prefix}] if prefix is not None else []
        self.history: list[dict] = head + first.as_messages()
        self.workload = first.workload
        self.index = 1

    def _tagged(self, req: GenRequest) -> GenRequest:
        turn = Turn(self.number, self.index, self.spec.turns) if self.spec.multi_turn else None
        return replace(req, workload=self.workload, prompt=None, messages=tuple(dict(m) for m in self.history),
                       turn=turn)

    def first(self) -> GenRequest:
        return self._tagged(self.requests[0])

    def after(self, ok: bool, reply: str | None) -> GenRequest | None:
        """The next turn's request, given how this one went; None when the session is over (its last turn
        done, or this one failed: the history the server was to extend is gone with it)."""
        if not ok or self.index >= self.spec.turns:
            return None
        nxt = self.requests[self.index]
        self.index += 1
        self.history.append({"role": "assistant", "content": reply or ""})
        self.history.append({"role": "user", "content": user_message(nxt)})
        return self._tagged(nxt)


class SessionSource:
    """Starts this process's sessions from one request stream, numbered in the order they start."""

    def __init__(self, spec: SessionSpec, requests: Iterator[GenRequest]) -> None:
        self.spec, self.requests = spec, requests
        self.started = 0
        self._shared = prefix_text(spec.shared_prefix) if spec.shared_prefix else None

    def start(self) -> Conversation:
        n = self.started
        self.started += 1
        drawn = [next(self.requests) for _ in range(self.spec.turns)]
        return Conversation(self.spec, n + 1, drawn, self._prefix(n))

    def _prefix(self, n: int) -> str | None:
        if self._shared is None:
            return None
        return self._shared if self.spec.shares_prefix(n) else prefix_text(self.spec.shared_prefix, n + 1)

    def single_turns(self) -> Iterator[GenRequest]:
        """One-turn sessions as a plain stream (an open loop with a shared prefix): each request prefixed."""
        while True:
            yield self.start().first()

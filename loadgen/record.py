"""The per-request record: everything measured about one streamed request.

Times are ``time.perf_counter_ns()`` values (CLOCK_MONOTONIC on Linux, so they
are comparable across processes on one machine, e.g. with the simulator's truth).
A record lives only while its request is in flight and until its stage folds it
into histograms; nothing keeps records for the length of a run.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from loadgen.request import Turn

CANCELLED = "cancelled"
"""The error class of a request the runner cancelled (the stage's end, a cut, Ctrl-C): the server did not fail
it, so a stage counts it apart from its failures."""


@dataclass(slots=True)
class RequestRecord:
    target: str
    workload: str
    rid: str
    start_ns: int
    """Just before the request was handed to the HTTP client (decides a closed-loop stage's window)."""
    planned_ns: int = 0
    """Open loop: when the arrival schedule said to send it (decides the window it belongs to); 0 in a
    closed loop."""
    sent_ns: int = 0
    """When its last byte was written to the socket: TTFT and E2E start here."""
    chunk_ns: array = field(default_factory=lambda: array("q"))
    """Arrival time of every chunk that carried at least one token (the first is TTFT's)."""
    chunk_tokens: array = field(default_factory=lambda: array("l"))
    """Tokens carried by each of those chunks, aligned with ``chunk_ns``."""
    end_ns: int = 0
    """End of the response stream (after the last event, or the failure)."""
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    """The server's own count (usage / meta_info); None if it sent none."""
    finish_reason: str | None = None
    error_class: str | None = None
    error_message: str | None = None
    accept_length: float | None = None
    """Server-reported mean tokens per verify step (speculative servers only)."""
    verify_ct: int | None = None
    accepted_drafts: int | None = None
    proposed_drafts: int | None = None
    token_counts_exact: bool = True
    """False when per-chunk token counts had to be estimated (see docs/metrics.md)."""
    server_id: str | None = None
    retries: int = 0
    """Sends repeated because a pooled connection was found closed before the request got out."""
    coalesced_reads: int = 0
    """Reads that found bytes from more than one socket receive: a sign of client lag."""
    reasoning_spans: tuple[tuple[int, int], ...] = ()
    """Half-open ranges of chunk indices whose chunks carried reasoning (thinking) deltas, in order; empty for
    a stream without any. A chunk that carried both reasoning and answer text is the answer's (it brought the
    first output token)."""
    reasoning_tokens: int = 0
    """Tokens of the chunks in ``reasoning_spans`` (counted like every chunk's)."""
    server_reasoning_tokens: int | None = None
    """The server's own count of reasoning tokens (usage ``completion_tokens_details.reasoning_tokens``,
    SGLang's ``reasoning_tokens``); None if it sent none."""
    cached_tokens: int | None = None
    """Prompt tokens the server served from its prefix cache (usage ``prompt_tokens_details.cached_tokens``,
    SGLang's ``cached_tokens``, llama.cpp's ``timings.cache_n``); None if it sent none."""
    phase: int = 0
    """The request's phase in a phase-shifting workload (``GenRequest.phase``); 0 for any other workload."""
    turn: Turn | None = None
    """Its session and turn (``GenRequest.turn``); None outside a multi-turn session."""
    reply: str | None = None
    """The answer's streamed text (reasoning left out), kept only for a request that asked for it
    (``GenRequest.wants_reply``: a session's turn whose reply goes into the next prompt); None otherwise."""

    @property
    def session(self) -> int | None:
        return self.turn.session if self.turn is not None else None

    @property
    def ok(self) -> bool:
        return self.error_class is None

    @property
    def first_token_ns(self) -> int | None:
        return self.chunk_ns[0] if self.chunk_ns else None

    @property
    def t0_ns(self) -> int:
        return self.sent_ns or self.start_ns

    @property
    def admit_ns(self) -> int:
        """The instant that decides the stage window a request belongs to: its planned send in an open
        loop (a late send must not move it out of the window the schedule put it in), else its start."""
        return self.planned_ns or self.start_ns

    @property
    def user_t0_ns(self) -> int:
        """Where a user's wait starts: the planned send in an open loop (a late client's delay is the
        user's too), else the send itself. SLOs are checked from here."""
        return self.planned_ns or self.t0_ns

    @property
    def ttft_ns(self) -> int | None:
        return self.chunk_ns[0] - self.t0_ns if self.chunk_ns else None

    @property
    def tokens_received(self) -> int:
        return sum(self.chunk_tokens)

    @property
    def first_output_index(self) -> int | None:
        """Index of the first chunk that carried output (answer) tokens, not reasoning; None if none did."""
        i = 0
        for lo, hi in self.reasoning_spans:
            if lo > i:
                break
            i = max(i, hi)
        return i if i < len(self.chunk_ns) else None

    @property
    def ttfo_ns(self) -> int | None:
        """Time to first output token: the send to the first chunk of answer tokens (TTFT without reasoning)."""
        i = self.first_output_index
        return None if i is None else self.chunk_ns[i] - self.t0_ns

    def fail(self, error_class: str, message: str) -> None:
        # Keep the first failure: later ones are usually consequences of it.
        if self.error_class is None:
            self.error_class = error_class
            self.error_message = message[:500]

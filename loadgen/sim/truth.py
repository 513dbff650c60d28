"""Ground truth per request: what the simulator really did, for checking a client's figures.

In: the server's and scheduler's stamps. Out: :class:`TruthStore` (finished requests' :class:`TruthRecord`,
``/loadgen/truth``) and :class:`SwitchLog` (every change of an adaptive mode's speculation state,
``/loadgen/truth?switches=1``).

All times are ``time.perf_counter_ns()`` (CLOCK_MONOTONIC on Linux), the clock a
client process on the same machine reads, so the two can be subtracted directly.
"""

from __future__ import annotations

from array import array
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import orjson


@dataclass(slots=True)
class TruthRecord:
    rid: str
    route: str
    stream: bool
    mode: str
    received_ns: int
    prompt_tokens: int
    prompt_kind: str
    """Predictability class the prompt was given (acceptance.py)."""
    accept_p: float
    admitted_ns: int = 0
    """When the scheduler took it into the running batch (its prefill began)."""
    first_token_ns: int = 0
    """When the first event carrying a token was written to the socket."""
    finished_ns: int = 0
    events: array = field(default_factory=lambda: array("q"))
    """emit_ns, n_tokens, emit_ns, n_tokens, ... per event written (coalesced steps are one event).
    Flat int64 arrays: a 200-token request's truth stays a few kB, not tens."""
    steps: array = field(default_factory=lambda: array("q"))
    """step_end_ns, n_tokens, ... per scheduler forward that gave this request tokens."""
    completion_tokens: int = 0
    verify_ct: int = 0
    accepted_drafts: int = 0
    proposed_drafts: int = 0
    finish_reason: str = ""
    """stop, length or abort (``error``, ``hang`` for a fault answered before any stream, see ``fault``)."""
    fault: str = ""
    """The fault injected into this request (``loadgen sim --faults``, loadgen.sim.faults), or ''."""
    reasoning_tokens: int = 0
    """Tokens a chat stream sent as reasoning text (``--reasoning-tokens``; in an event carrying both, its
    reasoning part)."""
    first_content_ns: int = 0
    """When the first event carrying answer text was written, with ``--reasoning-tokens`` (0 otherwise)."""
    cached_tokens: int = 0
    """Prompt tokens the prefix cache held when the scheduler admitted it (``--prefix-cache``; 0 without)."""

    def as_dict(self) -> dict:
        return {
            "rid": self.rid,
            "route": self.route,
            "stream": self.stream,
            "mode": self.mode,
            "received_ns": self.received_ns,
            "admitted_ns": self.admitted_ns,
            "first_token_ns": self.first_token_ns,
            "finished_ns": self.finished_ns,
            "events": _pairs(self.events),
            "steps": _pairs(self.steps),
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens,
            "verify_ct": self.verify_ct,
            "accepted_drafts": self.accepted_drafts,
            "proposed_drafts": self.proposed_drafts,
            "accept_length": (self.completion_tokens / self.verify_ct) if self.verify_ct else None,
            "prompt_kind": self.prompt_kind,
            "accept_p": self.accept_p,
            "finish_reason": self.finish_reason,
            "fault": self.fault,
            "reasoning_tokens": self.reasoning_tokens,
            "first_content_ns": self.first_content_ns,
        }


def _pairs(flat: array) -> list[list[int]]:
    return [[flat[i], flat[i + 1]] for i in range(0, len(flat), 2)]


@dataclass
class TruthStore:
    """Finished requests' truth: the newest ``limit`` in memory, every one in the optional JSONL file."""

    limit: int = 20_000
    path: Path | None = None
    _records: deque = field(default_factory=deque)
    _file: IO[bytes] | None = None

    def __post_init__(self) -> None:
        self._records = deque(maxlen=self.limit)
        if self.path is not None:
            self._file = open(self.path, "ab")

    def add(self, rec: TruthRecord) -> None:
        self._records.append(rec)
        if self._file is not None:
            self._file.write(orjson.dumps(rec.as_dict()) + b"\n")
            self._file.flush()  # a killed simulator still leaves whole lines

    def query(self, rid: str | None = None, clear: bool = False) -> list[dict]:
        recs = [r for r in self._records if rid is None or r.rid == rid]
        if clear:
            self._records.clear()
        return [r.as_dict() for r in recs]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


@dataclass(frozen=True, slots=True)
class SpecSwitch:
    """One change of an adaptive mode's speculation state: the end of the first forward run in the new state."""

    t_ns: int
    on: bool
    """The new state: True when speculation came back on."""
    batch: int
    """The running batch of that forward."""

    def as_list(self) -> list:
        return [self.t_ns, self.on, self.batch]


@dataclass
class SwitchLog:
    """The newest ``limit`` speculation switches in memory, and how many there were in all."""

    limit: int = 10_000
    total: int = 0
    _switches: deque = field(default_factory=deque)

    def __post_init__(self) -> None:
        self._switches = deque(maxlen=self.limit)

    def add(self, switch: SpecSwitch) -> None:
        self._switches.append(switch)
        self.total += 1

    def between(self, lo_ns: int = 0, hi_ns: int | None = None) -> list[SpecSwitch]:
        """The kept switches with ``lo_ns <= t_ns < hi_ns`` (``hi_ns`` None: to the newest)."""
        return [s for s in self._switches if s.t_ns >= lo_ns and (hi_ns is None or s.t_ns < hi_ns)]

    def complete_since(self, lo_ns: int) -> bool:
        """Whether every switch at or after ``lo_ns`` is still kept (none dropped, or the oldest kept is older)."""
        return self.total == len(self._switches) or self._switches[0].t_ns < lo_ns

    def query(self, lo_ns: int = 0, hi_ns: int | None = None) -> dict:
        """``/loadgen/truth?switches=1``'s answer: ``switches`` ([t_ns, on, batch] with ``lo_ns <= t_ns < hi_ns``),
        ``total`` (every switch since the start) and ``complete`` (False: some in the range were dropped)."""
        return {"total": self.total, "complete": self.complete_since(lo_ns),
                "switches": [s.as_list() for s in self.between(lo_ns, hi_ns)]}

"""A stage's multi-turn figures: per turn index and per session, from the records of session turns.

In: finished records that carry a :class:`~loadgen.request.Turn` (loadgen/workloads/sessions.py), and whether
each started inside the stage's window. Out: :class:`SessionFigures` — per turn index the window's requests,
completions, failures, TTFT histogram, prompt tokens (the server's count), output tokens and cached prompt
tokens (where the server says); per session (those whose first turn started in the window) how many
completed every turn, ended on a failed turn (by failure class: a context overflow is the server's 400), or
were cut by the stage's end, the turns they completed and the completed ones' duration (first turn's start to
last turn's end, think times included). Merges across processes exactly; ``to_dict``/``from_dict`` for run.json.

A session's turns reach :meth:`SessionFigures.add` in order (a turn is sent when the one before it has
ended and been handed to the fold), so the figures keep only the sessions in progress, at most one a user.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loadgen.histograms import Hist
from loadgen.record import CANCELLED, RequestRecord


def _us_hist() -> Hist:
    return Hist(1.0, "us")


@dataclass
class TurnFigures:
    """The window's requests at one turn index."""

    started: int = 0
    completed: int = 0
    failed: int = 0
    ttft: Hist = field(default_factory=_us_hist)
    prompt_tokens: int = 0
    prompt_counted: int = 0
    """Completed requests whose server reported its prompt tokens (``prompt_tokens`` sums theirs)."""
    output_tokens: int = 0
    cached_tokens: int = 0
    cached_counted: int = 0
    """Completed requests whose server said how many prompt tokens it served from its cache."""
    cached_of: int = 0
    """Those requests' prompt tokens: the cache hit rate is ``cached_tokens / cached_of``."""

    def add(self, rec: RequestRecord) -> None:
        self.started += 1
        if not rec.ok:
            self.failed += rec.error_class != CANCELLED
            return
        self.completed += 1
        if rec.ttft_ns is not None:
            self.ttft.record(rec.ttft_ns // 1000)
        if rec.prompt_tokens is not None:
            self.prompt_tokens += rec.prompt_tokens
            self.prompt_counted += 1
        self.output_tokens += rec.output_tokens or 0
        if rec.cached_tokens is not None:
            self.cached_tokens += rec.cached_tokens
            self.cached_counted += 1
            self.cached_of += rec.prompt_tokens or 0

    def merge(self, other: "TurnFigures") -> None:
        self.ttft.add(other.ttft)
        for attr in ("started", "completed", "failed", "prompt_tokens", "prompt_counted", "output_tokens",
                     "cached_tokens", "cached_counted", "cached_of"):
            setattr(self, attr, getattr(self, attr) + getattr(other, attr))

    def to_dict(self, turn: int) -> dict:
        ttft = self.ttft.summary(1000.0)
        cached = self.cached_tokens / self.cached_of if self.cached_of else None
        return {
            "turn": turn, "started": self.started, "completed": self.completed, "failed": self.failed,
            "ttft_p50_ms": ttft.get("p50"), "ttft_p90_ms": ttft.get("p90"),
            "prompt_tokens_mean": round(self.prompt_tokens / self.prompt_counted, 2) if self.prompt_counted else None,
            "output_tokens_mean": round(self.output_tokens / self.completed, 2) if self.completed else None,
            "cache_hit_rate": None if cached is None else round(cached, 4),
            "sums": {"prompt_tokens": self.prompt_tokens, "prompt_counted": self.prompt_counted,
                     "output_tokens": self.output_tokens, "cached_tokens": self.cached_tokens,
                     "cached_counted": self.cached_counted, "cached_of": self.cached_of},
            "ttft_histogram": self.ttft.encode(),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "TurnFigures":
        sums = d.get("sums", {})
        return cls(d.get("started", 0), d.get("completed", 0), d.get("failed", 0),
                   Hist.decode(d.get("ttft_histogram", "")) if d.get("ttft_histogram") else _us_hist(),
                   sums.get("prompt_tokens", 0), sums.get("prompt_counted", 0), sums.get("output_tokens", 0),
                   sums.get("cached_tokens", 0), sums.get("cached_counted", 0), sums.get("cached_of", 0))


@dataclass
class SessionFigures:
    """Per-turn and per-session figures of one stage's window."""

    turns: list[TurnFigures] = field(default_factory=list)
    """Index 0 is turn 1."""
    planned_turns: int = 0
    started: int = 0
    """Sessions whose first turn started inside the window."""
    completed: int = 0
    """Of those, sessions whose every turn completed."""
    failed: int = 0
    ended_by: dict[str, int] = field(default_factory=dict)
    """Failure class of the turn that ended each failed session (``http_400``: e.g. a context overflow)."""
    cut: int = 0
    """Sessions the stage's end cut before their last turn (their turns so far count)."""
    turns_done: int = 0
    """Turns completed by the window's sessions, all together."""
    duration: Hist = field(default_factory=_us_hist)
    """Completed sessions: first turn's start to last turn's end (think times included)."""
    _open: dict[int, tuple[int, int]] = field(default_factory=dict, repr=False)
    """Session → (first turn's start ns, turns completed) for the window's sessions in progress."""

    def add(self, rec: RequestRecord, started_inside: bool) -> None:
        turn = rec.turn
        self.planned_turns = max(self.planned_turns, turn.of)
        if started_inside:
            while len(self.turns) < turn.index:
                self.turns.append(TurnFigures())
            self.turns[turn.index - 1].add(rec)
        if turn.index == 1 and started_inside:
            self.started += 1
            self._open[turn.session] = (rec.start_ns, 0)
        if turn.session not in self._open:
            return  # a session that began before the window
        start, done = self._open[turn.session]
        if rec.ok:
            done += 1
            if turn.last:
                self._end(turn.session, done)
                self.completed += 1
                self.duration.record((rec.end_ns - start) // 1000)
            else:
                self._open[turn.session] = (start, done)
        elif rec.error_class == CANCELLED:
            self._end(turn.session, done)
            self.cut += 1
        else:
            self._end(turn.session, done)
            self.failed += 1
            self.ended_by[rec.error_class] = self.ended_by.get(rec.error_class, 0) + 1

    def _end(self, session: int, done: int) -> None:
        del self._open[session]
        self.turns_done += done

    def close(self) -> "SessionFigures":
        """The stage is over: sessions still open were cut by its end (their user stopped, between turns or in
        one that the stage did not count)."""
        for session, (_, done) in list(self._open.items()):
            self._end(session, done)
            self.cut += 1
        return self

    def merge(self, other: "SessionFigures") -> None:
        while len(self.turns) < len(other.turns):
            self.turns.append(TurnFigures())
        for mine, theirs in zip(self.turns, other.turns):
            mine.merge(theirs)
        self.planned_turns = max(self.planned_turns, other.planned_turns)
        for attr in ("started", "completed", "failed", "cut", "turns_done"):
            setattr(self, attr, getattr(self, attr) + getattr(other, attr))
        for cls, n in other.ended_by.items():
            self.ended_by[cls] = self.ended_by.get(cls, 0) + n
        self.duration.add(other.duration)

    def to_dict(self) -> dict:
        dur = self.duration.summary(1e6)
        return {
            "planned_turns": self.planned_turns,
            "sessions": {"started": self.started, "completed": self.completed, "failed": self.failed,
                         "ended_by": dict(sorted(self.ended_by.items())), "cut": self.cut,
                         "turns_done": self.turns_done,
                         "turns_per_session": round(self.turns_done / self.started, 3) if self.started else None,
                         "duration_p50_s": dur.get("p50"), "duration_p90_s": dur.get("p90"),
                         "duration_histogram": self.duration.encode()},
            "per_turn": [t.to_dict(i + 1) for i, t in enumerate(self.turns)],
        }

    @classmethod
    def from_dict(cls, d: dict) -> "SessionFigures":
        s = d.get("sessions", {})
        hist = s.get("duration_histogram")
        return cls([TurnFigures.from_dict(t) for t in d.get("per_turn", [])], d.get("planned_turns", 0),
                   s.get("started", 0), s.get("completed", 0), s.get("failed", 0), dict(s.get("ended_by", {})),
                   s.get("cut", 0), s.get("turns_done", 0), Hist.decode(hist) if hist else _us_hist())

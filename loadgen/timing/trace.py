"""Trace replay's timing half: a Mooncake-format JSONL trace in, planned send offsets and lengths out.

In: a path, or the name of a shipped trace (:data:`SHIPPED`, files under ``traces/``). Each line
is one JSON object as Mooncake's FAST'25 release writes it (kvcache-ai/Mooncake,
``FAST25-release/traces/*.jsonl``): ``timestamp`` (arrival in milliseconds since the trace's
start), ``input_length`` and ``output_length`` (tokens), and optional ``hash_ids`` (one id per
block of the prompt, 512 tokens in Mooncake's files; equal ids in two requests mean the same
prefix block, which a server's prefix cache can reuse). Out: a :class:`Trace`: its entries
with times in seconds from the first request, ``times(speed)`` for the open-loop stage, and its
duration and mean rate. The prompts themselves are made in loadgen/workloads/traced.py; this
module reads nothing but the file and knows no tokenizer.

Every defect of the file is one line naming the file and the line (``path:LINE: ...``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from loadgen.errors import LoadgenError

MOONCAKE_BLOCK_TOKENS = 512
"""Tokens per ``hash_ids`` block in Mooncake's published traces (FAST25-release/README.md)."""

TRACES_DIR = Path(__file__).resolve().parent / "traces"


@dataclass(frozen=True)
class Shipped:
    """A trace that ships with loadgen: its file under ``traces/`` and the block size its hash ids use."""

    file: str
    block_tokens: int
    description: str


SHIPPED: dict[str, Shipped] = {
    "mooncake-small": Shipped(
        "mooncake-small.jsonl",
        8,
        "the first 60 s of Mooncake's FAST'25 conversation trace (162 requests), "
        "inputs /64 (block 8, at most 448 tokens), outputs /16 (8..64 tokens)",
    ),
}


@dataclass(frozen=True)
class TraceEntry:
    """One request of a trace."""

    timestamp_s: float
    """Arrival, seconds after the trace's first request."""
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] = ()
    """Prefix block ids, one per ``block_tokens`` of the prompt; empty when the trace has none."""


@dataclass(frozen=True)
class Trace:
    """A whole trace, in file order (which is arrival order)."""

    name: str
    """The shipped name, or the file's stem."""
    path: Path
    entries: tuple[TraceEntry, ...]
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    """Tokens per hash-id block: 512 for Mooncake's own files, the shipped trace's own otherwise."""

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def duration_s(self) -> float:
        """Seconds from the first request to the last, at speed 1."""
        return self.entries[-1].timestamp_s

    @property
    def rate(self) -> float:
        """Mean arrival rate at speed 1, requests/s: one over the mean gap, (n - 1) / duration.

        A one-request trace has no gap (0.0); requests all at one instant, an infinite rate.
        """
        n = len(self.entries)
        if n < 2:
            return 0.0
        return (n - 1) / self.duration_s if self.duration_s > 0 else math.inf

    @property
    def shared_prefix_share(self) -> float:
        """Share of requests whose first hash id appeared in an earlier request (a reusable prefix)."""
        seen: set[int] = set()
        shared = 0
        for e in self.entries:
            if e.hash_ids and e.hash_ids[0] in seen:
                shared += 1
            seen.update(e.hash_ids)
        return shared / len(self.entries)

    def times(self, speed: float = 1.0) -> list[float]:
        """Planned send offsets in seconds from the stage's start: timestamps / ``speed``
        (speed 2 replays the trace twice as fast, so at twice its rate)."""
        check_speed(speed)
        return [e.timestamp_s / speed for e in self.entries]


def check_speed(speed: float) -> float:
    """``speed`` if it is a usable replay speed (finite, > 0); one line naming ``--trace-speed`` otherwise."""
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not (math.isfinite(speed) and speed > 0):
        raise LoadgenError(f"--trace-speed: a replay speed must be a number > 0 (2 = twice as fast), got {speed!r}")
    return float(speed)


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _entry(obj: object, where: str, first_ms: float | None, last_ms: float | None) -> tuple[TraceEntry, float]:
    if not isinstance(obj, dict):
        raise LoadgenError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    for key in ("timestamp", "input_length", "output_length"):
        if key not in obj:
            raise LoadgenError(f"{where}: missing field {key!r} (a Mooncake line has timestamp, input_length, output_length, hash_ids)")
    ts = obj["timestamp"]
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
        raise LoadgenError(f"{where}: timestamp must be a number of milliseconds, got {ts!r}")
    if last_ms is not None and ts < last_ms:
        raise LoadgenError(f"{where}: timestamp {ts!r} ms is before the previous line's {last_ms!r} ms (a trace is in arrival order)")
    lengths = []
    for key in ("input_length", "output_length"):
        n = obj[key]
        if not _int(n) or n < 1:
            raise LoadgenError(f"{where}: {key} must be an integer >= 1 (tokens), got {n!r}")
        lengths.append(n)
    ids = obj.get("hash_ids", [])
    if ids is None:
        ids = []
    if not isinstance(ids, list) or not all(_int(h) for h in ids):
        raise LoadgenError(f"{where}: hash_ids must be a list of integers (prefix block ids), got {json.dumps(ids)[:60]}")
    start = ts if first_ms is None else first_ms
    return TraceEntry((ts - start) / 1000.0, lengths[0], lengths[1], tuple(ids)), ts


def read_trace(path: Path, name: str | None = None, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> Trace:
    """The trace in ``path``; a one-line :class:`LoadgenError` naming file and line for any defect."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LoadgenError(f"trace {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LoadgenError(f"trace {path}: cannot read ({type(exc).__name__}: {' '.join(str(exc).split())})") from None
    entries: list[TraceEntry] = []
    first_ms: float | None = None
    last_ms: float | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue  # blank lines (a trailing newline, a gap) carry no request
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LoadgenError(f"{where}: not JSON ({exc.msg} at column {exc.colno})") from None
        entry, ts = _entry(obj, where, first_ms, last_ms)
        first_ms = ts if first_ms is None else first_ms
        last_ms = ts
        entries.append(entry)
    if not entries:
        raise LoadgenError(f"trace {path}: empty (no request lines)")
    return Trace(name or path.stem, path, tuple(entries), block_tokens)


def load_trace(path_or_name: str | Path) -> Trace:
    """A shipped trace by name (``mooncake-small``), or a Mooncake-format JSONL file by path."""
    spec = str(path_or_name).strip()
    shipped = SHIPPED.get(spec)
    if shipped is not None:
        return read_trace(TRACES_DIR / shipped.file, spec, shipped.block_tokens)
    path = Path(spec)
    if not path.is_file():
        raise LoadgenError(
            f"trace {spec}: no such file (give a Mooncake-format .jsonl path or a shipped trace: {', '.join(SHIPPED)})"
        )
    return read_trace(path)

"""Whether speculation was on or off through a stage's window, read from the stream.

In: the window's chunks (arrival instant, tokens carried), folded into 10 ms buckets: how many chunks
arrived and how many carried two tokens or more. Out: :func:`judge`'s :class:`Switching`: cells of at
least :data:`MIN_CHUNKS` chunks judged on, off or mixed, the switches between on and off, their rate,
and whether the configuration oscillated (a stage note says so, with its evidence).

Why the stream: a server that streams one event per engine step (SGLang, vLLM) sends a request one
token a step when it decodes plainly, and 1 + its accepted drafts when it verifies drafts; so a cell in
which no chunk carried two tokens, where speculation at the window's own acceptance would have given
several, was decoded without drafting. That holds for every engine and is timed by the client's clock;
server counters that move at request end (SGLang's) cannot place a switch in time.

Why 10 ms buckets merged into cells of a few chunks: a decode step is 5-30 ms on a GPU, so a bucket holds
about one step, and a cell holds as few chunks as tell on from off at the window's acceptance (3 at
predictable text's, where 92 % of a speculating step's chunks carry drafts; 20 at freetext's 30 %): at a
batch of 8 a cell is one step, and a naive threshold that changes its mind every step shows as
alternating cells. A switch faster than a cell shows as a lower level or as mixed cells, not as switches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

BUCKET_S = 0.01
MIN_CHUNKS = 32
ALPHA = 1e-3
"""A cell is off when no chunk carried drafts and speculating at the window's level would have made that, in
any of the window's cells, this unlikely (each cell at ALPHA over their number: a steady window of freetext is
never read as switching by chance)."""
MAX_CELL = 64
MIN_LEVEL = 0.05
"""Below this share of multi-token chunks (at the window's speculating level) nothing is said: a plain server
whose client merged two sends now and then (coalesced reads) is not speculating."""
OSCILLATING_SWITCHES = 4
OSCILLATING_PER_S = 1.0
"""Flagged: at least two round trips on→off→on, at one switch a second or faster. A configuration that
changes speculation by load switches when the load moves; in a steady window, or switching faster than a
second, it is thrashing (vLLM #49548)."""


def thrashing(switches: int, window_s: float) -> bool:
    """Whether ``switches`` changes of speculation in a ``window_s`` window are oscillation (OSCILLATING_SWITCHES
    at OSCILLATING_PER_S or faster): the one rule for the stream's count and the simulator's true one."""
    return switches >= OSCILLATING_SWITCHES and window_s > 0 and switches / window_s >= OSCILLATING_PER_S


NOTE_HEAD = "speculation switched on and off"
"""A stage's note from :meth:`Switching.note` starts so: it is derived from the buckets each time a stage is
written, never kept (a merge of two processes' stages would otherwise carry each one's count)."""


@dataclass
class DraftBuckets:
    """Per 10 ms bucket of a window: chunks arrived, and those that carried two tokens or more."""

    chunks: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    multi: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """Tokens the bucket's chunks carried (stage/spectimeline.py: output and tokens per chunk, second by second)."""

    def _fit(self, n: int) -> None:
        if n > len(self.chunks):
            size = max(n, 2 * len(self.chunks))
            grow = [np.concatenate([a, np.zeros(size - len(a), np.int64)]) for a in (self.chunks, self.multi,
                                                                                      self.tokens)]
            self.chunks, self.multi, self.tokens = grow

    def add(self, t_rel_ns: np.ndarray, tokens: np.ndarray) -> None:
        """Fold a request's window chunks (arrival ns since the window opened, tokens each): two bincounts over
        the buckets it spans, no Python per chunk."""
        if not len(t_rel_ns):
            return
        idx = np.asarray(t_rel_ns, np.int64) // int(BUCKET_S * 1e9)
        lo = int(idx.min())
        span = np.bincount(idx - lo)
        many = np.bincount(idx - lo, weights=np.asarray(tokens) > 1, minlength=len(span)).astype(np.int64)
        toks = np.bincount(idx - lo, weights=tokens, minlength=len(span)).astype(np.int64)
        self._fit(lo + len(span))
        self.chunks[lo:lo + len(span)] += span
        self.multi[lo:lo + len(span)] += many
        self.tokens[lo:lo + len(span)] += toks

    def merge(self, other: "DraftBuckets") -> None:
        self._fit(len(other.chunks))
        self.chunks[:len(other.chunks)] += other.chunks
        self.multi[:len(other.multi)] += other.multi
        self.tokens[:len(other.tokens)] += other.tokens

    def _used(self) -> int:
        used = np.nonzero(self.chunks)[0]
        return int(used[-1]) + 1 if len(used) else 0

    def trimmed(self) -> tuple[list[int], list[int]]:
        """The counters up to the last bucket that saw a chunk, as lists (run.json)."""
        n = self._used()
        return self.chunks[:n].tolist(), self.multi[:n].tolist()

    def to_dict(self) -> dict:
        """The buckets as run.json keeps them (``chunks``, ``multi``, ``tokens``), so merges and reloads judge
        again."""
        n = self._used()
        return {"bucket_s": BUCKET_S, "chunks": self.chunks[:n].tolist(), "multi": self.multi[:n].tolist(),
                "tokens": self.tokens[:n].tolist()}

    @classmethod
    def from_dict(cls, d: dict | None) -> "DraftBuckets":
        if not d:
            return cls()
        chunks = np.asarray(d.get("chunks") or [], np.int64)
        # files written before the tokens were kept: none known (the second-by-second output reads 0)
        tokens = np.asarray(d.get("tokens") or [0] * len(chunks), np.int64)
        return cls(chunks, np.asarray(d.get("multi") or [], np.int64), tokens)


@dataclass(frozen=True)
class Switching:
    """What the stream says speculation did over a window."""

    cells: int
    on: int
    off: int
    mixed: int
    """Cells with some drafts but fewer than half the window's level: a switch inside the cell, or a lull."""
    switches: int
    """Changes between on and off, in time order over the cells judged either (mixed cells skipped)."""
    window_s: float
    level: float
    """The speculating level: the 90th percentile over cells of the share of chunks that carried drafts."""
    cell_chunks: int = MIN_CHUNKS
    """The chunks a cell holds at least (:func:`cell_size`)."""

    @property
    def per_s(self) -> float:
        return self.switches / self.window_s if self.window_s > 0 else 0.0

    @property
    def oscillating(self) -> bool:
        return thrashing(self.switches, self.window_s)

    def note(self) -> str:
        judged = self.on + self.off
        off = 100 * self.off / judged if judged else 0.0
        return (f"{NOTE_HEAD} {self.switches} times in the {self.window_s:.3g} s window "
                f"({self.per_s:.2g} a second; off in {off:.0f} % of {judged} cells of {self.cell_chunks}+ chunks, "
                f"{self.mixed} mixed): a threshold that thrashes")

    def to_dict(self) -> dict:
        return {"cells": self.cells, "on": self.on, "off": self.off, "mixed": self.mixed, "switches": self.switches,
                "per_s": round(self.per_s, 4), "level": round(self.level, 4), "cell_chunks": self.cell_chunks,
                "oscillating": self.oscillating}


def _cells(b: DraftBuckets, size: int) -> list[tuple[int, int]]:
    """(chunks, multi) of consecutive buckets merged until each holds ``size`` chunks (a short tail dropped)."""
    out, c, m = [], 0, 0
    for n, k in zip(*b.trimmed()):
        c, m = c + n, m + k
        if c >= size:
            out.append((c, m))
            c, m = 0, 0
    return out


def cell_alpha(chunks: int) -> float:
    """Each cell's share of ALPHA: over as many cells as the window's chunks could make (4 a cell)."""
    return ALPHA / max(1, chunks // 4)


def cell_size(level: float, alpha: float) -> int:
    """The fewest chunks in which speculating at ``level`` leaves none with drafts less often than ``alpha``:
    for a window of 100,000 chunks 7 at predictable text's 0.92, 48 at freetext's 0.3; 4 to MAX_CELL."""
    if level >= 1.0:
        return 4
    return max(4, min(MAX_CELL, math.ceil(math.log(alpha) / math.log(1.0 - level))))


def active_s(b: DraftBuckets, gap_s: float = 0.5) -> float:
    """The seconds a workload's chunks span, gaps of ``gap_s`` or more left out: a phase's share of its window
    (a decode step is never half a second, so a shorter gap is between steps, not between phases)."""
    used = np.nonzero(b.chunks)[0]
    if not len(used):
        return 0.0
    gaps = np.diff(used)
    buckets = 1 + int(gaps[gaps < gap_s / BUCKET_S].sum()) + int((gaps >= gap_s / BUCKET_S).sum())
    return buckets * BUCKET_S


def judge_phases(parts: list[DraftBuckets], window_s: float) -> Switching | None:
    """A phased window (loadgen/workloads/phases.py): each phase's workload judged on its own chunks, at its own
    level and over the time it ran, and the counts added (the phases take turns, so their switches are apart).
    Judged as one, a fixed server's low-acceptance phase read as "off" against the other's level: fixed spec
    on predictable/freetext phases showed 36 false switches in a 32 s window."""
    each = [(sw, b) for b in parts if (sw := judge(b, active_s(b))) is not None]
    if not each:
        return None
    worst = max(each, key=lambda x: (x[0].switches, x[0].level))[0]  # the same whatever the order of the parts
    return Switching(sum(sw.cells for sw, _ in each), sum(sw.on for sw, _ in each), sum(sw.off for sw, _ in each),
                     sum(sw.mixed for sw, _ in each), sum(sw.switches for sw, _ in each),
                     # each phase's span includes the tail of requests drawn in it: summed, the spans outrun the
                     # window (34 s of a 32 s one), which the note names
                     min(sum(sw.window_s for sw, _ in each), window_s) or window_s, worst.level, worst.cell_chunks)


def judge(b: DraftBuckets, window_s: float) -> Switching | None:
    """The window's switching, or None where no speculation shows (a plain server, or one that never drafted).

    The level is read on cells of MIN_CHUNKS; the window is then judged on cells as small as that level
    allows (:func:`cell_size`), so a switch every step shows where a step holds enough chunks."""
    coarse = _cells(b, MIN_CHUNKS)
    if not coarse:
        return None
    level = float(np.percentile([m / c for c, m in coarse], 90))
    if level < MIN_LEVEL:
        return None
    alpha = cell_alpha(int(b.chunks.sum()))
    size = cell_size(level, alpha)
    cells = _cells(b, size)
    states = []
    for c, m in cells:
        if m == 0 and (1.0 - level) ** c < alpha:
            states.append("off")
        elif m / c >= level / 2:
            states.append("on")
        else:
            states.append("mixed")
    clear = [s for s in states if s != "mixed"]
    switches = sum(1 for a, z in zip(clear, clear[1:]) if a != z)
    return Switching(len(cells), states.count("on"), states.count("off"), states.count("mixed"), switches,
                     window_s, level, size)

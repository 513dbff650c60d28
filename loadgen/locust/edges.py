"""What one load process saw near its window's edges, so the master can count it between its own scrapes.

In (worker side, :class:`EdgeLog`): the stage's window [ws, we) and every finished record (and, at
teardown, those still streaming). Out: a JSON-able dict that travels with the process's part:
the requests that ended near an edge (end instant, tokens, draft counts), the token arrivals near
an edge in 1 ms bins, and sums for the middle of the window, all on the process's
``perf_counter_ns`` clock (CLOCK_MONOTONIC on Linux: one clock for every process of a host).

In (master side, :func:`combine`): every part's dict and the instants of the master's two scrapes
on its own clock. Out: the client's side of the checks (loadgen.serverview.checks: an ``Ended`` over
the two scrapes, the token count bracketed around each scrape), or the reason it cannot be made
sound. Stamps of a process on another host are on another clock; they are never compared with the
master's scrapes (that check is "not comparable" instead).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from loadgen.record import RequestRecord
from loadgen.serverview.checks import Ended, ended_between

EDGE_NS = int(2e9)
"""Half-width of the band kept around each edge: the open scrape starts 0.2 s before ``ws`` and takes
3-9 ms on the simulator; the close scrape runs just after ``we``. A scrape outside its band is not
compared (an 'uncomparable' verdict, not a guess)."""
BIN_NS = int(1e6)
"""Token arrivals near an edge are kept per millisecond: a scrape's bracket widens by at most 1 ms
of arrivals on each side."""


@dataclass
class EdgeLog:
    ws: int
    we: int
    host: str = ""
    ended: list = field(default_factory=list)
    """[end_ns, tokens, verify_ct, accepted, proposed] of each request that completed in a band."""
    ended_mid: Ended = field(default_factory=Ended)
    tok_bins: dict = field(default_factory=dict)
    tok_mid: int = 0
    until: int = 0
    """When this process stopped recording (its users stopped): nothing later is known."""
    past_bins: dict = field(default_factory=dict)
    """Tokens past the first of each event, binned as ``tok_bins``: a per-step stream's accepted drafts (vLLM,
    loadgen.serverview.checks' acceptance check); ``past_mid`` the middle's."""
    past_mid: int = 0

    def bands(self) -> list[tuple[int, int]]:
        lo, hi = self.ws - EDGE_NS, self.we + EDGE_NS
        if self.we - self.ws <= 2 * EDGE_NS:
            return [(lo, hi)]
        return [(lo, self.ws + EDGE_NS), (self.we - EDGE_NS, hi)]

    def _where(self, t: int) -> str:
        """'band', 'mid' or 'out' for an instant."""
        bands = self.bands()
        if any(a <= t < b for a, b in bands):
            return "band"
        if len(bands) == 2 and bands[0][1] <= t < bands[1][0]:
            return "mid"
        return "out"

    def add(self, rec: RequestRecord, ended: bool = True) -> None:
        """A record that finished (or, ``ended`` False, was still streaming when the users stopped).

        Runs on the load process's event loop as each request ends: the chunks (in time order) are cut
        at the bands' edges by bisection, and only those inside a band are binned one by one (a
        200-chunk request, 200 of them spread over the edges and the middle of a 30 s window: 119 µs
        each chunk by chunk, 8.6 µs so, the same bins and sums)."""
        ns, toks = rec.chunk_ns, rec.chunk_tokens
        bands = self.bands()
        for a, b in bands:
            for i in range(bisect_left(ns, a), bisect_left(ns, b)):
                k = toks[i]
                if k > 0:
                    bin_ = ns[i] // BIN_NS
                    self.tok_bins[bin_] = self.tok_bins.get(bin_, 0) + k
                    if k > 1:
                        self.past_bins[bin_] = self.past_bins.get(bin_, 0) + k - 1
        if len(bands) == 2:
            mid = [k for k in toks[bisect_left(ns, bands[0][1]):bisect_left(ns, bands[1][0])] if k > 0]
            self.tok_mid += sum(mid)
            self.past_mid += sum(mid) - len(mid)
        if not (ended and rec.ok and rec.end_ns):
            return
        tokens = rec.output_tokens or rec.tokens_received
        w = self._where(rec.end_ns)
        if w == "band":
            self.ended.append([rec.end_ns, tokens, rec.verify_ct, rec.accepted_drafts, rec.proposed_drafts])
        elif w == "mid":
            self.ended_mid.add(tokens, rec.verify_ct, rec.accepted_drafts, rec.proposed_drafts)

    def to_dict(self) -> dict:
        return {"host": self.host, "ws": self.ws, "we": self.we, "until": self.until, "ended": self.ended,
                "ended_mid": vars(self.ended_mid), "tok_bins": {str(k): v for k, v in self.tok_bins.items()},
                "tok_mid": self.tok_mid, "past_bins": {str(k): v for k, v in self.past_bins.items()},
                "past_mid": self.past_mid}


@dataclass
class Sides:
    """The client's side of the checks, summed over every process; ``why`` set when it is not sound."""

    ended: Ended | None = None
    tokens_open: tuple[int, int] | None = None
    tokens_close: tuple[int, int] | None = None
    why: str | None = None
    past_first_open: tuple[int, int] | None = None
    past_first_close: tuple[int, int] | None = None


def _log(d: dict) -> EdgeLog:
    log = EdgeLog(int(d["ws"]), int(d["we"]), d.get("host", ""), list(d.get("ended") or []),
                  Ended(**(d.get("ended_mid") or {})), {int(k): int(v) for k, v in (d.get("tok_bins") or {}).items()},
                  int(d.get("tok_mid", 0)), int(d.get("until", 0)),
                  {int(k): int(v) for k, v in (d.get("past_bins") or {}).items()}, int(d.get("past_mid", 0)))
    return log


def _tokens_before(log: EdgeLog, t: int, inclusive_bin: bool, past_first: bool = False) -> int:
    """Tokens this process received from the start of its first band until ``t`` (to its 1 ms bin); those past
    the first of each event with ``past_first``."""
    cut = t // BIN_NS
    bins, mid = (log.past_bins, log.past_mid) if past_first else (log.tok_bins, log.tok_mid)
    n = sum(v for b, v in bins.items() if (b <= cut if inclusive_bin else b < cut))
    if len(log.bands()) == 2 and t >= log.bands()[1][0]:
        n += mid
    return n


def combine(parts: list[dict], host: str, span: tuple[int, int],
            open_at: tuple[int, int], close_at: tuple[int, int]) -> Sides:
    """The client's counts over the master's scrapes, from every process's edges.

    ``span``: the two scrapes' midpoints (ServerWatch.span_ns); ``open_at``/``close_at``: perf ns just
    before and just after each scrape call, all on the master's clock, ``host`` the master's host.
    """
    if not parts:
        return Sides(why="no load process reported what it saw at the window's edges")
    logs = []
    for d in parts:
        try:
            logs.append(_log(d))
        except (KeyError, TypeError, ValueError):
            return Sides(why="a load process's edge record could not be read")
    other = sorted({lg.host for lg in logs if lg.host != host})
    if other:
        return Sides(why=f"load processes on other hosts ({', '.join(other)}): their request stamps are on "
                         "other clocks than the master's scrapes")
    for lg in logs:
        bands = lg.bands()
        if not (bands[0][0] <= open_at[0] and close_at[1] <= bands[-1][1]):
            return Sides(why="the master's scrapes fell outside the window edges a load process recorded")
        if len(bands) == 2 and not (open_at[1] < bands[0][1] and close_at[0] >= bands[1][0]):
            return Sides(why="the master's scrapes fell outside the window edges a load process recorded")
        if lg.until and close_at[1] >= lg.until:
            return Sides(why="a load process stopped its users before the master's closing scrape ended")
    ended = Ended()
    for lg in logs:
        ended.merge(ended_between(lg.ended, *span))
        if len(lg.bands()) == 2:  # the middle lies wholly between the scrapes (checked above)
            ended.merge(lg.ended_mid)

    def bracket(at: tuple[int, int], past_first: bool = False) -> tuple[int, int]:
        return (sum(_tokens_before(lg, at[0], False, past_first) for lg in logs),
                sum(_tokens_before(lg, at[1], True, past_first) for lg in logs))

    return Sides(ended, bracket(open_at), bracket(close_at),
                 past_first_open=bracket(open_at, True), past_first_close=bracket(close_at, True))

"""Whether an open-loop stage's server kept up with the offered rate: detected from the stage, not guessed.

In: an open-loop stage's dict (StageResult.to_dict with an ``open_loop`` block). Out:
:class:`Saturation`: saturated or not, and the evidence in words. In an open loop a server
that cannot keep up does not slow the arrivals down: its queue grows for as long as the
stage lasts, so its latencies have no steady value and grow with the window. Three signs,
any one is enough:

- the cool-down hit its bound: requests planned inside the window were still waiting when
  the stage had to end;
- fewer requests ended inside the window than were planned inside it, by more than 10 %
  and more than the noise (3 √n): a server that keeps up ends about as many as arrive;
- TTFT from plan grew across the window: its median over the last third of the window's
  bins exceeds the first third's by more than a tenth of the window (a queue that grows at
  rate λ − μ adds (λ − μ)/μ · T over a window T: this catches λ above ~1.1 μ even when the
  window is too short for the count to show it).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from loadgen.stage.timeline import Timeline

COUNT_SHORTFALL = 0.10
GROWTH_SHARE = 0.10
LAG_SHARE = 0.10
"""A sign is the server's own when the client's largest dispatch lag is under this share of what the sign
measured: a late client offers less than planned, so a queue that still grew is the server's (and grows at
the planned rate too). A lag-flagged stage is then still evidence of saturation (loadgen capacity)."""


@dataclass(frozen=True)
class Saturation:
    saturated: bool
    why: str = ""
    planned_per_s: float | None = None
    """Requests planned inside the window, per second of it (the offered rate as this window drew it)."""
    ended_per_s: float | None = None
    """Requests that ended inside the window, per second (the achieved rate)."""
    ttft_growth_ms: float | None = None
    """TTFT from plan: the last third's median − the first third's, over the window's bins."""
    servers: bool = True
    """Saturated by the server, not by a late client: the stage's largest dispatch lag is under
    LAG_SHARE of the sign's own size (its backlog in seconds, or the TTFT growth)."""
    ended: int = 0
    """Requests that ended inside the window."""

    def to_dict(self) -> dict:
        return {"saturated": self.saturated, "why": self.why, "planned_per_s": self.planned_per_s,
                "ended_per_s": self.ended_per_s, "ttft_growth_ms": self.ttft_growth_ms, "servers": self.servers}

    @property
    def ceiling_per_s(self) -> float | None:
        """A saturated server's most requests per second, from above: what it ended in the window plus two
        standard errors. No rate above it can be carried, whatever the SLOs."""
        if not self.saturated or self.ended_per_s is None or not self.ended:
            return None
        return self.ended_per_s * (1 + 2 / math.sqrt(self.ended))


def saturation(d: dict) -> Saturation:
    """The verdict on one stage dict (a closed-loop stage is never called saturated here)."""
    ol = d.get("open_loop")
    if not ol:
        return Saturation(False)
    w = (d.get("window") or {}).get("duration_s") or 0.0
    started = (d.get("requests") or {}).get("started", 0)
    ended = (d.get("ended_in_window") or {}).get("requests", 0)
    planned_s = started / w if w > 0 else None
    ended_s = ended / w if w > 0 else None
    growth = None
    per_bin = Timeline.percentile(d.get("timeline") or {}, "ttft_planned", 50, min_count=3)
    if len(per_bin) >= 6:
        k = len(per_bin) // 3
        growth = statistics.median(per_bin[-k:]) - statistics.median(per_bin[:k])
    base = Saturation(False, "", planned_s, ended_s, None if growth is None else round(growth, 3), ended=ended)
    lag_ms = (ol.get("dispatch_lag_ms") or {}).get("max") or 0.0
    cut = d.get("cut") or {}
    if cut.get("by") == "max-cooldown":
        # the requests left were planned inside the window, at least the cool-down (>= the window) ago
        return _yes(base, "requests planned inside the window were still unfinished when the cool-down's bound "
                          f"came ({cut.get('at_s', 0):.0f} s into the stage): the queue outgrew the stage",
                    lag_ms, w * 1000)
    if started >= 20 and ended < (1 - COUNT_SHORTFALL) * started and started - ended > 3 * math.sqrt(started):
        return _yes(base, f"{ended_s:.3g} req/s ended inside the window against {planned_s:.3g} req/s planned in it "
                          f"(offered {ol.get('rate', 0):g}): the server falls behind",
                    lag_ms, 1000 * (started - ended) / planned_s)
    if growth is not None and w > 0 and growth > GROWTH_SHARE * w * 1000:
        return _yes(base, f"TTFT from plan grew by {growth / 1000:.2f} s across the {w:.0f} s window: the queue "
                          "grows without bound", lag_ms, growth)
    return base


def _yes(base: Saturation, why: str, lag_ms: float, sign_ms: float) -> Saturation:
    return Saturation(True, why, base.planned_per_s, base.ended_per_s, base.ttft_growth_ms,
                      servers=lag_ms < LAG_SHARE * sign_ms, ended=base.ended)

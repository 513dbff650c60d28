"""Did an embedded simulator keep its model's clock through a stage?

In: a target's base URL and what its probe found (a loadgen simulator says so in /server_info's
``loadgen_sim`` block). Out: :func:`read`, the simulator's :class:`Clock` now or None for any other
server; :func:`over`, the stage's ``simulator`` block from two reads: ``forwards``, ``late_forwards``,
``late_share``, ``mean_late_ms``, ``behind_forwards`` and ``starved``; :func:`switches`, an adaptive mode's
true speculation switches inside the stage's window (``/loadgen/truth?switches=1``), the block's ``switching``
beside the stream's own (loadgen.stage.switching).

A forward is late when it ended more than 2 ms after the instant its model said it would
(loadgen.sim.scheduler): the process did not get the CPU when the modelled GPU was done. One late
forward is caught up by the next (each starts at once); a simulator that stays behind its model
serves slower than the server it models, and the truth it is checked against no longer applies.
So a stage is judged on how far behind it ran on average, in its own forwards. Ten seeds of
``loadgen bench rates`` side by side on 16 cores without pinning starved the simulators that way:
baseline at 20 req/s ended 11 req/s with 113 requests running, and the analysis read a saturated
server (capacity "15 req/s", the simulator's own 25.9). A stage whose
simulator was ``starved`` is left out of the analyses (loadgen.analysis.coverage.sim_starved).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from loadgen.serverview.wire import get_json

STARVED_BEHIND = 3.0
"""How far behind its model a simulator ran, on average over the stage's forwards and in its own
forwards (its lateness past 2 ms summed, over the forwards' modelled durations summed), from which it
counts as starved. Measured on this 2-core VM (time-scale 5, 8 s windows): 0.001-0.04 with nothing else
running, at 3 and 14 req/s of 150-250 tokens; 0.1-0.3 with four busy loops on the two cores, 2.0 in a
worse run of those (its TPOT p50 still 7.52 ms against 7.51); 7.7 when paused 60 ms of every 80
(tests/serverview/test_simclock.py). The share of forwards more than 2 ms late, the criterion before,
read 0.52 for the idle 14 req/s stage: a loaded simulator's forwards are often a little late, each one
caught up by the next."""


class Clock(NamedTuple):
    """A simulator's clock counters at one instant (its /server_info ``loadgen_sim`` block)."""

    forwards: int
    late_forwards: int
    late_ms_sum: float
    forward_ms_sum: float


def is_sim(probed: dict | None) -> bool:
    return bool(((probed or {}).get("server_info") or {}).get("loadgen_sim"))


def read(url: str, probed: dict | None, headers: dict | None = None, timeout_s: float = 2.0) -> Clock | None:
    """The clock counters of the simulator at ``url`` now; None when it is not one or did not answer."""
    if not is_sim(probed):
        return None
    info = get_json(url, "/server_info", timeout_s=timeout_s, headers=headers)
    sim = info.get("loadgen_sim") if isinstance(info, dict) else None
    try:
        return Clock(int(sim["forwards"]), int(sim["late_forwards"]), float(sim["late_ms_sum"]),
                     float(sim["forward_ms_sum"]))
    except (KeyError, TypeError, ValueError):  # no block: the stage is kept as measured
        return None


def over(before: Clock | None, after: Clock | None) -> dict | None:
    """The stage's ``simulator`` block from reads at its start and end (None without both, or after a
    restart: its counters began again)."""
    if before is None or after is None or any(a < b for a, b in zip(after, before)):
        return None
    forwards, late = after.forwards - before.forwards, after.late_forwards - before.late_forwards
    late_ms, model_ms = after.late_ms_sum - before.late_ms_sum, after.forward_ms_sum - before.forward_ms_sum
    behind = late_ms / model_ms if model_ms > 0 else 0.0
    return {"forwards": forwards, "late_forwards": late, "late_share": round(late / forwards if forwards else 0.0, 4),
            "mean_late_ms": round(late_ms / forwards if forwards else 0.0, 3), "behind_forwards": round(behind, 3),
            "starved": forwards > 0 and behind >= STARVED_BEHIND}


@dataclass(frozen=True)
class TrueSwitches:
    """The simulator's own speculation switches inside a window: what the stream's ``switching`` block infers."""

    switches: int
    window_s: float

    @property
    def per_s(self) -> float:
        return self.switches / self.window_s if self.window_s > 0 else 0.0

    def to_dict(self) -> dict:
        return {"switches": self.switches, "per_s": round(self.per_s, 4)}


def switches(url: str, probed: dict | None, lo_ns: int, hi_ns: int, headers: dict | None = None,
             timeout_s: float = 2.0) -> TrueSwitches | None:
    """The switches the simulator at ``url`` made with ``lo_ns <= t_ns < hi_ns`` (perf_counter_ns, the clock the
    window's instants are on: one machine); 0 for a mode that does not adapt. None when it is not a simulator,
    did not answer, or has dropped some of that range from its log (its newest 10,000 are kept)."""
    if not is_sim(probed):
        return None
    got = get_json(url, f"/loadgen/truth?switches=1&since_ns={lo_ns}&until_ns={hi_ns}", timeout_s=timeout_s,
                   headers=headers)
    if not isinstance(got, dict) or not got.get("complete") or not isinstance(got.get("switches"), list):
        return None
    return TrueSwitches(len(got["switches"]), (hi_ns - lo_ns) / 1e9)


def note(block: dict) -> str:
    return (f"the embedded simulator was starved of CPU: its {block['forwards']} forwards ended "
            f"{block['mean_late_ms']:.3g} ms after its model's time on average ({block['behind_forwards']:.3g} "
            "forwards behind), so it served slower than the server it models; the stage is left out of the "
            "analyses (give it cores of its own: taskset)")

"""Did an embedded simulator keep its model's clock through a stage?

In: a target's base URL and what its probe found (a loadgen simulator says so in /server_info's
``loadgen_sim`` block). Out: :func:`read`, the simulator's (forwards, late forwards) now or None for
any other server; :func:`over`, the stage's ``simulator`` block from two reads: ``forwards``,
``late_forwards``, ``late_share`` and ``starved``.

A forward is late when it ended more than 2 ms after the instant its model said it would
(loadgen.sim.scheduler): the process did not get the CPU when the modelled GPU was done, so what
it served was slower than the server it models, and the truth it is checked against no longer
applies. Ten seeds of ``loadgen bench rates`` side by side on 16 cores without pinning starved
the simulators that way: baseline at 20 req/s ended 11 req/s with 113 requests running, and the
analysis read a saturated server (capacity "15 req/s", the simulator's own 25.9). A stage whose
simulator was ``starved`` is left out of the analyses (loadgen.analysis.coverage.sim_starved).
"""

from __future__ import annotations

from loadgen.serverview.wire import get_json

STARVED_SHARE = 0.5
"""Late forwards over the stage's forwards from which its simulator counts as starved. Measured on
this 2-core machine at 20 req/s, time-scale 10 (~5,800 forwards in 13 s): 2.5 % late with the
client on the other core, 19 % with two busy loops sharing the simulator's core, and its TTFT p50
still 2.9 ms against 2.8 (the model's latencies, a few ms late); a simulator that cannot keep up is
late on nearly every forward, since each starts at once to catch up."""


def is_sim(probed: dict | None) -> bool:
    return bool(((probed or {}).get("server_info") or {}).get("loadgen_sim"))


def read(url: str, probed: dict | None, headers: dict | None = None, timeout_s: float = 2.0) -> tuple[int, int] | None:
    """(forwards, late forwards) of the simulator at ``url`` now; None when it is not one or did not answer."""
    if not is_sim(probed):
        return None
    info = get_json(url, "/server_info", timeout_s=timeout_s, headers=headers)
    sim = info.get("loadgen_sim") if isinstance(info, dict) else None
    try:
        return int(sim["forwards"]), int(sim["late_forwards"])
    except (KeyError, TypeError, ValueError):  # no block: the stage is kept as measured
        return None


def over(before: tuple[int, int] | None, after: tuple[int, int] | None) -> dict | None:
    """The stage's ``simulator`` block from reads at its start and end (None without both, or after a
    restart: its counters began again)."""
    if before is None or after is None or after[0] < before[0] or after[1] < before[1]:
        return None
    forwards, late = after[0] - before[0], after[1] - before[1]
    share = late / forwards if forwards else 0.0
    return {"forwards": forwards, "late_forwards": late, "late_share": round(share, 4),
            "starved": forwards > 0 and share >= STARVED_SHARE}


def note(block: dict) -> str:
    return (f"the embedded simulator was starved of CPU: {block['late_forwards']} of its {block['forwards']} "
            "forwards ended more than 2 ms after its model's time, so it served slower than the server it "
            "models; the stage is left out of the analyses (give it cores of its own: taskset)")

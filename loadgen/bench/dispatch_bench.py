"""How fast one client process keeps an open-loop schedule (``loadgen bench dispatch``).

In: a list of offered rates (req/s), an arrival process, process counts. Out: a printed
table, per rate, of what the open-loop stage (loadgen/run/pacing.py, the same code as
``loadgen run --rate``) planned and sent, what completed, its dispatch lag (handed to the
HTTP client − planned) at p50/p99/max and the client's CPU, then the highest rate one
process keeps with dispatch lag p99 under 1 ms.

The server is the known-schedule SSE server (loadgen/bench/schedserver.py) in its own
process on one core, answering every request at once with a tiny stream (two one-token
chunks); the client runs on the other core. What limits the rate is then the client alone:
its timer, its loop, its per-request work.
"""

from __future__ import annotations

import argparse
import os
from contextlib import contextmanager

import orjson

from loadgen.bench.client_bench import RequestCycle, _table
from loadgen.bench.procs import schedserver
from loadgen.client.target import Target
from loadgen.request import GenRequest
from loadgen.run.processes import run_stage_processes
from loadgen.run.spec import RunOptions, StageSpec
from loadgen.errors import LoadgenError
from loadgen.timing.arrivals import arrivals

DEFAULT_RATES = "50,100,200,500,1000,2000,4000"
LAG_P99_MS = 1.0
"""The bound the summary line judges by: a send within 1 ms of its plan is on time for any LLM latency."""
SERVER_ARGS = ("--ttft-ms", "0", "--interval-ms", "0.2")
"""First chunk as soon as the request is read, the second 0.2 ms later: requests end within about a ms."""

FLAG_MS = 10.0
"""StageSpec.max_lag_ms's default: above it a stage is flagged."""

COLS = ["processes", "offered", "planned", "sent", "sent_per_s", "achieved_per_s", "failed", "lag_p50_ms",
        "lag_p99_ms", "lag_max_ms", "cpu_pct", "flagged"]


def rate_point(url: str, rate: float, arrival: str = "poisson", duration_s: float = 3.0, warmup_s: float = 1.0,
               processes: int = 1, max_lag_ms: float = 10.0, seed: int = 0) -> dict:
    """One open-loop stage at ``rate`` against the server at ``url``: what was planned, sent, completed, how late."""
    source = RequestCycle([GenRequest(workload="bench", prompt="x", max_tokens=2)])
    spec = StageSpec(0, duration_s=duration_s, warmup_s=warmup_s, arrivals=arrivals(rate, arrival),
                     max_lag_ms=max_lag_ms)
    res = run_stage_processes(Target("bench", url, "sglang"), spec, source, RunOptions(seed=seed),
                              processes=processes)
    d = res.to_dict()
    ol, lag = d["open_loop"], d["open_loop"]["dispatch_lag_ms"]
    w = d["window"]["duration_s"]
    cpu = d["client"]["cpu_pct"]
    return {"processes": processes, "offered": rate, "arrival": arrival, "planned": ol["planned"], "sent": ol["sent"],
            # the window's sends (each carries one dispatch-lag sample) over the window
            "sent_per_s": round(lag.get("count", 0) / w, 1),
            "achieved_per_s": round(d["requests"]["completed"] / w, 1), "failed": d["requests"]["failed"],
            "lag_p50_ms": lag.get("p50"), "lag_p99_ms": lag.get("p99"), "lag_max_ms": lag.get("max"),
            "cpu_pct": round(sum(cpu), 1) if cpu else None, "flagged": ol["lag_flagged"]}


def sustained(points: list[dict], bound_ms: float = LAG_P99_MS) -> tuple[float | None, dict | None]:
    """The highest rate below the first one that missed (lag p99 ≥ ``bound_ms``, a send dropped, a failure),
    and that first miss (None when every rate kept the schedule)."""
    ladder = sorted(points, key=lambda p: p["offered"])
    best = None
    for p in ladder:
        p99 = p["lag_p99_ms"]
        if p99 is None or p99 >= bound_ms or p["sent"] < p["planned"] or p["failed"]:
            return best, p
        best = p["offered"]
    return best, None


@contextmanager
def _client_cores(server_cpu: int = 0):
    """This process (and the client processes it spawns, who inherit it) on every core but the server's:
    with --processes 2 on a machine of more cores each gets one of its own; on 2 cores they share core 1."""
    before = os.sched_getaffinity(0)
    if len(before) > 1:
        os.sched_setaffinity(0, before - {server_cpu} or before)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def run_ladder(rates: list[float], processes: list[int], arrival: str = "poisson", duration_s: float = 3.0,
               warmup_s: float = 1.0, echo=print) -> list[dict]:
    """Every rate at every process count against one server on core 0, the client on the other cores."""
    points: list[dict] = []
    with schedserver(*SERVER_ARGS, cpu=0) as url, _client_cores(0):
        for n in processes:
            for rate in rates:
                p = rate_point(url, rate, arrival, duration_s, warmup_s, processes=n)
                points.append(p)
                lines = _table([p], COLS).splitlines()
                echo(lines[-1] if len(points) > 1 else "\n".join(lines))
    return points


def summary(points: list[dict], bounds_ms: tuple[float, ...] = (LAG_P99_MS, FLAG_MS)) -> list[str]:
    """Per process count and bound: the highest rate kept under it, and where it was first missed."""
    out = []
    for n, bound in ((n, b) for n in sorted({p["processes"] for p in points}) for b in bounds_ms):
        best, miss = sustained([p for p in points if p["processes"] == n], bound)
        who = "one process sustains" if n == 1 else f"{n} processes sustain"
        why = "" if bound == LAG_P99_MS else " (a stage's default flag bound)"
        line = f"highest rate {who} with dispatch lag p99 < {bound:g} ms{why}: " + (
            f"{best:g} req/s" if best is not None else "none of the rates tried")
        if miss is not None:
            line += f" (at {miss['offered']:g} req/s: p99 {miss['lag_p99_ms']} ms, sent {miss['sent']} of {miss['planned']})"
        else:
            line += " (the highest rate tried)"
        out.append(line)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="loadgen bench dispatch", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default=DEFAULT_RATES, help="offered rates, req/s (comma-separated)")
    ap.add_argument("--arrival", default="poisson", help="poisson | constant | gamma:CV")
    ap.add_argument("--duration", type=float, default=3.0, help="window per rate, s")
    ap.add_argument("--warmup", type=float, default=1.0, help="warm-up per rate, s")
    ap.add_argument("--processes", default="1", help="client process counts to try, e.g. 1,2")
    ap.add_argument("--json", default=None, help="write the points to this file too")
    a = ap.parse_args(argv)
    try:
        rates = [float(x) for x in a.rates.split(",") if x.strip()]
        procs = [int(x) for x in a.processes.split(",") if x.strip()]
    except ValueError as exc:
        ap.error(f"--rates / --processes: numbers, comma-separated ({exc})")
    if not rates or min(rates) <= 0 or not procs or min(procs) < 1 or a.duration <= 0 or a.warmup < 0:
        ap.error("rates > 0, processes >= 1, --duration > 0 and --warmup >= 0")
    try:
        arrivals(rates[0], a.arrival)  # a bad arrival: its one-line error before any load
    except LoadgenError as exc:
        ap.error(str(exc))
    if len(os.sched_getaffinity(0)) < 2:
        print("note: fewer than 2 cores: server and client share one; the lag includes the server's work")
    elif max(procs) > 1 and len(os.sched_getaffinity(0)) == 2:
        print("note: 2 cores: the server has one, so every client process shares the other")
    print(f"open-loop dispatch, {a.arrival} arrivals, {a.warmup:g} s warm-up + {a.duration:g} s window per rate; "
          "lag = handed to the HTTP client - planned (window sends)")
    points = run_ladder(rates, procs, a.arrival, a.duration, a.warmup)
    for line in summary(points):
        print(line)
    if a.json:
        with open(a.json, "wb") as f:
            f.write(orjson.dumps(points, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark of the simulator itself: sustained tokens/s and chunks/s with many streams on one core.

The simulator runs pinned to one core (--server-cpu), this process drives it from
another (--client-cpu) with a lean keep-alive client (selfcheck.py), so what is
measured is the simulator's own ceiling. Compare with the profile's analytic
throughput: if sustained < expected, the simulator (or the client) was CPU-bound.
Called as ``loadgen bench sim ...`` (loadgen.cli.bench calls main(argv)) or
``python bench/bench_sim.py ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from loadgen.errors import LoadgenError
from loadgen.sim import model, profiles
from loadgen.sim.process import SimProcess
from loadgen.sim.closedloop import closed_loop

ROUTES = {"chat": "/v1/chat/completions", "generate": "/generate"}


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="loadgen bench sim", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="fast")
    p.add_argument("--mode", default="both", help="both (baseline and spec) or one of the profile's modes")
    p.add_argument("--streams", type=int, default=250)
    p.add_argument("--duration", type=float, default=10.0, help="seconds of steady load per mode")
    p.add_argument("--max-tokens", type=int, default=200)
    p.add_argument("--route", choices=sorted(ROUTES), default="chat")
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--server-cpu", type=int, default=0, help="core for the simulator (-1: no pinning)")
    p.add_argument("--client-cpu", type=int, default=1, help="core for this client (-1: no pinning)")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds of load before measuring")
    return p


async def _run_mode(args: argparse.Namespace, mode: str) -> dict:
    extra = ["--incremental-streaming-output"] if args.route == "generate" else []
    prof = profiles.load(args.profile)
    with SimProcess(profile=args.profile, mode=mode, time_scale=args.time_scale,
                    cpu=args.server_cpu if args.server_cpu >= 0 else None,
                    extra_args=extra) as sim:  # fmt: skip
        route = ROUTES[args.route]
        if args.warmup > 0:
            await closed_loop(sim.url, args.streams, 1, max_tokens=args.max_tokens, stream=True, route=route,
                              duration_s=args.warmup)  # fmt: skip
        measured = asyncio.ensure_future(closed_loop(
            sim.url, args.streams, 4, max_tokens=args.max_tokens, stream=True, route=route,
            duration_s=args.duration + 1.0))  # fmt: skip
        await asyncio.sleep(0.5)  # let the new wave settle
        cpu0, info0 = _cpu_seconds(sim.pid), _server_counts(sim.url)
        await asyncio.sleep(args.duration)
        cpu1, info1 = _cpu_seconds(sim.pid), _server_counts(sim.url)
        res = await measured
    span = (info1["now_ns"] - info0["now_ns"]) / 1e9
    cpu = (cpu1 - cpu0) / span
    expected = model.expected_throughput(prof, mode, args.streams, output_tokens=args.max_tokens) * args.time_scale
    return {
        "mode": mode,
        "tok_s": (info1["generated_tokens"] - info0["generated_tokens"]) / span,
        "chunks_s": (info1["events_written"] - info0["events_written"]) / span,
        "client_tok_s": res.tok_per_s,
        "requests": res.requests,
        "expected_tok_s": expected,
        "server_cpu": cpu,
    }


def _server_counts(url: str) -> dict:
    """The simulator's own counters (tokens generated, events written, its clock)."""
    import urllib.request

    import orjson

    with urllib.request.urlopen(url + "/server_info", timeout=30) as resp:
        return orjson.loads(resp.read())["loadgen_sim"]


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.streams < 1 or args.duration <= 0:
        raise LoadgenError("--streams and --duration must be positive")
    ncpu = os.cpu_count() or 1
    if 0 <= args.client_cpu < ncpu and args.client_cpu != args.server_cpu:
        os.sched_setaffinity(0, {args.client_cpu})
    try:
        import uvloop

        run = uvloop.run
    except ImportError:
        run = asyncio.run
    modes = ("baseline", "spec") if args.mode == "both" else (args.mode,)
    print(f"simulator bench: profile {args.profile}, {args.streams} streams, route {args.route}, "
          f"time-scale {args.time_scale:g}, server on cpu {args.server_cpu}, client on cpu {args.client_cpu}")  # fmt: skip
    for mode in modes:
        r = run(_run_mode(args, mode))
        print(
            f"{mode:>8}: {r['tok_s']:>9,.0f} tokens/s  {r['chunks_s']:>9,.0f} chunks/s  "
            f"({r['tok_s'] / max(1.0, r['chunks_s']):.2f} tokens/chunk over {args.duration:g} s; "
            f"schedule asks {r['expected_tok_s']:,.0f} tokens/s = {r['tok_s'] / r['expected_tok_s']:.0%} sustained; "
            f"simulator CPU {r['server_cpu']:.0%} of its core, "
            f"{r['server_cpu'] / max(1.0, r['chunks_s']) * 1e6:.0f} us per chunk)",
            flush=True,
        )
    return 0

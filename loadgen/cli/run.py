"""``loadgen run``: fixed-concurrency stages against one target, a table and a JSON file."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from contextlib import ExitStack

from loadgen.client.stream import Timeouts
from loadgen.errors import LoadgenError
from loadgen.client.loops import LOOPS
from loadgen.settings.parse import duration, headers, ladder, slo
from loadgen.run.probe import probe_sync
from loadgen.client.protocols import PROTOCOLS
from loadgen.run.results import ResultsWriter
from loadgen.run.ramp import RampPlan, run_ramp
from loadgen.run.runner import RunOptions
from loadgen.report.table import stage_table
from loadgen.client.target import Target


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", help="server base URL; omitted: start the embedded simulator")
    p.add_argument("--protocol", default="sglang", choices=sorted(PROTOCOLS), help="wire protocol (default sglang)")
    p.add_argument("--model", default="default", help="model name sent on OpenAI routes")
    p.add_argument("--label", default=None, help="target label in results (default: baseline/url)")
    p.add_argument("--concurrency", default="1,2,5,10", help="comma-separated ladder (default 1,2,5,10)")
    p.add_argument("--duration", default="30s", help="steady window per stage (default 30s)")
    p.add_argument("--requests", type=int, default=None, help="close each window after N requests instead")
    p.add_argument("--warmup", default="5s", help="minimum warm-up before each window (default 5s); the window "
                   "opens once the load is measured steady")
    p.add_argument("--max-stage-time", default=None, help="no stage runs longer (e.g. 3m): cut where it is, kept, "
                   "marked incomplete and noted; the ladder goes on")
    p.add_argument("--max-run-time", default=None, help="the whole run's budget, shared out between the stages")
    p.add_argument("--workload", default="chat", help="workload name, mix 'code:2,chat:1', or a .jsonl file")
    p.add_argument("--max-tokens", default=None, help="output length override: 200, normal:200,50, uniform:100,300")
    p.add_argument("--prompt-tokens", default=None, help="prompt length target, same forms as --max-tokens")
    p.add_argument("--ignore-eos", action="store_true", help="generate exactly max tokens (biases acceptance)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slo", default=None, help="goodput SLOs, e.g. ttft_ms=500,tpot_ms=50")
    p.add_argument("--tokenizer", default=None, help="HF tokenizer.json (or folder) for servers without per-chunk usage")
    p.add_argument("--header", action="append", help="extra HTTP header 'Name: value' (repeatable)")
    p.add_argument("--read-timeout", default="120s", help="longest silence before a stream counts as stalled")
    p.add_argument("--processes", type=int, default=1, help="spread each stage's users over N processes")
    p.add_argument("--loop", choices=LOOPS, default="auto", help="event loop: uvloop (fast) or stamping (exact burst stamps)")
    p.add_argument("--spec-details", action="store_true", help="ask SGLang OpenAI routes for spec_tokens_details")
    p.add_argument("--out", default="results/run.json", help="results JSON (a .csv and .hlog go beside it)")
    sim = p.add_argument_group("embedded simulator (when --url is omitted)")
    sim.add_argument("--sim-profile", default="pcie-8gpu-eagle3")
    sim.add_argument("--sim-mode", default="baseline", choices=("baseline", "spec"))
    sim.add_argument("--sim-time-scale", type=float, default=1.0)


def make_source(args):
    """seed → request iterator; a bound method of a plain object, so worker processes can unpickle it."""
    from loadgen.workloads.base import Lengths, resolve

    lengths = Lengths.parse(args.prompt_tokens, args.max_tokens, args.tokenizer, args.ignore_eos)
    return resolve(args.workload, lengths).requests


def run(args) -> int:
    concurrencies = ladder(args.concurrency)
    warmup_s = duration(args.warmup, "--warmup")
    stage_kw = {"duration_s": None if args.requests else duration(args.duration), "requests": args.requests}
    if args.processes < 1:
        raise LoadgenError(f"--processes must be >= 1, got {args.processes}")
    source = make_source(args)
    tokenizer = None
    if args.tokenizer:
        from loadgen.client.tokencount import load_tokenizer

        tokenizer = load_tokenizer(args.tokenizer)
    opts = RunOptions(slo=slo(args.slo), timeouts=Timeouts(read_s=duration(args.read_timeout, "--read-timeout")),
                      tokenizer=tokenizer, seed=args.seed)
    # SIGTERM between stages behaves like Ctrl-C (during a stage the event loop takes both).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with ExitStack() as stack:
        url = args.url
        meta = {"command": "run", "argv": sys.argv[1:], "workload": args.workload, "seed": args.seed}
        if url is None:
            from loadgen.sim.process import SimProcess

            cpus = sorted(os.sched_getaffinity(0))
            sim = stack.enter_context(SimProcess(profile=args.sim_profile, mode=args.sim_mode,
                                                 time_scale=args.sim_time_scale, seed=args.seed,
                                                 cpu=cpus[0] if len(cpus) > 1 else None))
            if len(cpus) > 1:
                os.sched_setaffinity(0, set(cpus[1:]))
            url = sim.url
            meta["simulator"] = {"profile": args.sim_profile, "mode": args.sim_mode,
                                 "time_scale": args.sim_time_scale}
            print(f"loadgen: no --url given: embedded simulator ({args.sim_profile}, {args.sim_mode}) at {url}",
                  file=sys.stderr)
        target = Target(args.label or (args.sim_mode if args.url is None else "target"), url, args.protocol,
                        args.model, headers(args.header), args.spec_details)
        found = probe_sync(target.url)
        if not found.reachable:
            # Not fatal: every request of the run will be counted as a failure with the reason.
            print(f"loadgen: warning: {target.url} does not answer ({found.error})", file=sys.stderr)
        if found.engine == "sglang" and target.protocol != "sglang":
            target.spec_details = True  # SGLang reports acceptance on OpenAI routes only when asked
        meta["targets"] = [{"label": target.label, "url": target.url, "protocol": target.protocol,
                            "server": found.to_dict()}]
        writer = ResultsWriter(args.out, meta)
        writer.run["servers"] = {target.label: found.to_dict()}
        plan = RampPlan(targets=[target], ladder=concurrencies, workloads=[args.workload],
                        make_source=lambda _w: source, opts=opts, warmup_s=warmup_s, processes=args.processes,
                        loop=args.loop, **stage_kw,
                        max_stage_s=duration(args.max_stage_time, "--max-stage-time") if args.max_stage_time else None,
                        max_run_s=duration(args.max_run_time, "--max-run-time") if args.max_run_time else None)
        try:
            done = run_ramp(plan, writer)
        except KeyboardInterrupt:
            print("loadgen: interrupted; results so far are saved", file=sys.stderr)
            writer.finish(interrupted=True)
            if writer.stages:
                print(stage_table(writer.stages))
            print(f"loadgen: results in {writer.path}", file=sys.stderr)
            return 130
        writer.finish(interrupted=False)
    print(stage_table(done))
    print(f"loadgen: results in {writer.path} (+ .csv, .hlog)", file=sys.stderr)
    return 0

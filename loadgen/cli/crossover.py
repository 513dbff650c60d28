"""``loadgen crossover``: run (or read) a baseline-vs-speculative ramp and say where they cross."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from contextlib import ExitStack
from dataclasses import fields
from pathlib import Path

import orjson

from loadgen.client.stream import Timeouts
from loadgen.analysis.compare import BY_NAME as METRICS_BY_NAME
from loadgen.analysis.compare import analyze_run
from loadgen.analysis.crossover import MetricAnalysis, StageComparison, Crossover, Region, refine_plan
from loadgen.errors import LoadgenError
from loadgen.settings.parse import duration, headers, ladder, slo
from loadgen.run.orchestrate import ServerCommand
from loadgen.client.protocols import PROTOCOLS
from loadgen.run.ramp import RampPlan, log, run_ramp
from loadgen.run.results import ResultsWriter, load
from loadgen.run.runner import RunOptions
from loadgen.client.target import Target

DEFAULT_LADDER = "1,2,5,10,30,70,100,250"
PRIMARY = "output_tokens_per_s"


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="from_", metavar="RESULTS", help="analyse a finished run (its run.json or folder)")
    p.add_argument("--config", metavar="TOML", help="the ramp config Locust reads (scenarios/example.toml): run, slo, "
                   "two [targets] (baseline first; each may have start/health/stop_signal), simulator; flags win")
    p.add_argument("--out", default="results/crossover", help="output folder (default results/crossover)")
    p.add_argument("--url", help="one port for both servers, which loadgen starts one at a time "
                   "(needs --baseline-start and --spec-start)")
    p.add_argument("--baseline-url", help="baseline server; omit both URLs to use the embedded simulator")
    p.add_argument("--spec-url", help="speculative server")
    p.add_argument("--baseline-start", help="command that starts the baseline server (one GPU box)")
    p.add_argument("--spec-start", help="command that starts the speculative server")
    p.add_argument("--health-path", default="/health", help="health path for started servers")
    p.add_argument("--protocol", default="sglang", choices=sorted(PROTOCOLS))
    p.add_argument("--model", default="default")
    p.add_argument("--header", action="append")
    p.add_argument("--ladder", default=DEFAULT_LADDER, help=f"concurrency ladder (default {DEFAULT_LADDER})")
    p.add_argument("--workloads", default="chat", help="comma-separated; each gets its own ladder (default chat)")
    p.add_argument("--max-tokens", default=None)
    p.add_argument("--prompt-tokens", default=None)
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--duration", default=None, help="steady window per stage (default 30s; 8s on the simulator)")
    p.add_argument("--requests", type=int, default=None)
    p.add_argument("--warmup", default=None, help="minimum warm-up per stage (default 5s; 2s on the simulator); "
                   "the window opens once the load is measured steady")
    p.add_argument("--max-stage-time", default=None, help="no stage runs longer (e.g. 3m): one hit is cut where it "
                   "is, kept, marked incomplete and noted, and the ladder goes on")
    p.add_argument("--max-run-time", default=None, help="the whole run's budget (e.g. 30m), shared out between the "
                   "stages by their estimates; when spent the run stops and says which stages were not run")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slo", default=None)
    p.add_argument("--processes", type=int, default=1)
    p.add_argument("--read-timeout", default="120s")
    p.add_argument("--refine", action="store_true", help="add stages between bracketing concurrencies")
    p.add_argument("--refine-width", type=float, default=1.3, help="stop when the interval's high/low ≤ this")
    p.add_argument("--refine-budget", type=int, default=4, help="at most this many extra concurrencies")
    p.add_argument("--confidence", type=float, default=0.90)
    p.add_argument("--no-report", action="store_true", help="skip the HTML report")
    sim = p.add_argument_group("embedded simulator (when no URL is given)")
    sim.add_argument("--sim-profile", default="pcie-8gpu-eagle3")
    sim.add_argument("--sim-time-scale", type=float, default=5.0,
                     help="run the simulated schedule this many times faster (default 5)")


def _source_factory(args):
    from loadgen.workloads.base import Lengths, resolve

    lengths = Lengths.parse(args.prompt_tokens, args.max_tokens, args.tokenizer, args.ignore_eos)
    return lambda spec: resolve(spec, lengths).requests


def _defaults() -> dict:
    """The parser's defaults, to tell a flag left alone from one given (for --config)."""
    p = argparse.ArgumentParser(add_help=False)
    register(p)
    return vars(p.parse_args([]))


def apply_config(args, path: str, d: dict) -> tuple[list, bool]:
    """Fill the flags the user left at their defaults ``d`` from a ramp config.

    Returns its targets (TargetConf list) and whether ``args.workloads`` is the
    config's one workload (a mix such as "code:2,chat:1" is one, not two).
    """
    from loadgen.settings.config import load as load_config

    cfg = load_config(path)

    def unset(name: str) -> bool:
        return getattr(args, name) == d.get(name)

    fill = {
        "ladder": ",".join(map(str, cfg.ladder)), "workloads": cfg.workload, "max_tokens": cfg.max_tokens,
        "prompt_tokens": cfg.prompt_tokens, "ignore_eos": cfg.ignore_eos or None, "tokenizer": cfg.tokenizer,
        "requests": cfg.requests, "seed": cfg.seed or None,
        "duration": f"{cfg.duration_s}s" if cfg.duration_s is not None else None,
        "warmup": f"{cfg.warmup_s}s", "read_timeout": f"{cfg.read_timeout_s}s",
        "slo": ",".join(f"{k}={v:g}" for k, v in cfg.slo.items()) or None,
        "sim_profile": cfg.simulator.profile, "sim_time_scale": cfg.simulator.time_scale,
        "max_stage_time": f"{cfg.max_stage_s}s" if cfg.max_stage_s else None,
        "max_run_time": f"{cfg.max_run_s}s" if cfg.max_run_s else None,
    }
    for name, value in fill.items():
        if value is not None and unset(name):
            setattr(args, name, value)
    if cfg.targets:
        if len(cfg.targets) != 2:
            raise LoadgenError(f"{cfg.source}: targets: loadgen crossover needs exactly two "
                               f"(baseline first, speculative second), got {len(cfg.targets)}")
        if args.baseline_url is None and args.spec_url is None:
            args.baseline_url, args.spec_url = cfg.targets[0].url, cfg.targets[1].url
    return cfg.targets, args.workloads == cfg.workload


def run(args) -> int:
    defaults = _defaults()
    targets_conf, one_workload = apply_config(args, args.config, defaults) if args.config else ([], False)
    if args.from_:
        path = Path(args.from_)
        doc = load(path / "run.json" if path.is_dir() else path)
        out = Path(args.out) if args.out != "results/crossover" else (path if path.is_dir() else path.parent)
        return _analyse_and_report(doc, out, args)
    out = Path(args.out)
    if args.url is not None:
        if args.baseline_url or args.spec_url:
            raise LoadgenError("--url serves both targets: give it or --baseline-url/--spec-url, not both")
        if not (args.baseline_start and args.spec_start):
            raise LoadgenError("--url needs --baseline-start and --spec-start: loadgen starts each server on that "
                               "port in turn (for two running servers give --baseline-url and --spec-url)")
        args.baseline_url = args.spec_url = args.url
    on_sim = args.baseline_url is None and args.spec_url is None
    adapt_window = args.duration is None and not args.requests
    # The simulator runs its schedule time-scaled, so shorter windows hold as many steps.
    args.duration = args.duration or ("8s" if on_sim else "30s")
    args.warmup = args.warmup or ("2s" if on_sim else "5s")
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM ends the run like Ctrl-C
    if (args.baseline_url is None) != (args.spec_url is None):
        raise LoadgenError("give both --baseline-url and --spec-url, or neither (embedded simulator)")
    tokenizer = None
    if args.tokenizer:
        from loadgen.client.tokencount import load_tokenizer

        tokenizer = load_tokenizer(args.tokenizer)
    opts = RunOptions(slo=slo(args.slo), timeouts=Timeouts(read_s=duration(args.read_timeout, "--read-timeout")),
                      tokenizer=tokenizer, seed=args.seed)
    if one_workload:
        workloads = [args.workloads.strip()]
    else:
        workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    make_source = _source_factory(args)
    for w in workloads:
        make_source(w)  # a bad workload name fails here, before any server starts
    concurrencies = ladder(args.ladder, "--ladder")
    with ExitStack() as stack:
        meta: dict = {"command": "crossover", "argv": sys.argv[1:], "seed": args.seed,
                      "roles": {"baseline": "baseline", "spec": "spec"}}
        commands = {}
        if args.baseline_url is None:
            base_url, spec_url = _start_simulators(stack, args, meta)
        else:
            base_url, spec_url = args.baseline_url, args.spec_url
            for label, cmd, url in (("baseline", args.baseline_start, base_url), ("spec", args.spec_start, spec_url)):
                if cmd:
                    commands[label] = ServerCommand(label, cmd, url.rstrip("/") + args.health_path,
                                                    log_path=out / f"{label}.server.log")
            for label, tc in zip(("baseline", "spec"), targets_conf):
                if tc.start and label not in commands:
                    commands[label] = ServerCommand(label, tc.start, tc.url.rstrip("/") + tc.health,
                                                    stop_signal=tc.stop_signal, startup_timeout_s=tc.startup_timeout_s,
                                                    log_path=out / f"{label}.server.log")
        hdrs = headers(args.header)
        targets = [Target("baseline", base_url, args.protocol, args.model, dict(hdrs)),
                   Target("spec", spec_url, args.protocol, args.model, dict(hdrs))]
        for t, tc in zip(targets, targets_conf):  # the config's per-target settings, unless a flag said otherwise
            if args.protocol == defaults["protocol"]:
                t.protocol = tc.protocol
            if args.model == defaults["model"]:
                t.model = tc.model
            if not args.header:
                t.headers = dict(tc.headers)
            t.spec_details = tc.spec_details
        plan = RampPlan(targets=targets, ladder=concurrencies, workloads=workloads, make_source=make_source, opts=opts,
                        duration_s=None if args.requests else duration(args.duration),
                        requests=args.requests, warmup_s=duration(args.warmup, "--warmup"),
                        processes=args.processes, commands=commands, adapt_window=adapt_window,
                        max_stage_s=duration(args.max_stage_time, "--max-stage-time") if args.max_stage_time else None,
                        max_run_s=duration(args.max_run_time, "--max-run-time") if args.max_run_time else None)
        meta["ladder"] = plan.ladder
        meta["workloads"] = plan.workloads
        meta["targets"] = [{"label": t.label, "url": t.url, "protocol": t.protocol} for t in targets]
        writer = ResultsWriter(out / "run.json", meta)
        try:
            run_ramp(plan, writer)
            if args.refine and writer.run.get("cut") is None:  # a spent --max-run-time is not refined past
                _refine(plan, writer, args)
        except KeyboardInterrupt:
            log("interrupted: analysing the stages that finished")
            writer.finish(interrupted=True)
            if writer.stages:
                _analyse_and_report({"schema": "loadgen.run/1", "run": writer.run, "stages": writer.stages}, out, args)
            return 130
        except LoadgenError as exc:
            # e.g. a server that never became healthy mid-ladder: what was measured is kept and analysed
            if not writer.stages:
                raise
            log(f"error: {exc}")
            log("the run stopped there: analysing the stages that finished")
            writer.finish(interrupted=False, error=str(exc))
            _analyse_and_report({"schema": "loadgen.run/1", "run": writer.run, "stages": writer.stages}, out, args)
            return 1
        writer.finish(interrupted=False)
    return _analyse_and_report(load(out / "run.json"), out, args)


def _start_simulators(stack: ExitStack, args, meta: dict) -> tuple[str, str]:
    from loadgen.sim.process import SimProcess

    cpus = sorted(os.sched_getaffinity(0))
    sim_cpu = cpus[0] if len(cpus) > 1 else None
    urls = []
    for mode in ("baseline", "spec"):
        sim = stack.enter_context(SimProcess(profile=args.sim_profile, mode=mode, time_scale=args.sim_time_scale,
                                             seed=args.seed, cpu=sim_cpu))
        urls.append(sim.url)
    if sim_cpu is not None:
        os.sched_setaffinity(0, set(cpus[1:]))  # the client keeps the other cores
    # what it takes to recompute the traffic the simulators saw, for their own crossover (sim.known)
    meta["simulator"] = {"profile": args.sim_profile, "time_scale": args.sim_time_scale, "seed": args.seed,
                         "protocol": args.protocol, "max_tokens": args.max_tokens,
                         "prompt_tokens": args.prompt_tokens, "ignore_eos": args.ignore_eos,
                         "tokenizer": args.tokenizer}
    log(f"no URLs given: embedded simulators ({args.sim_profile}) baseline {urls[0]}, spec {urls[1]}")
    return urls[0], urls[1]


def _refine(plan: RampPlan, writer: ResultsWriter, args) -> None:
    budget = args.refine_budget
    while budget > 0:
        doc = {"schema": "loadgen.run/1", "run": writer.run, "stages": writer.stages}
        res = analyze_run(doc, [METRICS_BY_NAME[PRIMARY]], confidence=args.confidence)
        extra = []
        for wl, per in res["workloads"].items():
            if wl == "all" or PRIMARY not in per:
                continue
            a = _analysis_from_dict(per[PRIMARY]["analysis"])
            extra += [(wl, c) for c in refine_plan(a, args.refine_width, budget)]
        extra = extra[:budget]
        if not extra:
            return
        log(f"refining: adding {', '.join(f'{w}@C={c}' for w, c in extra)}")
        run_ramp(RampPlan(**{f.name: getattr(plan, f.name) for f in fields(plan)} | {"ladder": [], "workloads": []}),
                 writer, extra_stages=extra)
        budget -= len(extra)


def _analysis_from_dict(d: dict) -> MetricAnalysis:
    d = dict(d)
    d["comparisons"] = [StageComparison(**c) for c in d["comparisons"]]
    d["regions"] = [Region(**r) for r in d["regions"]]
    d["crossovers"] = [Crossover(**x) for x in d["crossovers"]]
    d["candidates"] = [Crossover(**x) for x in d.get("candidates", [])]
    return MetricAnalysis(**d)


def _analyse_and_report(doc: dict, out: Path, args) -> int:
    res = analyze_run(doc, confidence=args.confidence)
    sim = doc["run"].get("simulator")
    if sim and "seed" in sim:
        _simulator_truth(res, sim)
    out.mkdir(parents=True, exist_ok=True)
    (out / "crossover.json").write_bytes(orjson.dumps(res, option=orjson.OPT_INDENT_2))
    print(crossover_tables(res))
    if not args.no_report:
        try:
            from loadgen.report.html import render
        except ImportError:
            render = None
        if render is not None:
            html = render(out)
            log(f"report: {html}")
    log(f"results: {out / 'run.json'}, analysis: {out / 'crossover.json'}")
    return 0


def crossover_tables(res: dict, metric: str = PRIMARY) -> str:
    from loadgen.sim.known import verdict  # the simulator's modules only when a run has its truth

    from loadgen.report.html import winner_word

    lines = []
    for wl, per in res["workloads"].items():
        if metric not in per:
            cov = (res.get("coverage") or {}).get(wl, {})
            if cov.get("status") == "not compared":  # say so: an empty table would read as "no difference"
                lines.append(f"\nworkload {wl}: NOT COMPARED")
                lines.append(f"  • {cov.get('recommendation') or wl + ': not compared.'}")
            continue
        a = per[metric]["analysis"]
        unit = per[metric]["unit"]
        lines.append(f"\nworkload {wl}: {per[metric]['label']} ({unit}), {int(a['confidence'] * 100)} % intervals")
        head = ["C", res["baseline"], res["spec"], "Δ %", "interval", "winner"]
        rows = [head]
        for c in a["comparisons"]:
            d, lo, hi = c["delta"], c["ci_low"], c["ci_high"]
            rows.append([str(c["concurrency"]), f"{c['mean_baseline']:.1f}", f"{c['mean_spec']:.1f}",
                         "-" if d is None else f"{d * 100:+.1f}",
                         "-" if lo is None else f"[{lo * 100:+.1f}, {hi * 100:+.1f}]", winner_word(c)])
        w = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines += ["  ".join(v.rjust(wi) for v, wi in zip(r, w)) for r in rows]
        for name, m in per.items():
            lines.append(f"  • {m['recommendation']}")
        for k in per[metric].get("simulator_truth", []):
            mark, text = verdict(k)
            lines.append(f"  {mark} {text}")
    return "\n".join(lines)


def _simulator_truth(res: dict, sim: dict) -> None:
    """Beside each reported crossover of the embedded simulators, the one their cost model has."""
    from dataclasses import asdict

    from loadgen.sim.known import known_crossovers

    for wl, per in res["workloads"].items():
        if wl == "all" or PRIMARY not in per or not per[PRIMARY]["analysis"]["crossovers"]:
            continue
        try:
            found = known_crossovers(sim, wl, per[PRIMARY]["analysis"]["crossovers"], seed=sim["seed"])
        except LoadgenError as e:  # e.g. --from on a machine without the run's dataset file
            log(f"workload {wl}: the simulator's own crossover is not available ({e})")
            continue
        per[PRIMARY]["simulator_truth"] = [asdict(k) for k in found]

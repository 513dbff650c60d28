"""``loadgen crossover``: run (or read) a baseline-vs-speculative ramp and say where they cross."""

from __future__ import annotations

import argparse
import shutil
import sys
from contextlib import ExitStack
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable

import orjson

from loadgen import redact
from loadgen.analysis.compare import BY_NAME as METRICS_BY_NAME
from loadgen.analysis.compare import analyze_run
from loadgen.analysis.coverage import nothing_compared
from loadgen.analysis.crossover import MetricAnalysis, refine_plan
from loadgen.cli import front
from loadgen.client.target import Target
from loadgen.errors import LoadgenError
from loadgen.report.inputs import PRIMARY
from loadgen.report.terminal import any_compared, crossover_tables
from loadgen.run.orchestrate import ServerCommand
from loadgen.run.ramp import RampPlan, log, run_ramp
from loadgen.run.results import ResultsWriter, load
from loadgen.settings import config as cfgmod
from loadgen.settings import flags
from loadgen.settings import knobs as K
from loadgen.settings import parse, recorded
from loadgen.sim import profiles


def register(p: argparse.ArgumentParser) -> None:
    flags.register(p, "crossover")


def _flag_value(k: K.Knob, v):
    """A config value as its flag's value (None: the config leaves the flag alone)."""
    if v is None:
        return None
    if k.check == "ladder":
        return K.ladder_text(v)
    if k.check == "seconds":
        return f"{v}s"
    if k.check == "modes":  # the default pair is no choice of the file's: the flag's default stays
        return ",".join(v) if tuple(v) != cfgmod.SimConf().modes else None
    if k.check == "slo":
        return ",".join(f"{name}={x:g}" for name, x in v.items()) or None
    return v


def apply_config(args, path: str, d: dict) -> tuple[list, bool]:
    """Fill the flags the user left at their defaults ``d`` from a ramp config (every crossover knob
    with a TOML key, settings/knobs.py).

    Returns its targets (TargetConf list) and whether ``args.workload`` is the
    config's one workload (a mix such as "code:2,chat:1" is one, not two).
    """
    cfg = cfgmod.load(path)
    for name, k in K.knobs("crossover"):
        if not (k.toml and k.from_config) or getattr(args, name) != d.get(name):
            continue
        value = _flag_value(k, cfg.slo if k.toml == "slo" else cfgmod.get(cfg, k.attr))
        if value is not None:
            setattr(args, name, value)
    return cfg.targets, args.workload == cfg.workload


@dataclass
class Configuration:
    """One configuration to compare: its label, where it answers, how loadgen starts it (if it does)."""

    label: str
    url: str
    start: str | None = None
    adaptive: bool = False
    conf: cfgmod.TargetConf | None = None
    """Its [targets.X] table, when it comes from a --config."""


def configurations(args, targets_conf: list) -> list[Configuration] | None:
    """The configurations to compare, the reference first, from the flags or the config's [targets.*];
    None: the embedded simulators (``--sim-modes``). Every inconsistency is one line naming the flag."""
    given = parse.labelled(args.target, "--target", "URL")
    starts = parse.labelled(args.start, "--start", "CMD")
    adaptive = [parse.label(a, "--adaptive") for a in args.adaptive or []]
    pair = args.baseline_url or args.spec_url
    if given and (pair or args.url):
        raise LoadgenError("--target names each configuration's URL: give it or --url/--baseline-url/--spec-url, "
                           "not both")
    if starts and (args.baseline_start or args.spec_start):
        raise LoadgenError("--start LABEL=CMD and --baseline-start/--spec-start: give one form, not both")
    out: list[Configuration] = []
    if given:
        out = [Configuration(label, cfgmod.check_url(f"--target {label}", url)) for label, url in given]
    elif args.url is not None:
        if pair:
            raise LoadgenError("--url serves every target: give it or --baseline-url/--spec-url, not both")
        if starts:
            out = [Configuration(label, args.url, cmd) for label, cmd in starts]
        elif args.baseline_start and args.spec_start:
            out = [Configuration("baseline", args.url, args.baseline_start),
                   Configuration("spec", args.url, args.spec_start)]
        else:
            raise LoadgenError("--url needs --baseline-start and --spec-start (or --start LABEL=CMD for each "
                               "configuration): loadgen starts each server on that port in turn (for running "
                               "servers give --baseline-url and --spec-url, or --target LABEL=URL)")
        starts = []
    elif pair:
        if (args.baseline_url is None) != (args.spec_url is None):
            raise LoadgenError("give both --baseline-url and --spec-url, or neither (embedded simulator)")
        out = [Configuration("baseline", args.baseline_url, args.baseline_start),
               Configuration("spec", args.spec_url, args.spec_start)]
    elif targets_conf:
        out = [Configuration(tc.label, tc.url, tc.start, tc.adaptive, tc) for tc in targets_conf]
    if not out:
        if starts or args.baseline_start or args.spec_start:
            raise LoadgenError("a start command needs the URL its server answers on: --target LABEL=URL or --url")
        if adaptive:
            raise LoadgenError("--adaptive names a --target; on the embedded simulator the mode spec-adaptive is "
                               "adaptive by itself")
        return None
    if args.sim_modes:
        raise LoadgenError("--sim-modes chooses the embedded simulators: it does not go with --target or URLs")
    if len(out) < 2:
        where = f"{args.config}: targets" if targets_conf and not given else "--target"
        raise LoadgenError(f"{where}: at least two configurations to compare (the first is the reference), "
                           f"got {len(out)}")
    by_label = {c.label: c for c in out}
    for label, cmd in starts:
        if label not in by_label:
            raise LoadgenError(f"--start: {label!r} names no --target (known: {', '.join(by_label)})")
        by_label[label].start = cmd
    for label in adaptive:
        if label not in by_label:
            raise LoadgenError(f"--adaptive: {label!r} names no configuration (known: {', '.join(by_label)})")
        by_label[label].adaptive = True
    return out


def run(args) -> int:
    defaults = flags.defaults("crossover")
    args, resume_doc = front.resumed_args(args, "crossover", defaults)
    targets_conf, one_workload = apply_config(args, args.config, defaults) if args.config else ([], False)
    if args.from_:
        return _from_results(args, defaults)
    out = Path(args.out)
    configs = configurations(args, targets_conf)
    on_sim = configs is None
    adapt_window = args.duration is None and not args.requests
    # The simulator runs its schedule time-scaled, so shorter windows hold as many steps (settings/knobs.py).
    args.duration = args.duration or K.seconds_text(K.SIM_DURATION_S if on_sim else K.DURATION_S)
    args.warmup = args.warmup or K.seconds_text(K.SIM_WARMUP_S if on_sim else K.WARMUP_S)
    front.sigterm_like_ctrl_c()
    s = flags.typed(args, "crossover")
    front.check_resume(resume_doc, s, "crossover")
    opts = front.run_options(s)
    workloads = _workloads(s, one_workload)
    make_source = front.source_factory(s, workloads)  # a bad workload name fails here, before any server starts
    with ExitStack() as stack:
        meta: dict = {"command": "crossover", "argv": sys.argv[1:], "seed": s.seed, **front.open_meta(s),
                      "settings": recorded.record(s, "crossover")}
        if configs is None:
            configs = _simulators(stack, s, meta)
        commands = _server_commands(configs, args, out)
        targets = _targets(configs, s, args, defaults)
        labels = [c.label for c in configs]
        adaptive = [c.label for c in configs if c.adaptive]
        meta["roles"] = {"baseline": labels[0], "spec": labels[1]}
        meta["configurations"] = {"reference": labels[0], "candidates": labels[1:], "adaptive": adaptive}
        plan = front.ramp_plan(s, targets, workloads, make_source, opts, commands=commands,
                               adapt_window=adapt_window)
        meta["ladder"] = plan.ladder
        meta["workloads"] = plan.workloads
        meta["targets"] = front.target_meta(targets)
        writer = ResultsWriter(out / "run.json", meta, resume=resume_doc)
        front.probe_ahead(targets, commands, writer)
        outcome = front.drive(plan, writer, keep_on_error=True, then=_then(plan, writer, args, s))
    if outcome.status == "done":
        return _analyse_and_report(load(out / "run.json"), out, args)
    if outcome.status == "interrupted":
        log("interrupted: analysing the stages that finished")
    else:
        log(f"error: {outcome.error}")
        log("the run stopped there: analysing the stages that finished")
    if outcome.stages:
        _analyse_and_report(writer.doc(), out, args, stopped=True)
    return outcome.exit_code


def _from_results(args, defaults: dict) -> int:
    """``--from``: analyse and report a finished run (a results folder, its run.json or a Locust ramp's
    ramp.json), in its own folder or, given ``--out``, in that one."""
    path = Path(args.from_)
    doc = load(path / "run.json" if path.is_dir() else path)
    src = path if path.is_dir() else path.parent
    out = Path(args.out) if args.out != defaults["out"] else src
    if out.resolve() != src.resolve() or (path.is_file() and path.name != "run.json"):
        # The report reads the run from the folder it is written to: a new --out, or a Locust ramp's
        # ramp.json, gets a copy of the run's files (before, the analysis printed and then the report
        # failed: no run.json).
        out.mkdir(parents=True, exist_ok=True)
        run_json = path if path.is_file() else path / "run.json"
        shutil.copyfile(run_json, out / "run.json")
        for sibling in (run_json.with_suffix(".csv"), run_json.with_suffix(".hlog")):
            if sibling.is_file():
                shutil.copyfile(sibling, out / f"run{sibling.suffix}")
    return _analyse_and_report(doc, out, args)


def _workloads(s, one_workload: bool) -> list[str]:
    """The workloads to run (a config's one workload whole, a mix included; ``--trace``: the trace's own), with
    the open-loop and capacity flags checked: a wrong combination fails here, before any server starts."""
    if one_workload:
        workloads = [s.workload.strip()]
    else:
        workloads = [w.strip() for w in s.workload.split(",") if w.strip()]
    workloads = front.workloads_of(s, workloads)  # --trace: the trace's own
    front.open_plan(s)  # an open-loop flag in a wrong combination fails here, before any server starts
    if s.capacity and not (s.rate or s.trace):
        raise LoadgenError("--capacity searches rates: give a --rate ladder to start from")
    if s.capacity:
        from loadgen.analysis.rates import parse_slos

        parse_slos(s.capacity)
    return workloads


def _simulators(stack: ExitStack, s, meta: dict) -> list[Configuration]:
    """No URLs given: the embedded simulators, one per ``--sim-modes`` mode, started on ``stack``; ``meta`` gets
    what it takes to recompute the traffic they saw, for their own crossover (sim.known)."""
    modes = tuple(s.sim_modes or ("baseline", "spec"))
    urls = front.start_simulators(stack, s, modes)
    prof = profiles.load(s.sim_profile)  # the profile says which of its modes adapt on their own
    configs = [Configuration(m, u, adaptive=prof.is_adaptive(m)) for m, u in zip(modes, urls)]
    meta["simulator"] = {"profile": s.sim_profile, "time_scale": s.sim_time_scale, "seed": s.seed,
                         "protocol": s.protocol, "max_tokens": s.max_tokens,
                         "prompt_tokens": s.prompt_tokens, "ignore_eos": s.ignore_eos,
                         "tokenizer": s.tokenizer, "modes": {m: m for m in modes}}
    log(f"no URLs given: embedded simulators ({s.sim_profile}) "
        + ", ".join(f"{c.label} {c.url}" for c in configs))
    return configs


def _server_commands(configs: list[Configuration], args, out: Path) -> dict[str, ServerCommand]:
    """label → how loadgen starts and stops that configuration's server, for those it starts."""
    commands = {}
    for c in configs:
        if c.start:
            tc = c.conf
            commands[c.label] = ServerCommand(
                c.label, c.start, c.url.rstrip("/") + (tc.health if tc else args.health_path),
                stop_signal=tc.stop_signal if tc else "SIGINT",
                startup_timeout_s=tc.startup_timeout_s if tc else 900.0,
                log_path=out / f"{c.label}.server.log")
    return commands


def _targets(configs: list[Configuration], s, args, defaults: dict) -> list[Target]:
    """One Target per configuration: the flags', then a config's per-target settings unless a flag said otherwise."""
    targets = [Target(c.label, c.url, s.protocol, s.model, dict(s.header), s.spec_details) for c in configs]
    for t, c in zip(targets, configs):
        tc = c.conf
        if tc is None:
            continue
        if args.protocol == defaults["protocol"]:
            t.protocol = tc.protocol
        if args.model == defaults["model"]:
            t.model = tc.model
        if not args.header:
            t.headers = dict(tc.headers)
        t.spec_details = s.spec_details or tc.spec_details
    return targets


def _then(plan: RampPlan, writer: ResultsWriter, args, s) -> Callable[[], None] | None:
    """What runs after the ladder, or None: ``--refine`` (on the rate axis for an open loop), ``--capacity``'s
    search; a spent --max-run-time is not refined past."""
    if not (args.refine or (plan.open is not None and s.capacity)):
        return None

    def refine() -> None:
        if writer.run.get("cut") is None:  # a spent --max-run-time is not refined past
            if plan.open is not None:
                from loadgen.cli import rates

                if args.refine:
                    rates.refine(plan, writer, args)
                if s.capacity:
                    rates.search(plan, writer, args)
            else:
                _refine(plan, writer, args)

    return refine


def _refine(plan: RampPlan, writer: ResultsWriter, args) -> None:
    budget = args.refine_budget
    while budget > 0:
        doc = writer.doc()
        res = analyze_run(doc, [METRICS_BY_NAME[PRIMARY]], confidence=args.confidence)
        extra = []
        for wl, per in res["workloads"].items():
            if wl == "all" or PRIMARY not in per:
                continue
            for a in _refined(res, wl, per):
                extra += [(wl, c) for c in refine_plan(a, args.refine_width, budget) if (wl, c) not in extra]
        extra = extra[:budget]
        if not extra:
            return
        log(f"refining: adding {', '.join(f'{w}@C={c}' for w, c in extra)}")
        run_ramp(RampPlan(**{f.name: getattr(plan, f.name) for f in fields(plan)} | {"ladder": [], "workloads": []}),
                 writer, extra_stages=extra)
        budget -= len(extra)


def _refined(res: dict, wl: str, per: dict) -> list[MetricAnalysis]:
    """The comparisons whose crossovers refinement pins down: two configurations' one; with three or more,
    the pair of every switch of the throughput policy (the other pairs' crossovers choose nothing)."""
    r = (res.get("configs") or {}).get(wl, {}).get(PRIMARY)
    if r is None:
        return [MetricAnalysis.from_dict(per[PRIMARY]["analysis"])]
    out = []
    for w in r["switches"]:
        for p in r["pairs"]:
            if {p["a"], p["b"]} == {w["from_label"], w["to_label"]}:
                out.append(MetricAnalysis.from_dict(p["analysis"]))
    return out


def _analyse_and_report(doc: dict, out: Path, args, stopped: bool = False) -> int:
    """Analyse, print the answer, write crossover.json and the page; 1 when nothing could be compared (said in one
    line; ``stopped``: the run already said why it ended, so the line is not a second error)."""
    from loadgen.analysis.rates import is_rate_run

    if is_rate_run(doc):
        from loadgen.cli import rates

        return rates.report(doc, out, args)
    res = analyze_run(doc, confidence=args.confidence)
    sim = doc["run"].get("simulator")
    if sim and "seed" in sim:
        # the prompt seed is the run's (a Locust ramp's simulator block carries the simulator's own seed)
        _simulator_truth(res, sim, doc["run"].get("seed", sim["seed"]))
    out.mkdir(parents=True, exist_ok=True)
    (out / "crossover.json").write_bytes(orjson.dumps(redact.document(res), option=orjson.OPT_INDENT_2))
    if not any_compared(res):
        # one line, not a table of dashes and a screen of flags: the stages are in run.json, the flags in the report
        print(f"loadgen: {'' if stopped else 'error: '}{nothing_compared(doc)}", file=sys.stderr)
        code = 1
    else:
        print(crossover_tables(res, doc=doc, verbose=args.verbose))
        code = 0
    if not args.no_report:
        try:
            from loadgen.report.html import render
        except ImportError:
            render = None
        if render is not None:
            html = render(out)
            log(f"report: {html}")
    log(f"results: {out / 'run.json'}, analysis: {out / 'crossover.json'}")
    return code


def _simulator_truth(res: dict, sim: dict, seed: int) -> None:
    """Beside each reported crossover of the embedded simulators, the one their cost model has."""
    from dataclasses import asdict

    from loadgen.sim.known import known_crossovers

    if res.get("configs"):
        _switch_truth(res, sim, seed)
        return
    for wl, per in res["workloads"].items():
        if wl == "all" or PRIMARY not in per or not per[PRIMARY]["analysis"]["crossovers"]:
            continue
        try:
            found = known_crossovers(sim, wl, per[PRIMARY]["analysis"]["crossovers"], seed=seed)
        except LoadgenError as e:  # e.g. --from on a machine without the run's dataset file
            log(f"workload {wl}: the simulator's own crossover is not available ({e})")
            continue
        per[PRIMARY]["simulator_truth"] = [asdict(k) for k in found]


def _switch_truth(res: dict, sim: dict, seed: int) -> None:
    """Beside each switch of the policy the embedded simulators' own, for three or more configurations."""
    from dataclasses import asdict

    from loadgen.sim.known import known_switches

    modes = sim.get("modes") or {}
    for wl, per in res["configs"].items():
        r = per.get(PRIMARY)
        if wl == "all" or r is None:
            continue
        sws = [{"from": w["from_label"], "to": w["to_label"], "estimate": w["estimate"], "ci_low": w["ci_low"],
                "ci_high": w["ci_high"], "low_c": w["low_c"], "high_c": w["high_c"]}
               for w in r["switches"] if w["confirmed"] and w["estimate"] is not None
               and w["from_label"] in modes and w["to_label"] in modes]
        if not sws:
            continue
        try:
            found = known_switches(sim, wl, modes, sws, seed=seed)
        except LoadgenError as e:
            log(f"workload {wl}: the simulator's own switch points are not available ({e})")
            continue
        r["simulator_truth"] = [asdict(k) for k in found]

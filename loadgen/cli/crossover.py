"""``loadgen crossover``: run (or read) a baseline-vs-speculative ramp and say where they cross."""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from contextlib import ExitStack
from dataclasses import fields
from pathlib import Path
from typing import Callable


from loadgen.analysis.compare import BY_NAME as METRICS_BY_NAME
from loadgen.analysis.answer import RATE, analyse, write
from loadgen.analysis.compare import RunAnalysis, run_analysis
from loadgen.analysis.coverage import nothing_compared
from loadgen.analysis.crossover import MetricAnalysis, refine_plan
from loadgen.cli import front
from loadgen.client.target import Target
from loadgen.errors import LoadgenError
from loadgen.report.inputs import PRIMARY
from loadgen.report.terminal import any_compared, crossover_tables, rate_tables
from loadgen.run.orchestrate import ServerCommand
from loadgen.run.ramp import RampPlan, log, run_ramp
from loadgen.run.results import ResultsWriter, load
from loadgen.settings import config as cfgmod
from loadgen.settings import flags
from loadgen.settings import knobs as K
from loadgen.settings import recorded
from loadgen.settings.knobs import Settings
from loadgen.settings.targets import Configuration, configurations
from loadgen.sim import profiles


EXAMPLES = """examples:
  loadgen crossover --ladder 1,10,30 --duration 3s
      the embedded simulator (no GPU): a ramp and a verdict in about a minute
  loadgen crossover --baseline-url http://gpu:30000 --spec-url http://gpu:30001 \\
      --workload predictable,chat,freetext --max-run-time 30m
      two SGLang servers (native /generate), three kinds of prompts, half an hour
  loadgen crossover --baseline-url http://gpu:8000 --spec-url http://gpu:8001 \\
      --protocol chat --model Qwen/Qwen3-8B
      two vLLM servers: the OpenAI chat route and the served model's name
  loadgen crossover --from results/crossover
      the analysis and report again, from a finished run's folder
(docs/guide.md: every option; docs/real-servers.md: exact server commands)"""


def register(p: argparse.ArgumentParser) -> None:
    p.usage = "%(prog)s [options]   (the options most runs set come first, under 'common')"
    p.epilog = EXAMPLES
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    flags.register(p, "crossover")


def run(args) -> int:
    args, resume_doc = front.resumed_args(args, "crossover", flags.defaults("crossover"))
    s = flags.typed(args, "crossover")  # the flags parsed once; below here only the typed settings
    defaults = flags.typed_defaults("crossover")
    cfg = cfgmod.load(s.config) if s.config else None
    if cfg is not None:
        cfgmod.overlay(s, cfg, defaults, "crossover")
    if s.from_:
        return _from_results(s, defaults)
    out = front.out_folder(s.out)
    configs = configurations(s, cfg.targets if cfg else [])
    n_configs = len(configs) if configs is not None else len(s.sim_modes or ("baseline", "spec"))
    _check_passes(s, n_configs)
    on_sim = configs is None
    adapt_window = s.duration is None and not s.requests
    # The simulator runs its schedule time-scaled, so shorter windows hold as many steps (settings/knobs.py).
    s.duration = s.duration or (K.SIM_DURATION_S if on_sim else K.DURATION_S)
    s.warmup = s.warmup if s.warmup is not None else (K.SIM_WARMUP_S if on_sim else K.WARMUP_S)
    front.check_budget(s, n_configs)
    front.sigterm_like_ctrl_c()
    front.check_resume(resume_doc, s, "crossover")
    opts = front.run_options(s)
    workloads = _workloads(s, cfg is not None and s.workload == cfg.workload)
    make_source = front.source_factory(s, workloads)  # a bad workload name fails here, before any server starts
    with ExitStack() as stack:
        meta: dict = {"command": "crossover", "argv": sys.argv[1:], "seed": s.seed, **front.open_meta(s),
                      "settings": recorded.record(s, "crossover")}
        if configs is None:
            configs = _simulators(stack, s, meta)
        commands = _server_commands(configs, s, out)
        front.check_commands(commands)
        targets = _targets(configs, s, defaults)
        labels = [c.label for c in configs]
        adaptive = [c.label for c in configs if c.adaptive]
        meta["roles"] = {"baseline": labels[0], "spec": labels[1]}
        meta["configurations"] = {"reference": labels[0], "candidates": labels[1:], "adaptive": adaptive}
        plan = front.ramp_plan(s, targets, workloads, make_source, opts, commands=commands,
                               adapt_window=adapt_window)
        meta["ladder"] = plan.ladder
        meta["workloads"] = plan.workloads
        meta["targets"] = front.target_meta(targets)
        if s.passes > 1:  # the analysis judges every point at the level these looks leave it (analysis/sequential)
            meta["looks"] = s.passes
        meta["tie"] = s.tie
        found = front.probe_ahead(targets, commands, s.wait_for_server)  # a target that does not answer: nothing written
        writer = ResultsWriter(out / "run.json", meta, resume=resume_doc)
        front.record_probes(writer, targets, found)
        outcome = front.drive(plan, writer, keep_on_error=True, then=_then(plan, writer, s))
    if outcome.status == "done":
        return _analyse_and_report(load(out / "run.json"), out, s)
    if outcome.status == "interrupted":
        log("interrupted: analysing the stages that finished")
    else:
        log(f"error: {outcome.error}")
        log("the run stopped there: analysing the stages that finished")
    if outcome.stages:
        _analyse_and_report(writer.doc(), out, s, stopped=True)
    return outcome.exit_code


def _from_results(s: Settings, defaults: Settings) -> int:
    """``--from``: analyse and report a finished run (a results folder, its run.json or a Locust ramp's
    ramp.json), in its own folder or, given ``--out``, in that one."""
    path = Path(s.from_)
    doc = load(path / "run.json" if path.is_dir() else path)
    src = path if path.is_dir() else path.parent
    out = front.out_folder(s.out) if s.out != defaults.out else src
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
    return _analyse_and_report(doc, out, s)


def split_workloads(text: str) -> list[str]:
    """``--workload a,b,phases:x@8s,y@8s`` → ["a", "b", "phases:x@8s,y@8s"]: the list at its commas, but a
    ``phases:`` spec keeps the NAME@DUR items after it (loadgen/workloads/phases.py)."""
    from loadgen.workloads.phases import PREFIX

    out: list[str] = []
    for item in (w.strip() for w in text.split(",")):
        if not item:
            continue
        if out and out[-1].startswith(PREFIX) and "@" in item and not item.startswith(PREFIX):
            out[-1] += "," + item
        else:
            out.append(item)
    return out


def _workloads(s, one_workload: bool) -> list[str]:
    """The workloads to run (a config's one workload whole, a mix included; ``--trace``: the trace's own), with
    the open-loop and capacity flags checked: a wrong combination fails here, before any server starts."""
    if one_workload:
        workloads = [s.workload.strip()]
    else:
        workloads = split_workloads(s.workload)
    workloads = front.workloads_of(s, workloads)  # --trace: the trace's own
    front.open_plan(s)  # an open-loop flag in a wrong combination fails here, before any server starts
    if s.capacity and not (s.rate or s.trace):
        raise LoadgenError("--capacity searches rates: give a --rate ladder to start from")
    if s.capacity:
        from loadgen.analysis.rates import parse_slos

        parse_slos(s.capacity)
    return workloads


def _check_passes(s: Settings, n_configs: int) -> None:
    """``--passes`` in a combination it cannot serve: one line, before any server starts."""
    if s.passes <= 1:
        return
    if (s.repeat or 1) > 1:
        raise LoadgenError("--passes and --repeat: give one (--repeat runs every load point in every pass; "
                           "--passes runs a later pass only where the answer is still open)")
    if s.rate or s.trace:
        raise LoadgenError("--passes is for a ladder of concurrencies: the rate analysis reads one stage per rate")
    if n_configs > 2:
        raise LoadgenError(f"--passes compares two configurations, not {n_configs}: with three or more, which "
                           "points are open is not one comparison's")


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
                         "tokenizer": s.tokenizer, "modes": {m: m for m in modes},
                         "prefix_cache": s.sim_prefix_cache or 0, "sessions": front.session_spec(s).to_dict()}
    log(f"no URLs given: embedded simulators ({s.sim_profile}) "
        + ", ".join(f"{c.label} {c.url}" for c in configs))
    return configs


def _server_commands(configs: list[Configuration], s: Settings, out: Path) -> dict[str, ServerCommand]:
    """label → how loadgen starts and stops that configuration's server, for those it starts."""
    commands = {}
    for c in configs:
        if c.start:
            tc = c.conf
            commands[c.label] = ServerCommand(
                c.label, c.start, c.url.rstrip("/") + (tc.health if tc else s.health_path),
                stop_signal=tc.stop_signal if tc else "SIGINT",
                startup_timeout_s=tc.startup_timeout_s if tc else 900.0,
                log_path=out / f"{c.label}.server.log")
    return commands


def _targets(configs: list[Configuration], s: Settings, defaults: Settings) -> list[Target]:
    """One Target per configuration: the flags', then a config's per-target settings unless a flag said otherwise."""
    targets = [Target(c.label, c.url, s.protocol, s.model, dict(s.header), s.spec_details) for c in configs]
    for t, c in zip(targets, configs):
        tc = c.conf
        if tc is None:
            continue
        if s.protocol == defaults.protocol:
            t.protocol = tc.protocol
        if s.model == defaults.model:
            t.model = tc.model
        if not s.header:
            t.headers = dict(tc.headers)
        t.spec_details = s.spec_details or tc.spec_details
    return targets


def _then(plan: RampPlan, writer: ResultsWriter, s: Settings) -> Callable[[], None] | None:
    """What runs after the ladder, or None: ``--passes``' later passes over the points still open, ``--refine``
    (on the rate axis for an open loop), ``--capacity``'s search; a spent --max-run-time is not run past."""
    if not (s.refine or (plan.open is not None and s.capacity) or s.passes > 1):
        return None

    def refine() -> None:
        if writer.run.get("cut") is None and s.passes > 1:
            _passes(plan, writer, s)
        if writer.run.get("cut") is None and (s.refine or (plan.open is not None and s.capacity)):
            if plan.open is not None:
                from loadgen.cli import rates

                if s.refine:
                    rates.refine(plan, writer, s)
                if s.capacity:
                    rates.search(plan, writer, s)
            else:
                _refine(plan, writer, s)

    return refine


def _left_s(writer: ResultsWriter, s: Settings) -> float | None:
    """What is left of --max-run-time for rounds after the ladder (None: no budget)."""
    if not s.max_run_time:
        return None
    return s.max_run_time - (time.time() - writer.run["started_unix"])


def _round(plan: RampPlan, writer: ResultsWriter, s: Settings, extra: list[tuple]) -> None:
    """Run ``extra`` stages (run/order.stage_order's) after the ladder, within what is left of the budget."""
    left = _left_s(writer, s)
    run_ramp(RampPlan(**{f.name: getattr(plan, f.name) for f in fields(plan)}
                      | {"ladder": [], "workloads": [], "max_run_s": None if left is None else max(left, 0.001)}),
             writer, extra_stages=extra)


def open_points(doc: dict, s: Settings) -> list[tuple[str, int]]:
    """(workload, C) of the load points whose deciding comparison is still open (analysis/sequential.ending) at
    the level the run's planned looks leave each one."""
    from loadgen.analysis.compare import deciding_metric
    from loadgen.analysis.sequential import OPEN, ending

    decides = deciding_metric(doc)
    ra = run_analysis(doc, [METRICS_BY_NAME[decides]], confidence=s.confidence)
    return [(wl, c.concurrency) for wl, per in ra.workloads.items() if wl != "all" and decides in per
            for c in per[decides].analysis.comparisons if ending(c).kind == OPEN]


def _passes(plan: RampPlan, writer: ResultsWriter, s: Settings) -> None:
    """``--passes N``: after each pass, another over the load points still open, both targets at each (their
    windows pooled with the earlier passes', each pass its own prompts), until none is open, N passes ran or the
    budget is spent. Each pass is logged in run.json's ``passes``: which points it ran."""
    steps = {c: i for i, c in enumerate(plan.ladder)}
    for k in range(1, s.passes):
        todo = [(wl, c) for wl, c in open_points(writer.doc(), s) if c in steps]
        if not todo:
            log(f"every load point decided or tied after pass {k} of at most {s.passes}")
            return
        log(f"pass {k + 1}/{s.passes}: {len(todo)} load point(s) still open: "
            + ", ".join(f"{wl}@C={c}" for wl, c in todo))
        writer.run.setdefault("passes", []).append({"pass": k, "points": [[wl, c] for wl, c in todo]})
        _round(plan, writer, s, [(wl, c, steps[c], k) for wl, c in todo])
        if writer.run.get("cut") is not None:
            return


def _refine(plan: RampPlan, writer: ResultsWriter, s: Settings) -> None:
    budget = s.refine_budget
    while budget > 0:
        doc = writer.doc()
        ra = run_analysis(doc, [METRICS_BY_NAME[PRIMARY]], confidence=s.confidence)
        extra = []
        for wl, per in ra.workloads.items():
            if wl == "all" or PRIMARY not in per:
                continue
            for a in _refined(ra, wl):
                extra += [(wl, c) for c in refine_plan(a, s.refine_width, budget) if (wl, c) not in extra]
        extra = extra[:budget]
        if not extra:
            return
        log(f"refining: adding {', '.join(f'{w}@C={c}' for w, c in extra)}")
        _round(plan, writer, s, extra)
        budget -= len(extra)


def _refined(ra: RunAnalysis, wl: str) -> list[MetricAnalysis]:
    """The comparisons whose crossovers refinement pins down: two configurations' one; with three or more,
    the pair of every switch of the throughput policy (the other pairs' crossovers choose nothing)."""
    r = ra.configs.get(wl, {}).get(PRIMARY)
    if r is None:
        return [ra.workloads[wl][PRIMARY].analysis]
    return [p.analysis for w in r.switches for p in r.pairs if {p.a, p.b} == {w.from_label, w.to_label}]


def _analyse_and_report(doc: dict, out: Path, s: Settings, stopped: bool = False) -> int:
    """Analyse, print the answer, write crossover.json (rates.json for an open loop) and the page; 1 when nothing
    could be compared (said in one line; ``stopped``: the run already said why it ended, so the line is not a second
    error)."""
    from loadgen.analysis.rates import parse_slos

    answer = analyse(doc, confidence=s.confidence, slos=parse_slos(s.capacity) if s.capacity else [])
    for line in answer.notes:
        log(line)
    path = write(out, answer)
    res = answer.result
    if answer.axis == RATE:
        print(rate_tables(res))
        code = 0
    elif not any_compared(res):
        # one line, not a table of dashes and a screen of flags: the stages are in run.json, the flags in the report
        print(f"loadgen: {'' if stopped else 'error: '}{nothing_compared(doc)}", file=sys.stderr)
        code = 1
    else:
        print(crossover_tables(res, doc=doc, verbose=s.verbose))
        code = 0
    if not s.no_report:
        from loadgen.report.html import render

        log(f"report: {render(out, doc=doc, res=res)}")
    log(f"results: {out / 'run.json'}, analysis: {path}")
    return code

"""What ``loadgen run`` and ``loadgen crossover`` share: typed settings in, a ramp run and its results out.

In: a typed :class:`~loadgen.settings.knobs.Settings` (settings/flags.typed), the targets, the
workloads. Out: the request sources and run options built from the settings, the embedded
simulators started (pinned to a core of their own), the targets probed, the RampPlan, and
the ramp run to its end, its interruption or its error, with the results file closed each way.
``loadgen run`` is a ramp of one target built here the same way as the crossover's two.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from loadgen import redact
from loadgen.client.stream import Timeouts
from loadgen.client.target import Target
from loadgen.errors import LoadgenError
from loadgen.run.orchestrate import ServerCommand
from loadgen.run.probe import probe_target
from loadgen.run.order import LEAST_WINDOW_S, OpenPlan, least_stage_s
from loadgen.run.ramp import RampPlan, run_ramp
from loadgen.run.results import ResultsWriter, load_for_resume
from loadgen.run.spec import RunOptions
from loadgen.settings import flags, recorded
from loadgen.settings.knobs import Settings


def resumed_args(args, command: str, defaults: dict) -> tuple[argparse.Namespace, dict | None]:
    """``--resume``: the flags to go on with, and the interrupted run's document (None without --resume).

    Given alone (or with its own --out), the run's flags as run.json recorded them; else the flags given,
    which must ask for the same run (:func:`check_resume`, once they are typed and their defaults filled).
    The results go on in the run's own folder."""
    if not args.resume:
        return args, None
    if getattr(args, "from_", None):
        raise LoadgenError("--resume runs what an interrupted run left; --from analyses a finished one: give one")
    path, doc = load_for_resume(args.resume, command)
    where = path.parent
    if args.out != defaults["out"] and Path(args.out).resolve() != where.resolve():
        raise LoadgenError(f"--out {args.out}: a resumed run goes on where it was, {where}")
    if all(getattr(args, n) == v for n, v in defaults.items() if n not in recorded.NOT_COMPARED):
        own = {n: getattr(args, n) for n in defaults if n in recorded.NOT_COMPARED}  # e.g. --no-report
        p = argparse.ArgumentParser(prog=f"loadgen {command}")
        flags.register(p, command)
        old = flags.current_names(list(doc["run"].get("argv") or []), command)  # recorded before a rename
        if any(redact.MASK in str(a) for a in old):
            raise LoadgenError(f"--resume {path}: its recorded flags hold credentials, written masked: give the "
                               "run's flags again")
        try:
            args = p.parse_args(old[1:] if old and not old[0].startswith("-") else old)  # its subcommand
        except SystemExit:
            raise LoadgenError(f"--resume {path}: its recorded flags do not parse any more; give them") from None
        for n, v in own.items():
            if v != defaults[n]:
                setattr(args, n, v)
    args.resume = str(path)
    args.out = str(where)
    return args, doc


def out_folder(out: str) -> Path:
    """``--out``: a folder in every command (run.json and what goes beside it are written in it)."""
    p = Path(out)
    if p.is_file() or p.suffix == ".json":
        raise LoadgenError(f"--out {out}: a folder is expected (run.json and its companions are written in it)")
    return p


def check_resume(doc: dict | None, s: Settings, command: str) -> None:
    """A resumed run must be asked exactly as it was: compared typed, so the flags' order does not matter."""
    if doc is None:
        return
    diff = recorded.difference(doc["run"]["settings"], s, command)
    if diff is not None:
        raise LoadgenError(f"--resume: not the interrupted run's settings: {diff}")


def sigterm_like_ctrl_c() -> None:
    """SIGTERM ends the run as Ctrl-C does (during a stage the event loop takes both)."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)


def source_factory(s: Settings, workloads: list[str]) -> Callable[[str], Callable]:
    """workload spec → its request iterator (a bound method of a plain object: worker processes unpickle it).

    Every workload resolves now: a bad name fails before any server starts."""
    from loadgen.workloads import Lengths, resolve

    lengths = Lengths.parse(s.prompt_tokens, s.max_tokens, s.tokenizer, s.ignore_eos)
    traced = trace_workload(s, lengths) if s.trace else None

    def make_source(spec: str):
        if traced is not None and spec == traced.name:
            return traced.requests
        return resolve(spec, lengths).requests

    for w in workloads:
        make_source(w)
    return make_source


def trace_workload(s: Settings, lengths=None):
    """--trace: the trace's requests, prompts from --workload's text at the trace's lengths."""
    from loadgen.workloads import Lengths
    from loadgen.workloads.traced import TraceWorkload

    lengths = lengths or Lengths.parse(s.prompt_tokens, s.max_tokens, s.tokenizer, s.ignore_eos)
    return TraceWorkload(trace_of(s), base=s.workload or "freetext", tokenizer=lengths.tokenizer)


def workloads_of(s: Settings, workloads: list[str]) -> list[str]:
    """The workloads a run's stages carry: with --trace the trace's one (named trace:NAME)."""
    return [trace_workload(s).name] if s.trace else workloads


def run_options(s: Settings) -> RunOptions:
    if s.processes is not None and s.processes < 1:
        raise LoadgenError(f"--processes must be >= 1, got {s.processes}")
    tokenizer = None
    if s.tokenizer:
        from loadgen.client.tokencount import load_counter

        tokenizer = load_counter(s.tokenizer)
    return RunOptions(slo=s.slo, timeouts=Timeouts(read_s=s.read_timeout), tokenizer=tokenizer, seed=s.seed,
                      sessions=session_spec(s))


def session_spec(s: Settings):
    """--turns, --think-time, --shared-prefix and --prefix-ratio as a SessionSpec, checked before any load: a
    bad one, or sessions of several turns on an open-loop ladder, is one line naming the flag."""
    from loadgen.run.pacing import check_open_sessions
    from loadgen.workloads.sessions import SessionSpec

    spec = SessionSpec(turns=s.turns or 1, think_s=s.think_time or 0.0, shared_prefix=s.shared_prefix or 0,
                       prefix_ratio=1.0 if s.prefix_ratio is None else s.prefix_ratio)
    if s.rate or s.trace:
        check_open_sessions(spec)
    return spec


def start_simulators(stack: ExitStack, s: Settings, modes: tuple[str, ...]) -> list[str]:
    """One embedded simulator per mode, on the first core when there are two or more (the client keeps the
    others: on one shared core the simulator's step timing and the client's stamps disturb each other)."""
    from loadgen.sim.process import SimProcess

    from loadgen.sim import profiles

    # before any simulator starts; loadgen run's one is its --sim-mode (a crossover's Settings have none)
    try:
        profile = profiles.load(s.sim_profile)
    except LoadgenError as exc:
        raise LoadgenError(f"--sim-profile: {exc}") from None
    profile.check_modes(modes, "--sim-mode" if s.sim_mode is not None else "--sim-modes")
    cpus = sorted(os.sched_getaffinity(0))
    sim_cpu = cpus[0] if len(cpus) > 1 else None
    urls = [stack.enter_context(SimProcess(profile=s.sim_profile, mode=mode, time_scale=s.sim_time_scale,
                                           seed=s.seed, cpu=sim_cpu, metrics_flavour=s.sim_metrics_flavour,
                                           faults=s.sim_faults, prefix_cache=s.sim_prefix_cache or 0)).url
            for mode in modes]
    if sim_cpu is not None:
        os.sched_setaffinity(0, set(cpus[1:]))
    return urls


WAIT_POLL_S = 0.5
"""--wait-for-server: how often a target that does not answer yet is asked again."""


def probe_ahead(targets: list[Target], commands: dict[str, ServerCommand], wait_s: float | None = None) -> dict:
    """Probe each target loadgen does not start itself, before anything is written or sent: one that does not
    answer is a LoadgenError naming its URL and why, unless ``wait_s`` (--wait-for-server): then it is asked again
    every :data:`WAIT_POLL_S` until it answers or that time has passed. First each must accept a connection (nothing
    listens: found before any request goes to another target), then answer HTTP on /v1/models (not a 503, what a
    llama.cpp server answers while it loads). A started server is waited for by its start (run/orchestrate.py) and
    probed once up (run/ramp.py). Returns label → ServerProbe, for :func:`record_probes`; each probe has switched
    on what its engine needs (run/probe.probe_target)."""
    import time

    from loadgen.run.order import fmt_s
    from loadgen.run.probe import refused

    deadline = time.monotonic() + (wait_s or 0.0)

    def until(t: Target, why_not: Callable[[], tuple[str, object]]):
        """``why_not()``'s value once its reason is "", asked again while --wait-for-server leaves time."""
        name = f"{t.label} at " if len(targets) > 1 else ""
        said = False
        while True:
            reason, value = why_not()
            if not reason:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                if wait_s:
                    raise LoadgenError(f"{name}{redact.url(t.url)} does not answer ({reason}) after waiting "
                                       f"{fmt_s(wait_s)} (--wait-for-server)")
                raise LoadgenError(f"{name}{redact.url(t.url)} does not answer ({reason}): start it first, or "
                                   "give --wait-for-server T to wait for a server still loading")
            if not said:
                print(f"loadgen: waiting up to {fmt_s(left)} for {name}{redact.url(t.url)} to answer ({reason})",
                      file=sys.stderr, flush=True)
                said = True
            time.sleep(min(WAIT_POLL_S, left))

    asked = [t for t in targets if t.label not in commands]
    for t in asked:
        until(t, lambda: (refused(t.url), None))
    found = {}
    for t in asked:
        def answer(t=t):
            p = probe_target(t)
            return ("" if p.answers else p.reason or p.error or "no answer"), p
        found[t.label] = until(t, answer)
    return found


def record_probes(writer: ResultsWriter, targets: list[Target], found: dict) -> None:
    """What :func:`probe_ahead` found, in run.json (its servers, and each target's ``server``)."""
    servers = writer.run.setdefault("servers", {})
    for t, meta in zip(targets, writer.run.get("targets", [])):
        p = found.get(t.label)
        if p is None:
            continue
        if p.error:
            print(f"loadgen: warning: {redact.url(t.url)}: what the server is may be missing from the results "
                  f"({p.error})", file=sys.stderr)
        meta["server"] = servers[t.label] = p.to_dict()
    writer.flush()


def check_budget(s: Settings, n_configs: int) -> None:
    """--max-run-time that cannot buy one round, each configuration once at the first load point (a stage needs its
    minimum warm-up and a second of window: run/order.Schedule.least_s), is one line before any load: such a run
    would end having measured nothing, or one configuration alone (nothing compared)."""
    if not s.max_run_time:
        return
    least = least_stage_s(s.warmup or 0.0)
    need = n_configs * least
    if s.max_run_time < need:
        what = (f"one stage ({least:g} s: its {s.warmup or 0:g} s warm-up and {LEAST_WINDOW_S:g} s of window)"
                if n_configs == 1 else
                f"one round of the first load point ({n_configs} configurations x ({s.warmup or 0:g} s warm-up + "
                f"{LEAST_WINDOW_S:g} s of window) = {need:g} s)")
        raise LoadgenError(f"--max-run-time: {s.max_run_time:g} s is too short for {what}")


def check_commands(commands: dict[str, ServerCommand]) -> None:
    """Each start command parses and its program exists, before any server starts: a typo is one line naming the
    configuration, not the first server's start, its wait and an error after it."""
    import shutil

    for label, cmd in commands.items():
        prog = cmd.argv()[0]
        if not (os.access(prog, os.X_OK) if os.sep in prog else shutil.which(prog)):
            where = "no such executable file" if os.sep in prog else "not found on PATH"
            raise LoadgenError(f"the start command of {label}: {prog!r}: {where}")


def target_meta(targets: list[Target]) -> list[dict]:
    return [{"label": t.label, "url": t.url, "protocol": t.protocol} for t in targets]


def open_plan(s: Settings) -> OpenPlan | None:
    """The open-loop ladder the settings ask for (--rate, or --trace with its speeds), or None."""
    if s.rate and s.trace:
        raise LoadgenError("--rate and --trace: give one (a trace brings its own rate; --trace-speed scales it)")
    if s.trace_speed and not s.trace:
        raise LoadgenError("--trace-speed needs --trace")
    if s.max_in_flight is not None and s.max_in_flight < 1:
        raise LoadgenError(f"--max-in-flight must be >= 1, got {s.max_in_flight}")
    if s.max_in_flight is not None and not (s.rate or s.trace):
        raise LoadgenError("--max-in-flight is for open-loop stages: give --rate or --trace")
    if s.max_dispatch_lag is not None and not s.max_dispatch_lag > 0:
        raise LoadgenError(f"--max-dispatch-lag must be > 0 ms, got {s.max_dispatch_lag:g}")
    if (s.repeat or 1) > 1 and (s.rate or s.trace):
        raise LoadgenError("--repeat is for a ladder of concurrencies: the rate analysis reads one stage per rate "
                           "(run an open-loop ladder again with another --out and compare the folders)")
    if not (s.rate or s.trace):
        return None
    times = None
    if s.trace:
        times = tuple(trace_of(s).times())
    return OpenPlan(arrival=s.arrival or "poisson", max_in_flight=s.max_in_flight or 0,
                    max_lag_ms=s.max_dispatch_lag or 10.0, trace_times=times)


def trace_of(s: Settings):
    from loadgen.timing.trace import load_trace

    return load_trace(s.trace)


def ladder_of(s: Settings) -> list:
    """The ladder's values: rates (--rate), trace speeds (--trace, default 1) or concurrencies."""
    if s.trace:
        return list(s.trace_speed or [1.0])
    return list(s.rate) if s.rate else s.ladder


def open_meta(s: Settings) -> dict:
    """run.json's ``run.open_loop``: the ladder's kind and how it was drawn (the analysis reads its axis here)."""
    if not (s.rate or s.trace):
        return {}
    return {"open_loop": {"axis": "trace speed" if s.trace else "rate", "arrival": "trace" if s.trace else s.arrival,
                          "max_in_flight": s.max_in_flight, "max_dispatch_lag_ms": s.max_dispatch_lag,
                          "trace": s.trace, "ladder": ladder_of(s)}}


def ramp_plan(s: Settings, targets: list[Target], workloads: list[str], make_source, opts: RunOptions, *,
              commands: dict[str, ServerCommand] | None = None, adapt_window: bool = False) -> RampPlan:
    return RampPlan(targets=targets, ladder=ladder_of(s), open=open_plan(s),
                    climb_past_saturation=bool(s.past_saturation), workloads=workloads, make_source=make_source, opts=opts,
                    duration_s=None if s.requests else s.duration, requests=s.requests, warmup_s=s.warmup,
                    processes=s.processes, loop=s.loop, commands=commands or {}, adapt_window=adapt_window,
                    max_stage_s=s.max_stage_time, max_run_s=s.max_run_time,
                    server_metrics_interval=s.server_metrics_interval, reset_cache=bool(s.reset_cache),
                    repeat=s.repeat or 1, looks=s.passes or 1)


@dataclass
class Outcome:
    status: str
    """"done", "interrupted" (Ctrl-C or SIGTERM) or "error" (a LoadgenError after some stages: they are kept)."""
    stages: list[dict]
    error: str | None = None

    @property
    def exit_code(self) -> int:
        return {"done": 0, "interrupted": 130, "error": 1}[self.status]


def drive(plan: RampPlan, writer: ResultsWriter, *, then: Callable[[], None] | None = None,
          keep_on_error: bool = False) -> Outcome:
    """Run the ramp (then ``then``, e.g. refinement rounds) and close the results file however it ends.

    ``keep_on_error``: a LoadgenError once stages were measured (a server that never became healthy
    mid-ladder) ends the run with what was measured; otherwise it propagates (one error line, status 2)."""
    try:
        done = run_ramp(plan, writer)
        if then is not None:
            then()
    except KeyboardInterrupt:
        writer.finish(interrupted=True)
        return Outcome("interrupted", writer.stages)
    except LoadgenError as exc:
        if not (keep_on_error and writer.stages):
            raise
        writer.finish(interrupted=False, error=str(exc))
        return Outcome("error", writer.stages, str(exc))
    writer.finish(interrupted=False)
    return Outcome("done", done if then is None else writer.stages)

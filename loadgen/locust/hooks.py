"""Wiring the ramp into Locust's events (a locustfile calls :func:`install` once).

- ``init_command_line_parser``: loadgen's options (``--ladder``, ``--warmup``, ...), generated
  from the one definition in settings/knobs.py (an old name such as ``--stage-duration`` is one line naming its
  flag, exit status 2).
  The config (Locust's own ``--config FILE.toml``) and options are checked right
  after Locust parses its command line — before ``--processes`` forks and before
  any load: a bad key, type or ladder, or an unreachable target, is one line
  (``loadgen: error: ...``) and exit status 2.
- ``init``: local runner → executor + conductor; master → conductor; worker →
  executor. With no target configured, the master/local process starts the
  embedded simulator once per mode (``simulator.modes`` / ``--sim-modes``: baseline, spec, or
  any of the profile's modes, the first the reference; every mode checked against the profile
  before any starts) and stops them on quit.
- ``test_stop``: a stopped test drops the running stage and closes the results.
- ``quit``: after Locust's own tables, the ramp's answer as its last lines (:func:`on_quit`).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
from contextlib import ExitStack

from loadgen import redact
from loadgen.client.protocols import DEFAULT_PROTOCOL
from loadgen.errors import LoadgenError

from loadgen.settings import config as cfgmod
from loadgen.settings import flags
from loadgen.settings.config import RampConfig, TargetConf

log = logging.getLogger("loadgen.locust")

OPTION_KEYS = flags.locust_keys()
"""What is read back from ``environment.parsed_options`` (options by dest, from settings/knobs.py)."""

_state: dict = {"cfg": None, "checked": False, "sims": None, "installed": False, "conductor": None}


def _die(exc: LoadgenError) -> None:
    sys.stderr.write(f"loadgen: error: {exc}\n")
    sys.stderr.flush()
    sys.exit(2)


def _config_path(options) -> str | None:
    path = getattr(options, "config", None)
    return path if path and str(path).endswith(".toml") else None


def config_from_options(options) -> RampConfig:
    cfg = cfgmod.load(_config_path(options))
    return cfgmod.with_overrides(cfg, **{k: getattr(options, k, None) for k in OPTION_KEYS})


# --- command line ----------------------------------------------------------------------------
def add_options(parser, **kw) -> None:
    # Generated from settings/knobs.py, straight on the parser: LocustArgumentParser.add_argument takes
    # include_in_web_ui (groups do not), and these options then show, editable, in the web UI's start form.
    flags.add_locust_options(parser)

    original = parser.parse_args

    def parse_args(*args, **kwargs):
        ns = original(*args, **kwargs)
        if not _state["checked"] and not getattr(ns, "worker", False):
            _state["checked"] = True
            try:
                _state["cfg"] = check(config_from_options(ns), ns)
            except LoadgenError as exc:
                _die(exc)
        return ns

    parser.parse_args = parse_args


def check(cfg: RampConfig, options=None) -> RampConfig:
    """Everything that can be checked before any load is sent (or any simulator started)."""
    cfgmod.check_workload(cfg)
    check_open(cfg)
    if cfg.targets:
        cfgmod.check_reachable(cfg.targets, source=cfg.source)
    else:
        given = getattr(options, "sim_modes", None)
        check_modes(cfg, "--sim-modes" if given and str(given).strip() else f"{cfg.source}: simulator.modes")
    return cfg


def check_open(cfg: RampConfig) -> None:
    """The open-loop options make sense together (as ``loadgen run``'s front checks them): one line if not."""
    rates = cfg.rate
    if cfg.trace:
        raise LoadgenError(f"{cfg.source}: run.trace: the Locust ramp does not replay traces (loadgen run --trace "
                           "does); give --rate")
    if cfg.max_in_flight is not None and not rates:
        raise LoadgenError("--max-in-flight is for open-loop stages: give --rate")
    lag = cfg.max_dispatch_lag_ms
    if rates and lag is not None and not lag > 0:
        raise LoadgenError(f"--max-dispatch-lag must be > 0 ms, got {lag:g}")


def check_modes(cfg: RampConfig, where: str = "--sim-modes"):
    """Every simulator mode is one its profile has (one line naming the first that is not); the profile back.

    The same check as ``loadgen crossover``'s (the profile's own, Profile.check_modes)."""
    from loadgen.sim import profiles

    prof = profiles.load(cfg.simulator.profile)
    prof.check_modes(cfg.simulator.modes, where)
    return prof


# --- process setup ------------------------------------------------------------------------------
def on_init(environment, runner=None, **kw) -> None:
    from locust.runners import MasterRunner, WorkerRunner

    if runner is None:
        return
    if isinstance(runner, WorkerRunner):
        from .distributed import setup_worker

        setup_worker(environment, runner)
        return
    try:
        cfg = _state["cfg"] or check(config_from_options(environment.parsed_options), environment.parsed_options)
    except LoadgenError as exc:
        _die(exc)
    _state["cfg"] = cfg
    if getattr(environment.parsed_options, "headless", False):
        # Locust 2.47 installs its SIGTERM handler only after a headless shape run has ended (main.py runs the
        # shape, then calls gevent.signal_handler): until then SIGTERM killed the master outright — measured,
        # no "Got SIGTERM", no test_stop, ramp.json never marked interrupted, the simulators left running, and
        # its workers, told nothing, ran on until their master timeout (60.9 s). As Ctrl-C instead: the shape's
        # join raises KeyboardInterrupt, Locust stops the test (the running stage is dropped, the results
        # closed, the simulators stopped) and quits its workers (they exited 1.0-1.3 s after the SIGTERM).
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    targets, meta, cpus = start_targets(cfg)
    from .conductor import Conductor

    executor = None
    if not isinstance(runner, MasterRunner):
        from .executor import Executor

        executor = Executor(lambda item: environment.loadgen_conductor.add_part(item), events=environment.events)
        environment.loadgen_executor = executor
    conductor = Conductor(environment, cfg, targets, executor=executor, meta=meta, cpus=cpus)
    conductor.refresh = refreshed(environment)
    environment.loadgen_conductor = conductor
    _state["conductor"] = conductor
    if isinstance(runner, MasterRunner):
        from .distributed import setup_master

        setup_master(environment, conductor)
    if environment.web_ui is not None:
        from .webui import install as install_web_ui

        install_web_ui(environment, conductor)


def start_targets(cfg: RampConfig) -> tuple[list[TargetConf], dict, list[int] | None]:
    """The configured targets, or embedded simulators (one per mode, the first the reference) started now;
    a mode its profile marks adaptive (spec-adaptive) is an adaptive target."""
    if cfg.targets:
        return cfg.targets, {}, None
    from loadgen.sim.process import SimProcess

    try:
        prof = check_modes(cfg)  # before any simulator starts (check() has said so already on a normal start)
    except LoadgenError as exc:
        _die(exc)
    sim = cfg.simulator
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pin = sim.pin and len(cpus) > 1
    stack = ExitStack()
    targets = []
    try:
        for mode in sim.modes:
            proc = stack.enter_context(SimProcess(profile=sim.profile, mode=mode, time_scale=sim.time_scale,
                                                  seed=sim.seed, cpu=cpus[0] if pin else None,
                                                  metrics_flavour=sim.metrics_flavour, faults=sim.faults,
                                                  prefix_cache=sim.prefix_cache))
            targets.append(TargetConf(mode, proc.url, adaptive=prof.is_adaptive(mode)))
            log.info("loadgen: no target configured: embedded simulator (%s, %s, time scale %g) at %s",
                     sim.profile, mode, sim.time_scale, proc.url)
    except LoadgenError as exc:
        stack.close()
        _die(exc)
    _state["sims"] = stack
    atexit.register(_close_sims)  # also when Locust exits without its quitting event (sys.exit after init)
    load_cpus = cpus[1:] if pin else None
    if load_cpus:
        os.sched_setaffinity(0, set(load_cpus))
    # As `loadgen crossover` writes it: modes label → mode, and the lengths, so that `loadgen crossover --from`
    # can recompute the traffic the simulators saw for their own answer (sim.known).
    meta = {"simulator": {"profile": sim.profile, "modes": {m: m for m in sim.modes}, "time_scale": sim.time_scale,
                          "seed": sim.seed, "pinned_cpu": cpus[0] if pin else None,
                          "metrics_flavour": sim.metrics_flavour, "faults": sim.faults, "protocol": DEFAULT_PROTOCOL,
                          "max_tokens": cfg.max_tokens, "prompt_tokens": cfg.prompt_tokens,
                          "ignore_eos": cfg.ignore_eos, "tokenizer": cfg.tokenizer, "prefix_cache": sim.prefix_cache,
                          "sessions": cfg.sessions().to_dict()}}
    return targets, meta, load_cpus


def on_test_stop(environment, **kw) -> None:
    conductor = getattr(environment, "loadgen_conductor", None)
    if conductor is not None:
        conductor.stop()
    elif getattr(environment, "loadgen_executor", None) is not None:
        environment.loadgen_executor.abort()


def on_quitting(environment, **kw) -> None:
    ex = getattr(environment, "loadgen_executor", None)
    if ex is not None:
        ex.close()
    _close_sims()


def on_quit(exit_code: int = 0, **kw) -> None:
    """The ramp's answer, last: the analysis ``loadgen crossover --from`` makes of the results so far, per
    workload (Locust prints 168 lines of its own tables before this event; a ramp that ended on them left its
    user with no verdict), and the command that writes the report. Nothing for one target (no comparison)."""
    conductor = _state.get("conductor")
    if conductor is None or conductor.writer is None or not conductor.stages or len(conductor.targets) < 2:
        return
    from loadgen.analysis.answer import RATE, analyse
    from loadgen.report.terminal import any_compared, crossover_tables, rate_tables
    from loadgen.run.results import load

    path = conductor.writer.path
    try:
        doc = load(path)
        answer = analyse(doc)
    except (LoadgenError, OSError, ValueError) as exc:
        print(f"loadgen: no answer from {path}: {exc}", flush=True)
        return
    res = answer.result
    if answer.axis == RATE:
        print(rate_tables(res), flush=True)
    elif any_compared(res):
        print(crossover_tables(res, doc=doc), flush=True)
    print(f"loadgen: the report (report.html) and crossover.json: loadgen crossover --from {path}", flush=True)


def _close_sims() -> None:
    stack = _state.get("sims")
    if stack is not None:
        _state["sims"] = None
        stack.close()


def refreshed(environment):
    """The config with the options as they are now (the web UI's form may have changed them)."""

    def refresh(old: RampConfig) -> RampConfig:
        try:
            new = config_from_options(environment.parsed_options)
            cfgmod.check_workload(new)
        except LoadgenError as exc:
            log.error("loadgen: error: %s (keeping the previous settings)", exc)
            return old
        new.simulator = old.simulator  # the simulators are already running
        return new

    return refresh


def install(events=None) -> None:
    """Register the ramp's listeners (idempotent)."""
    if _state["installed"]:
        return
    # Locust's own terminal and log output (its handlers are made after the locustfile loads) and ours,
    # secrets masked (loadgen/redact.py)
    redact.guard_streams()
    if events is None:
        from locust import events
    events.init_command_line_parser.add_listener(add_options)
    events.init.add_listener(on_init)
    events.test_stop.add_listener(on_test_stop)
    events.quitting.add_listener(on_quitting)
    events.quit.add_listener(on_quit)
    _state["installed"] = True

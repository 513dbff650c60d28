"""Every knob of every front, defined once: its flag, removed old names, help, parser, default, TOML key, fronts.

In: nothing (a definition). Out: :class:`Settings`, a dataclass whose fields carry a
:class:`Knob` in their metadata, and the defaults every front and the TOML config share.
``settings.flags`` derives from it the argparse flags of ``loadgen run`` and ``loadgen
crossover`` and the Locust ramp's options; ``settings.config`` derives its TOML keys and
checks; :func:`loadgen.settings.flags.typed` turns parsed flags into a typed ``Settings``.

A front is "run", "crossover" or "locust" (``locust -f scenarios/ramp.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Callable, Mapping

from loadgen.client.loops import LOOPS
from loadgen.client.protocols import DEFAULT_PROTOCOL, PROTOCOLS
from loadgen.settings import parse
from loadgen.sim.prom import METRICS_FLAVOURS
from loadgen.stage.result import Slo

FRONTS = ("run", "crossover", "locust")
CLI = ("run", "crossover")

# --- the defaults, one place each ---------------------------------------------------------------
LADDER = (1, 2, 5, 10, 30, 70, 100, 250)
"""``loadgen crossover`` and the Locust ramp: up to C=250, past where speculation stops paying on the
measured pcie-8gpu-eagle3 box (its crossover lies between C=10 and 30, docs/simulator.md)."""
RUN_LADDER = (1, 2, 5, 10)
"""``loadgen run``: one target, a first look (4 stages, about 2.5 min at the default window)."""
SIM_PROFILE = "pcie-8gpu-eagle3"
"""The embedded simulator's profile (the measured box; ``loadgen sim`` and SimProcess keep their own copy:
the simulator imports nothing of loadgen's pipeline)."""
WARMUP_S = 5.0
DURATION_S = 30.0
SIM_WARMUP_S = 1.0
"""The simulator has nothing to warm (no graphs to capture, no kernels to compile; a prefix cache or an adaptive
mode settles with the load, which the steadiness test watches): its load is steady when that test says so, whose
two spans take at least 1 s (run/window.MIN_SPAN_S); at 2 s, 19 of the README crossover's 36 stages waited for
this minimum alone."""
SIM_DURATION_S = 8.0
"""``loadgen crossover`` on its embedded simulators (no URL and no --warmup/--duration): they run their schedule
time-scaled (x5), so a shorter window holds as many steps. ``loadgen run`` and the Locust ramp keep 5 s / 30 s."""
SIM_TIME_SCALE = 1.0
CROSSOVER_SIM_TIME_SCALE = 5.0
"""``loadgen crossover`` runs its two simulators 5x faster: a whole default ladder twice in minutes."""
WORKLOAD = "chat"
LOOP = "auto"
READ_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_S = 10.0
MAX_COOLDOWN_S = 600.0
OUT = MappingProxyType({"run": "results/run", "crossover": "results/crossover", "locust": "results/ramp"})
"""Each front's results folder (run.json and what goes beside it)."""


def ladder_text(values) -> str:
    return ",".join(map(str, values))


def seconds_text(s: float) -> str:
    return f"{s:g}s"


# --- the metadata -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Knob:
    flag: str | None
    """Canonical flag (``--ladder``); None: a TOML key only."""
    help: str = ""
    renamed: tuple[str, ...] = ()
    """Old names, removed: each use is a one-line error naming ``flag`` (exit status 2; settings/flags.py)."""
    fronts: tuple[str, ...] = CLI
    """Which fronts have the flag ("run", "crossover", "locust")."""
    default: Any = None
    """The flag's default, as typed on a command line."""
    default_by: Mapping[str, Any] = field(default_factory=dict)
    """Per front, where a front's default differs (why: at the constant above)."""
    help_by: Mapping[str, str] = field(default_factory=dict)
    parse: Callable[[str, str], Any] | None = None
    """Flag text and flag name → typed value (settings/parse.py); None: the value as argparse gives it."""
    parse_none: bool = False
    """``parse`` also takes a flag not given (None): --slo → an empty Slo, --header → {}."""
    toml: str | None = None
    """Its key in the TOML config: "run.ladder", "simulator.profile", "slo" (a table)."""
    attr: str | None = None
    """The RampConfig attribute the TOML key and the Locust option set ("warmup_s", "simulator.time_scale")."""
    check: str = "string"
    """How config.py checks a TOML or Locust value: the name of a config._Checker method."""
    check_kw: Mapping[str, Any] = field(default_factory=dict)
    from_config: bool = True
    """``loadgen crossover --config`` fills the flag from the TOML key when the flag is left alone."""
    type: Callable | None = None
    """argparse type on run/crossover (Locust options stay text: its web UI form sends text)."""
    action: str = "store"
    choices: tuple | None = None
    metavar: str | None = None
    section: str = "target"
    """The --help group it shows in."""
    web_ui: bool = True
    """Locust: shown, editable, in the web UI's start form."""

    def default_for(self, front: str) -> Any:
        if front == "locust":
            # Locust options are None when not given (a TOML file or RampConfig's default then holds);
            # a flag such as --keep-parts is False.
            return False if self.action == "store_true" else None
        return self.default_by.get(front, self.default)

    def help_for(self, front: str) -> str:
        return self.help_by.get(front, self.help)


def knob(flag: str | None, help: str = "", **kw) -> Any:
    return field(default=None, metadata={"knob": Knob(flag, help, **kw)})


def _dur(text: str, flag: str) -> float:
    return parse.duration(text, flag)


def _faults(text: str, flag: str) -> str:
    from loadgen.errors import LoadgenError
    from loadgen.sim.faults import parse as parse_faults

    try:
        parse_faults(text)
    except LoadgenError as exc:
        raise LoadgenError(f"{flag}: {str(exc).split(': ', 1)[-1]}") from None
    return text


def _slo(text: str | None, flag: str) -> Slo:
    return parse.slo(text)


def _headers(items: list[str] | None, flag: str) -> dict:
    return parse.headers(items)


# --- the settings ---------------------------------------------------------------------------------
# Field order: flags keep it within their --help group, and the [run] table's keys are listed in it
# (the "unknown key (known in [run]: ladder, ...)" line).
@dataclass
class Settings:
    """What a user asked for, typed (ladder a list, durations seconds); None where a front has no such knob."""

    # stages
    ladder: list[int] | None = knob(
        "--ladder", "concurrency ladder, comma-separated (default {default})", renamed=("--concurrency",),
        fronts=FRONTS, default=ladder_text(LADDER), default_by={"run": ladder_text(RUN_LADDER)},
        help_by={"locust": f"concurrency ladder, e.g. 1,2,5,10 (default {ladder_text(LADDER)})"},
        parse=parse.ladder, toml="run.ladder", attr="ladder", check="ladder", section="stages")
    rate: list[float] | None = knob(
        "--rate", "open loop: a ladder of request rates (req/s), comma-separated, e.g. 1,2,5,10, instead of "
        "--ladder: requests are sent at planned times whether or not earlier ones finished", fronts=FRONTS,
        parse=parse.rates, toml="run.rate", attr="rate", check="rates", section="stages")
    arrival: str | None = knob(
        "--arrival", "open loop: the arrival process, poisson, constant or gamma:CV (CV > 1 burstier than "
        "Poisson; default poisson)", fronts=FRONTS, default="poisson", parse=parse.arrival, toml="run.arrival",
        attr="arrival", check="arrival", section="stages")
    max_in_flight: int | None = knob(
        "--max-in-flight", "open loop: at most N requests in flight; a send that finds them all busy waits (its "
        "wait is dispatch lag; default: no cap)", fronts=FRONTS, type=int, toml="run.max_in_flight",
        attr="max_in_flight", check="integer", check_kw={"lo": 1}, section="stages")
    max_dispatch_lag: float | None = knob(
        "--max-dispatch-lag", "open loop: flag a stage whose dispatch lag p99 exceeds this many ms: the client did "
        "not keep the schedule (default {default:g})", fronts=FRONTS, default=10.0, type=float,
        help_by={"locust": "open loop: flag a stage whose dispatch lag p99 exceeds this many ms (default 10)"},
        toml="run.max_dispatch_lag", attr="max_dispatch_lag_ms", check="number", section="stages")
    past_saturation: bool | None = knob(
        "--past-saturation", "open loop: go on to higher rates for a target after one of its stages saturated "
        "(by default its ladder stops there)", action="store_true", default=False, toml="run.past_saturation",
        attr="past_saturation", check="boolean", section="stages", fronts=FRONTS)
    trace: str | None = knob(
        "--trace", "open loop: replay a Mooncake JSONL trace (timestamp, input_length, output_length, hash_ids), "
        "a file or a shipped one (mooncake-small), prompts from --workload at its lengths", toml="run.trace",
        attr="trace", check="string", section="traffic")
    trace_speed: list[float] | None = knob(
        "--trace-speed", "replay the trace this many times faster, a ladder, e.g. 0.5,1,2 (default 1)",
        parse=lambda text, flag: parse.rates(text, flag), toml="run.trace_speed", attr="trace_speed",
        check="rates", section="traffic")
    warmup: float | None = knob(
        "--warmup", "minimum warm-up before each window (default {default}); the window opens once the load is "
        "measured steady", fronts=FRONTS, default=seconds_text(WARMUP_S),
        default_by={"crossover": None},
        help_by={"crossover": f"minimum warm-up per stage (default {seconds_text(WARMUP_S)}; "
                              f"{seconds_text(SIM_WARMUP_S)} on the simulator); the window opens once the load is "
                              "measured steady",
                 "locust": f"warm-up before each steady window (default {seconds_text(WARMUP_S)})"},
        parse=_dur, toml="run.warmup", attr="warmup_s", check="seconds", check_kw={"allow_zero": True},
        section="stages")
    duration: float | None = knob(
        "--duration", "steady window per stage (default {default})", renamed=("--stage-duration",), fronts=FRONTS,
        default=seconds_text(DURATION_S), default_by={"crossover": None},
        help_by={"crossover": f"steady window per stage (default {seconds_text(DURATION_S)}; "
                              f"{seconds_text(SIM_DURATION_S)} on the simulator)",
                 "locust": f"steady window per stage (default {seconds_text(DURATION_S)})"},
        parse=_dur, toml="run.duration", attr="duration_s", check="seconds", section="stages")
    requests: int | None = knob(
        "--requests", "close each window after N requests instead", renamed=("--stage-requests",), fronts=FRONTS,
        parse=parse.count, toml="run.requests", attr="requests", check="integer", check_kw={"lo": 1}, section="stages")
    repeat: int | None = knob(
        "--repeat", "run each workload's ladder N times, pass after pass (each pass its own prompts), and give each "
        "stage's spread across the passes (CV) beside its interval (default {default})", default="1", parse=parse.count,
        fronts=("crossover",),
        toml="run.repeat", attr="repeat", check="integer", check_kw={"lo": 1}, section="stages")
    seed: int | None = knob(
        "--seed", "prompt sequence seed (default 0)", fronts=FRONTS, default=0, type=int, toml="run.seed",
        attr="seed", check="integer", section="traffic")
    workload: str | None = knob(
        "--workload", "workload name, mix 'code:2,chat:1', or a .jsonl file (default {default})",
        renamed=("--workloads",), fronts=FRONTS, default=WORKLOAD,
        help_by={"crossover": "workloads, comma-separated; each gets its own ladder (a --config's one workload, "
                              f"even a mix, is one) (default {WORKLOAD})",
                 "locust": f"workload name, mix 'code:2,chat:1' or .jsonl (default {WORKLOAD})"},
        toml="run.workload", attr="workload", check="word", section="traffic")
    prompt_tokens: str | None = knob(
        "--prompt-tokens", "prompt length target, same forms as --max-tokens", toml="run.prompt_tokens",
        attr="prompt_tokens", check="length", section="traffic")
    max_tokens: str | None = knob(
        "--max-tokens", "output length override: 200, normal:200,50, uniform:100,300", toml="run.max_tokens",
        attr="max_tokens", check="length", section="traffic")
    ignore_eos: bool | None = knob(
        "--ignore-eos", "generate exactly max tokens (biases acceptance)", action="store_true", default=False,
        toml="run.ignore_eos", attr="ignore_eos", check="boolean", section="traffic")
    turns: int | None = knob(
        "--turns", "multi-turn sessions of N turns: each later turn resends the history with the server's own "
        "replies and the workload's next user message (closed loop; default {default}: single requests)",
        fronts=FRONTS, default="1", parse=parse.count, toml="run.turns", attr="turns", check="integer",
        check_kw={"lo": 1}, section="traffic")
    think_time: float | None = knob(
        "--think-time", "sessions: wait this long between a reply's end and the next turn (default {default})",
        fronts=FRONTS, default="0s", parse=_dur, toml="run.think_time", attr="think_s", check="seconds",
        check_kw={"allow_zero": True}, section="traffic")
    shared_prefix: int | None = knob(
        "--shared-prefix", "a system prompt of N tokens (loadgen's token rule) before every session's first "
        "message, the same text for every session and target (default 0: none)", fronts=FRONTS, default="0",
        parse=parse.tokens, toml="run.shared_prefix", attr="shared_prefix", check="integer", check_kw={"lo": 0},
        section="traffic")
    prefix_ratio: float | None = knob(
        "--prefix-ratio", "the share of sessions (0-1) whose system prompt is the shared one; the others get one "
        "of their own of the same length (default {default:g})", fronts=FRONTS, default=1.0, type=float,
        help_by={"locust": "the share of sessions (0-1) whose system prompt is the shared one (default 1)"},
        toml="run.prefix_ratio", attr="prefix_ratio", check="number", check_kw={"positive": False},
        section="traffic")
    tokenizer: str | None = knob(
        "--tokenizer", "HF tokenizer.json (or folder) for servers without per-chunk usage", toml="run.tokenizer",
        attr="tokenizer", check="string", section="traffic")
    out: str | None = knob(
        "--out", "results folder: run.json, run.csv and run.hlog go in it", fronts=FRONTS, default_by=OUT,
        help_by={"run": f"results folder: run.json, run.csv and run.hlog (default {OUT['run']})",
                 "crossover": f"results folder: run.json, crossover.json, report.html (default {OUT['crossover']})",
                 "locust": f"results folder (default {OUT['locust']})"},
        toml="run.out", attr="out", check="nonblank", section="output",
        from_config=False)  # crossover writes its own folder: the config's out is the Locust ramp's
    bin: float | None = knob(None, toml="run.bin", attr="bin_s", check="seconds")
    max_cooldown: float | None = knob(None, toml="run.max_cooldown", attr="max_cooldown_s", check="seconds")
    connect_timeout: float | None = knob(None, toml="run.connect_timeout", attr="connect_timeout_s", check="seconds")
    read_timeout: float | None = knob(
        "--read-timeout", "longest silence before a stream counts as stalled (default {default})",
        default=seconds_text(READ_TIMEOUT_S), parse=_dur, toml="run.read_timeout", attr="read_timeout_s",
        check="seconds", section="stages")
    loop: str | None = knob(
        "--loop", "event loop: uvloop (fast) or stamping (exact burst stamps)", default=LOOP, choices=LOOPS,
        toml="run.loop", attr="loop", check="choice", check_kw={"choices": LOOPS}, section="stages")
    server_metrics_interval: float | None = knob(
        "--server-metrics-interval", "read the server's /metrics every S seconds inside each window, besides its "
        "open and close (0: only those two; default {default:g})", default=1.0, type=float, fronts=FRONTS,
        help_by={"locust": "read the server's /metrics every S seconds inside each window (0: only at its open and "
                           "close; default 1)"},
        toml="run.server_metrics_interval", attr="server_metrics_interval", check="number",
        check_kw={"positive": False, "lo": 0},
        section="stages")
    reset_cache: bool | None = knob(
        "--reset-cache", "empty the server's prefix cache before each stage (SGLang /flush_cache; vLLM "
        "/reset_prefix_cache, served with VLLM_SERVER_DEV_MODE=1; llama.cpp slot erase, needs --slot-save-path)", action="store_true", default=False, fronts=FRONTS,
        toml="run.reset_cache", attr="reset_cache", check="boolean", section="stages")
    keep_parts: bool | None = knob(
        "--keep-parts", "also write each process's own stage results (OUT/parts/)", fronts=("locust",),
        action="store_true", web_ui=False, toml="run.keep_parts", attr="keep_parts", check="boolean")
    url: str | None = knob(
        "--url", help_by={"run": "server base URL; omitted: start the embedded simulator",
                          "crossover": "one port for both servers, which loadgen starts one at a time "
                                       "(needs --baseline-start and --spec-start)"},
        toml="run.url", attr="url", check="url",
        from_config=False)  # config.parse already gave run.url to each target without a url of its own
    wait_for_server: float | None = knob(
        "--wait-for-server", "wait up to this long (e.g. 10m) for a target that does not answer yet (a server "
        "still loading); without it such a target is an error before any load", parse=_dur, check="seconds",
        check_kw={"allow_zero": True}, metavar="T")
    max_stage_time: float | None = knob(
        "--max-stage-time", "no stage runs longer (e.g. 3m): one hit is cut where it is, kept, marked incomplete "
        "and noted, and the ladder goes on", parse=_dur, toml="run.max_stage_time", attr="max_stage_s",
        check="seconds", section="stages")
    max_run_time: float | None = knob(
        "--max-run-time", "the whole run's budget (e.g. 30m), shared out between the stages by their estimates; "
        "when spent the run stops and says which stages were not run", parse=_dur, toml="run.max_run_time",
        attr="max_run_s", check="seconds", section="stages", fronts=FRONTS,
        help_by={"locust": "the whole ramp's budget (e.g. 30m): a stage starts only if its warm-up and window end "
                           "within it; the ramp then stops and says which stages were not run"})
    slo: Slo | None = knob(
        "--slo", "goodput SLOs, e.g. ttft_ms=500,tpot_ms=50", parse=_slo, parse_none=True, toml="slo", check="slo",
        section="traffic")
    processes: int | None = knob(
        "--processes", "spread each stage's users over N processes (default 1)", default="1", parse=parse.count,
        section="stages")

    # target(s)
    label: str | None = knob("--label", "target label in results (default: baseline/url)", fronts=("run",),
                             parse=parse.label)
    target: list | None = knob(
        "--target", "LABEL=URL, a configuration to compare (repeatable): the first is the reference (the "
        "baseline), every other a candidate; with --url, --start alone names them", action="append",
        metavar="LABEL=URL", fronts=("crossover",))
    start: list | None = knob(
        "--start", "LABEL=CMD, the command that starts that configuration's server (repeatable; loadgen runs "
        "one server at a time)", action="append", metavar="LABEL=CMD", fronts=("crossover",))
    adaptive: list | None = knob(
        "--adaptive", "LABEL of a configuration that adapts on its own (e.g. switches speculation by load): "
        "compared against the best of the others at each C (repeatable)", action="append", metavar="LABEL",
        fronts=("crossover",))
    baseline_url: str | None = knob(
        "--baseline-url", "baseline server; omit both URLs to use the embedded simulator", fronts=("crossover",),
        check="url")
    spec_url: str | None = knob("--spec-url", "speculative server", fronts=("crossover",), check="url")
    baseline_start: str | None = knob(
        "--baseline-start", "command that starts the baseline server (one GPU box)", fronts=("crossover",))
    spec_start: str | None = knob(
        "--spec-start", "command that starts the speculative server", fronts=("crossover",))
    health_path: str | None = knob(
        "--health-path", "health path for started servers", default="/health", fronts=("crossover",), check="path")
    protocol: str | None = knob(
        "--protocol", "wire protocol: sglang (SGLang's native /generate), chat or completions (the OpenAI "
        f"routes: vLLM, llama.cpp, TGI, SGLang; give --model) (default {DEFAULT_PROTOCOL})", default=DEFAULT_PROTOCOL, choices=tuple(sorted(PROTOCOLS)))
    model: str | None = knob("--model", "model name sent on OpenAI routes (vLLM needs the served name)",
                                   default="default", check="word")
    header: dict | None = knob(
        "--header", "extra HTTP header 'Name: value' (repeatable)", action="append", parse=_headers, parse_none=True)
    spec_details: bool | None = knob(
        "--spec-details", "ask SGLang OpenAI routes for spec_tokens_details", action="store_true", default=False)

    # crossover: where the run comes from, and its analysis
    from_: str | None = knob(
        "--from", "analyse a finished run (its run.json or folder)", metavar="RESULTS", fronts=("crossover",),
        section="output")
    config: str | None = knob(
        "--config", "the ramp config Locust reads (scenarios/example.toml): run, slo, two [targets] (baseline "
        "first; each may have start/health/stop_signal), simulator; flags win", metavar="TOML",
        fronts=("crossover",), section="output")
    passes: int | None = knob(
        "--passes", "at most N passes over the ladder: after each, another over the load points still open (neither a "
        "winner nor a tie within --tie), every interval at 1 - (1 - confidence)/N, so that a look after each pass "
        "keeps the run's error rate (docs/metrics.md, Sequential passes) (default {default}: one pass)", default="1",
        parse=parse.count, fronts=("crossover",), section="stages")
    tie: float | None = knob(
        "--tie", "call a load point a tie when its whole interval lies within ±this (default {default})", default="5%",
        parse=lambda t, f: parse.share(t, f), fronts=("crossover",), section="analysis")
    refine: bool | None = knob(
        "--refine", "add stages between bracketing concurrencies (rates, with --rate)", action="store_true", default=False,
        fronts=("crossover",), section="analysis")
    refine_width: float | None = knob(
        "--refine-width", "stop when the interval's high/low ≤ this", default=1.3, type=float,
        fronts=("crossover",), section="analysis", check="number", check_kw={"above": 1})
    refine_budget: int | None = knob(
        "--refine-budget", "at most this many extra concurrencies (or rates)", default=4, type=int, fronts=("crossover",),
        section="analysis", check="integer", check_kw={"lo": 0})
    confidence: float | None = knob(
        "--confidence", "interval confidence (default 0.90)", default="0.90", parse=parse.level, fronts=("crossover",),
        section="analysis")
    capacity: str | None = knob(
        "--capacity", "open loop: each configuration's highest rate meeting these percentile SLOs, e.g. "
        "ttft_p99=800ms,tpot_p50=40ms (TTFT and E2E from the planned send), searched with extra stages where "
        "the answer is uncertain", metavar="SLOS", fronts=("crossover",), section="analysis")
    capacity_width: float | None = knob(
        "--capacity-width", "stop searching a capacity once its interval's high/low ≤ this (default {default:g})",
        default=1.15, type=float, fronts=("crossover",), section="analysis", check="number", check_kw={"above": 1})
    capacity_budget: int | None = knob(
        "--capacity-budget", "at most this many extra stages per configuration for the capacity search (default "
        "{default})", default=4, type=int, fronts=("crossover",), section="analysis", check="integer",
        check_kw={"lo": 0})
    resume: str | None = knob(
        "--resume", help_by={
            "crossover": "continue the interrupted run in this folder from its run.json: finished stages kept, the "
                         "rest run with the same seeds; give the run's own flags again (a difference is refused)",
            "run": "continue the interrupted run in this results file (its .json): finished stages kept, the rest "
                   "run with the same seeds; give the run's own flags again (a difference is refused)"},
        metavar="RESULTS", section="output", from_config=False)
    no_report: bool | None = knob(
        "--no-report", "skip the HTML report", action="store_true", default=False, fronts=("crossover",),
        section="output")
    verbose: bool | None = knob(
        "--verbose", "every metric's verdict in the terminal, with what it rests on (report.html has them all)",
        action="store_true", default=False, fronts=("crossover",), section="output")

    # the embedded simulator
    sim_profile: str | None = knob(
        "--sim-profile", f"embedded simulator profile (default {SIM_PROFILE})", fronts=FRONTS, default=SIM_PROFILE,
        toml="simulator.profile", attr="simulator.profile", check="string", section="sim")
    sim_mode: str | None = knob(
        "--sim-mode", "the simulator's configuration: baseline, spec, or another of its profile's modes "
        "(pcie-8gpu-eagle3: spec-topk4, spec-adaptive; default baseline)", fronts=("run",), default="baseline",
        parse=parse.label, section="sim")
    sim_time_scale: float | None = knob(
        "--sim-time-scale", "run the simulated schedule this many times faster (default {default:g})",
        fronts=FRONTS, default=SIM_TIME_SCALE, default_by={"crossover": CROSSOVER_SIM_TIME_SCALE}, type=float,
        help_by={"locust": f"embedded simulator speed-up (default {SIM_TIME_SCALE:g})"},
        toml="simulator.time_scale", attr="simulator.time_scale", check="number", section="sim")
    sim_metrics_flavour: str | None = knob(
        "--sim-metrics-flavour", "names the embedded simulator's /metrics exports: sglang or vllm (default sglang)",
        fronts=FRONTS, default=METRICS_FLAVOURS[0], choices=METRICS_FLAVOURS, toml="simulator.metrics_flavour",
        attr="simulator.metrics_flavour", check="choice", check_kw={"choices": METRICS_FLAVOURS}, section="sim")
    sim_faults: str | None = knob(
        "--sim-faults", "faults the embedded simulators inject, a loadgen sim --faults spec such as "
        "reset=0.02,http503=0.01,stall=0.01:30s (docs/simulator.md, Faults)", fronts=FRONTS, parse=_faults,
        toml="simulator.faults", attr="simulator.faults", check="faults", metavar="SPEC", section="sim")
    sim_prefix_cache: int | None = knob(
        "--sim-prefix-cache", "the embedded simulators keep a prefix cache of this many tokens, so later turns "
        "of a session reuse their history (loadgen sim --prefix-cache; default {default}: none)", fronts=FRONTS,
        default="0", parse=parse.tokens, help_by={"locust": "embedded simulators' prefix cache, in tokens (default 0: none)"},
        toml="simulator.prefix_cache", attr="simulator.prefix_cache", check="integer", check_kw={"lo": 0},
        metavar="TOKENS", section="sim")
    sim_seed: int | None = knob(None, toml="simulator.seed", attr="simulator.seed", check="integer")
    sim_modes: str | None = knob(
        "--sim-modes", "embedded simulator configurations, comma-separated, the first the reference (default "
        "baseline,spec; the pcie-8gpu-eagle3 profile also has spec-topk4 and spec-adaptive)",
        fronts=("crossover", "locust"),
        parse=lambda text, flag: tuple(parse.names(text, flag)) if text else None,
        toml="simulator.modes", attr="simulator.modes", check="modes", section="sim")
    sim_pin: bool | None = knob(None, toml="simulator.pin", attr="simulator.pin", check="boolean")


def knobs(front: str | None = None) -> list[tuple[str, Knob]]:
    """(field name, Knob) in field order; with ``front``: only that front's flags."""
    out = [(f.name, f.metadata["knob"]) for f in fields(Settings)]
    return [(n, k) for n, k in out if front is None or (k.flag and front in k.fronts)]


def toml_knobs(table: str) -> list[tuple[str, Knob]]:
    """The knobs whose TOML key lies in ``table`` ("run", "simulator"), in field order."""
    return [(n, k) for n, k in knobs() if k.toml and k.toml.startswith(table + ".")]

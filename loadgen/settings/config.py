"""The ramp's TOML config: stages, targets, workload, SLOs, output — checked before any load.

Given with Locust's own ``--config FILE.toml`` (Locust reads its ``[tool.locust]``
table from the same file; loadgen reads the rest). Every mistake is one line
naming the file and the key (``example.toml: run.ladder: ...``). See
scenarios/example.toml for every key with its default. The [run] and [simulator] keys, their
checks and defaults are the knobs of settings/knobs.py (the Locust options and the flags of
``loadgen crossover --config`` set the same fields).

    [run]        ladder, warmup, duration | requests, seed, workload, prompt_tokens,
                 max_tokens, ignore_eos, turns, think_time, shared_prefix, prefix_ratio,
                 tokenizer, out, bin, max_cooldown,
                 connect_timeout, read_timeout, loop, server_metrics_interval,
                 reset_cache, keep_parts
    [slo]        ttft_ms, itl_ms, tpot_ms, e2e_ms (one key per metric with an SLO)
    [targets.X]  url, protocol, model, headers, api_key, spec_details, adaptive   (any number: the first
                 is the reference, the others candidates; stages rotate in file order)
                 start, health, stop_signal, startup_timeout (loadgen crossover: a command
                 that starts the server, run one target at a time)
    [simulator]  profile, time_scale, metrics_flavour, faults, prefix_cache, seed, modes, pin   (used when no [targets] is given)
"""

from __future__ import annotations

import difflib
import signal
import socket
import tomli  # a declared dependency: tomllib is Python 3.11+, and the package supports 3.10
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from loadgen import redact
from loadgen.errors import LoadgenError
from loadgen.metrics import SLO_METRICS
from loadgen.client.protocols import DEFAULT_PROTOCOL, PROTOCOLS
from loadgen.client.stream import Timeouts
from loadgen.settings import knobs as K
from loadgen.sim.prom import METRICS_FLAVOURS
from loadgen.settings.knobs import Knob
from loadgen.settings.parse import LABEL
from loadgen.settings.parse import arrival as parse_arrival
from loadgen.settings.parse import duration as parse_duration
from loadgen.settings.parse import ladder as parse_ladder
from loadgen.settings.parse import rates as parse_rates
from loadgen.stage.result import Slo
from loadgen.workloads.sessions import SessionSpec


@dataclass
class TargetConf:
    label: str
    url: str
    protocol: str = DEFAULT_PROTOCOL
    model: str = "default"
    headers: dict = field(default_factory=dict)
    spec_details: bool = False
    start: str | None = None
    """Command that starts this server (``loadgen crossover`` runs one target at a time)."""
    health: str = "/health"
    stop_signal: str = "SIGINT"
    startup_timeout_s: float = 900.0
    adaptive: bool = False
    """A configuration that adapts on its own (switches speculation by load): the analysis measures it
    against the best of the others at each C rather than choosing it for a region."""

    def as_dict(self) -> dict:
        return {"label": self.label, "url": self.url, "protocol": self.protocol, "model": self.model,
                "headers": dict(self.headers), "spec_details": self.spec_details}


@dataclass
class SimConf:
    profile: str = K.SIM_PROFILE
    time_scale: float = K.SIM_TIME_SCALE
    metrics_flavour: str = METRICS_FLAVOURS[0]
    """Whose /metrics names the simulator exports: one of sim/prom.py's METRICS_FLAVOURS (engine names)."""
    faults: str | None = None
    """A ``loadgen sim --faults`` spec the simulators inject (docs/simulator.md, Faults); None: none."""
    prefix_cache: int = 0
    """Tokens of prefix cache each simulator keeps (``loadgen sim --prefix-cache``); 0: none."""
    seed: int = 0
    modes: tuple[str, ...] = ("baseline", "spec")
    pin: bool = True
    """Pin the simulators to the first CPU and Locust to the others (2+ CPUs)."""


@dataclass
class StageKnobs:
    """The knobs every stage of a ramp carries to the load processes that run it: the Locust ramp ships them in
    each stage plan (loadgen/locust/stageplan.py), so a worker on another machine needs no config of its own.
    Each field is a knob's ``attr`` (settings/knobs.py: its flag, TOML key, check and help)."""

    warmup_s: float = K.WARMUP_S
    duration_s: float | None = K.DURATION_S
    requests: int | None = None
    bin_s: float | None = None
    max_cooldown_s: float = K.MAX_COOLDOWN_S
    seed: int = 0
    prompt_tokens: str | None = None
    max_tokens: str | None = None
    ignore_eos: bool = False
    turns: int = 1
    think_s: float = 0.0
    shared_prefix: int = 0
    prefix_ratio: float = 1.0
    tokenizer: str | None = None
    slo: dict = field(default_factory=dict)
    connect_timeout_s: float = K.CONNECT_TIMEOUT_S
    read_timeout_s: float = K.READ_TIMEOUT_S
    loop: str = K.LOOP
    arrival: str = "poisson"
    """Open loop: how the planned send instants are drawn (loadgen/timing)."""
    max_dispatch_lag_ms: float = 10.0
    """Open loop: a stage whose dispatch lag p99 exceeds this is flagged (the schedule was not kept)."""

    def sessions(self) -> SessionSpec:
        """Multi-turn sessions (loadgen/workloads/sessions.py), as ``loadgen run --turns`` holds them."""
        return SessionSpec(self.turns, self.think_s, self.shared_prefix, self.prefix_ratio)

    def timeouts(self) -> Timeouts:
        return Timeouts(connect_s=self.connect_timeout_s, read_s=self.read_timeout_s)

    def stage_knobs(self) -> "StageKnobs":
        """Only these knobs (of a RampConfig: what a stage plan carries)."""
        return StageKnobs(**{f.name: getattr(self, f.name) for f in fields(StageKnobs)})


@dataclass
class RampConfig(StageKnobs):
    """The Locust ramp's settings: its TOML config with the Locust options over it (``with_overrides``); the
    stage knobs, the ladder and what the ramp as a whole needs."""

    ladder: tuple[int, ...] = K.LADDER
    rate: tuple[float, ...] | None = None
    """Open loop: a ladder of request rates (req/s) instead of concurrencies."""
    max_in_flight: int | None = None
    past_saturation: bool = False
    trace: str | None = None
    trace_speed: tuple[float, ...] | None = None
    repeat: int = 1
    workload: str = K.WORKLOAD
    out: str = K.OUT["locust"]
    server_metrics_interval: float = 1.0
    """Seconds between reads of the server's /metrics inside a window (0: only at its open and close)."""
    reset_cache: bool = False
    """Empty the server's prefix cache before each stage."""
    keep_parts: bool = False
    """Also write each load process's own stage results (OUT/parts/), before merging."""
    url: str | None = None
    """One port for every target that names none: servers started in turn by their ``start`` commands."""
    max_stage_s: float | None = None
    max_run_s: float | None = None
    """Time budgets (``loadgen crossover``): per stage, and for the whole run."""
    targets: list[TargetConf] = field(default_factory=list)
    """Empty: start the embedded simulator once per ``simulator.modes``."""
    simulator: SimConf = field(default_factory=SimConf)
    source: str = "defaults"
    given: set[str] = field(default_factory=set, compare=False, repr=False)
    """The knobs' TOML keys the file set ("run.workload", "simulator.time_scale"): what ``overlay`` takes."""

    @property
    def uses_simulator(self) -> bool:
        return not self.targets


# --------------------------------------------------------------------------- checking values


class _Checker:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, msg: str) -> LoadgenError:
        return LoadgenError(f"{self.source}: {key}: {msg}" if self.source else f"{key}: {msg}")

    @staticmethod
    def _kind(v: Any) -> str:
        return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
                dict: "a table"}.get(type(v), type(v).__name__)

    def string(self, key: str, v: Any) -> str:
        if not isinstance(v, str):
            raise self.fail(key, f"expected a string, got {self._kind(v)} ({v!r})")
        return v

    def boolean(self, key: str, v: Any) -> bool:
        if not isinstance(v, bool):
            raise self.fail(key, f"expected true or false, got {self._kind(v)} ({v!r})")
        return v

    def integer(self, key: str, v: Any, lo: int | None = None) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(key, f"expected a whole number, got {self._kind(v)} ({v!r})")
        if lo is not None and v < lo:
            raise self.fail(key, f"must be >= {lo}, got {v}")
        return v

    def number(self, key: str, v: Any, positive: bool = True, lo: float | None = None,
               above: float | None = None) -> float:
        """A number: > 0 (``positive``), >= ``lo``, > ``above``."""
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.fail(key, f"expected a number, got {self._kind(v)} ({v!r})")
        if positive and not v > 0:
            raise self.fail(key, f"must be > 0, got {v:g}")
        if lo is not None and not v >= lo:
            raise self.fail(key, f"must be >= {lo:g}, got {v:g}")
        if above is not None and not v > above:
            raise self.fail(key, f"must be > {above:g}, got {v:g}")
        return float(v)

    def seconds(self, key: str, v: Any, allow_zero: bool = False) -> float:
        if isinstance(v, bool):
            raise self.fail(key, f"expected a duration (e.g. 30 or \"30s\"), got a boolean ({v!r})")
        if isinstance(v, (int, float)):
            s = float(v)
        elif isinstance(v, str):
            try:
                s = parse_duration(v, key)
            except LoadgenError:
                raise self.fail(key, f"{v!r} is not a duration (e.g. 30, \"30s\", \"2m\", \"500ms\")") from None
        else:
            raise self.fail(key, f"expected a duration (e.g. 30 or \"30s\"), got {self._kind(v)} ({v!r})")
        if s < 0 or (s == 0 and not allow_zero):
            raise self.fail(key, f"must be {'>= 0' if allow_zero else '> 0'}, got {v!r}")
        return s

    def ladder(self, key: str, v: Any) -> tuple[int, ...]:
        """A TOML list of concurrencies, or a Locust option's text parsed as the flag's (settings/parse.ladder)."""
        if isinstance(v, str):
            try:
                return tuple(parse_ladder(v, key))
            except LoadgenError as exc:
                raise self.fail(key, str(exc).split(": ", 1)[-1]) from None
        if not isinstance(v, list):
            raise self.fail(key, f"expected a list of concurrencies like [1, 2, 5], got {self._kind(v)} ({v!r})")
        if not v:
            raise self.fail(key, "the list of concurrencies is empty")
        for x in v:
            if isinstance(x, bool) or not isinstance(x, int):
                raise self.fail(key, f"expected whole numbers, got {self._kind(x)} ({x!r})")
            if x < 1:
                raise self.fail(key, f"concurrencies must be >= 1, got {x}")
        for a, b in zip(v, v[1:]):
            if b <= a:
                raise self.fail(key, f"concurrencies must increase, got {b} after {a}")
        return tuple(v)

    def rates(self, key: str, v: Any) -> tuple[float, ...]:
        """A ladder of rates (req/s) or trace speeds: numbers > 0, increasing (a Locust option gives text)."""
        if isinstance(v, str):
            try:
                v = parse_rates(v, key)
            except LoadgenError as exc:
                raise self.fail(key, str(exc).split(": ", 1)[-1]) from None
        if not isinstance(v, list) or not v:
            raise self.fail(key, f"expected a list of rates like [1, 2, 5.5], got {self._kind(v)} ({v!r})")
        for x in v:
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not x > 0:
                raise self.fail(key, f"expected numbers > 0, got {x!r}")
        for a, b in zip(v, v[1:]):
            if b <= a:
                raise self.fail(key, f"rates must increase, got {b} after {a}")
        return tuple(float(x) for x in v)

    def arrival(self, key: str, v: Any) -> str:
        if not isinstance(v, str):
            raise self.fail(key, f"expected \"poisson\", \"constant\" or \"gamma:CV\", got {self._kind(v)} ({v!r})")
        try:
            return parse_arrival(v, key)
        except LoadgenError as exc:
            raise self.fail(key, str(exc).split(": ", 1)[-1]) from None

    def length(self, key: str, v: Any) -> str:
        from loadgen.workloads import Length

        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise self.fail(key, f"expected a token count or 'normal:MEAN,STD' / 'uniform:LO,HI', got {self._kind(v)}")
        try:
            Length.parse(v, key)
        except LoadgenError as exc:
            raise self.fail(key, f"{str(v)!r}: {str(exc).split(': ', 1)[-1]}") from None
        return str(v)

    def word(self, key: str, v: Any) -> str:
        """A name such as a workload: stripped, not empty."""
        v = self.string(key, v).strip()
        if not v:
            raise self.fail(key, "is empty")
        return v

    def nonblank(self, key: str, v: Any) -> str:
        """A path such as run.out: not blank (kept as given)."""
        v = self.string(key, v)
        if not v.strip():
            raise self.fail(key, "is empty")
        return v

    def faults(self, key: str, v: Any) -> str:
        """A ``loadgen sim --faults`` spec (loadgen.sim.faults), checked now."""
        from loadgen.sim.faults import parse as parse_faults

        v = self.nonblank(key, v)
        try:
            parse_faults(v)
        except LoadgenError as exc:
            raise self.fail(key, str(exc).split(": ", 1)[-1]) from None
        return v

    def choice(self, key: str, v: Any, choices: tuple[str, ...]) -> str:
        v = self.string(key, v)
        if v not in choices:
            raise self.fail(key, f"expected one of {', '.join(choices)}, got {v!r}")
        return v

    def url(self, key: str, v: Any) -> str:
        url = self.string(key, v)
        p = urlparse(url)
        if p.scheme not in ("http", "https") or not p.netloc:
            raise self.fail(key, f"{redact.url(url)!r} is not an http(s) URL (e.g. http://127.0.0.1:8000)")
        try:
            port = p.port
        except ValueError:  # not a number, or past 65535
            port = -1
        if not p.hostname or port == -1 or port == 0:
            what = "no host" if not p.hostname else f"port {p.netloc.rpartition(':')[2]!r} is not 1-65535"
            raise self.fail(key, f"{redact.url(url)!r}: {what}")
        return url.rstrip("/")

    def path(self, key: str, v: Any) -> str:
        """A URL path such as a health check's: it starts with '/'."""
        v = self.string(key, v)
        if not v.startswith("/"):
            raise self.fail(key, f"expected a path like \"/health\", got {v!r}")
        return v

    def modes(self, key: str, modes: Any) -> tuple[str, ...]:
        """A list of simulator modes, the first the reference (a Locust option gives them comma-separated).
        Which modes exist is the profile's to say: the simulators are checked against it before they start."""
        if isinstance(modes, str):
            modes = [m.strip() for m in modes.split(",") if m.strip()]
        if not isinstance(modes, list) or not modes:
            raise self.fail(key, f"expected a non-empty list like [\"baseline\", \"spec\"], got {modes!r}")
        for m in modes:
            if not isinstance(m, str) or not LABEL.match(m):
                raise self.fail(key, f"expected mode names such as \"baseline\", \"spec\", \"spec-topk4\", got {m!r}")
        if len(set(modes)) != len(modes):
            raise self.fail(key, f"{modes!r} names a mode twice")
        return tuple(modes)

    def value(self, key: str, k: Knob, v: Any) -> Any:
        """A TOML value for knob ``k``, checked its way (``key`` names it in the error)."""
        return getattr(self, k.check)(key, v, **k.check_kw)

    def table(self, key: str, v: Any) -> dict:
        if not isinstance(v, dict):
            raise self.fail(key, f"expected a table, got {self._kind(v)} ({v!r})")
        return v

    def known(self, key: str, table: dict, allowed: tuple[str, ...]) -> None:
        for k in table:
            if k not in allowed:
                where = f"{key}.{k}" if key else k
                near = difflib.get_close_matches(k, allowed, n=1, cutoff=0.6)
                if near:
                    raise self.fail(where, f"unknown key: did you mean {(key + '.') if key else ''}{near[0]}?")
                raise self.fail(where, f"unknown key (known{' in [' + key + ']' if key else ''}: {', '.join(allowed)})")


# The [run] and [simulator] keys are the knobs' (settings/knobs.py), in their order there.
RUN_KEYS = tuple(k.toml.split(".", 1)[1] for _, k in K.toml_knobs("run"))
SLO_KEYS = tuple(m.slo_key for m in SLO_METRICS)  # the metrics registry says which metrics take an SLO
TARGET_KEYS = ("url", "protocol", "model", "headers", "api_key", "spec_details", "start", "health", "stop_signal",
               "startup_timeout", "adaptive")
SIM_KEYS = tuple(k.toml.split(".", 1)[1] for _, k in K.toml_knobs("simulator"))
TOP_KEYS = ("run", "slo", "targets", "simulator", "tool")


def _set(cfg: RampConfig, attr: str, value: Any) -> None:
    """``attr`` of the config, or of its simulator ("simulator.time_scale")."""
    obj, _, name = attr.rpartition(".")
    setattr(getattr(cfg, obj) if obj else cfg, name, value)


def get(cfg: RampConfig, attr: str) -> Any:
    obj, _, name = attr.rpartition(".")
    return getattr(getattr(cfg, obj) if obj else cfg, name)


def parse(doc: dict, source: str = "config") -> RampConfig:
    """A parsed TOML document → RampConfig, or LoadgenError naming the key."""
    c = _Checker(source)
    cfg = RampConfig(source=source)
    c.known("", doc, TOP_KEYS)
    run = c.table("run", doc.get("run", {}))
    c.known("run", run, RUN_KEYS)
    for _, k in K.toml_knobs("run"):
        key = k.toml.split(".", 1)[1]
        if key in run:
            _set(cfg, k.attr, c.value(k.toml, k, run[key]))
            cfg.given.add(k.toml)
    if "requests" in run and "duration" not in run:
        cfg.duration_s = None  # a window closed by its request count only

    slo = c.table("slo", doc.get("slo", {}))
    c.known("slo", slo, SLO_KEYS)
    cfg.slo = {k: c.number(f"slo.{k}", v) for k, v in slo.items()}

    targets = c.table("targets", doc.get("targets", {}))
    for label, t in targets.items():
        key = f"targets.{label}"
        t = c.table(key, t)
        c.known(key, t, TARGET_KEYS)
        if "url" not in t and cfg.url is None:
            raise c.fail(f"{key}.url", "missing (every target needs a url, or run.url gives one for all)")
        if "url" in t:
            url = c.url(f"{key}.url", t["url"])
        else:
            url = cfg.url
            if "start" not in t:
                raise c.fail(f"{key}.start", "missing: a target on run.url's shared port needs the command that "
                             "starts its server")
        tc = TargetConf(label, url)
        if "protocol" in t:
            tc.protocol = c.string(f"{key}.protocol", t["protocol"])
            if tc.protocol not in PROTOCOLS:
                raise c.fail(f"{key}.protocol", f"unknown protocol {tc.protocol!r} (known: {', '.join(PROTOCOLS)})")
        if "model" in t:
            tc.model = c.string(f"{key}.model", t["model"])
        if "headers" in t:
            h = c.table(f"{key}.headers", t["headers"])
            tc.headers = {k: c.string(f"{key}.headers.{k}", v) for k, v in h.items()}
        if "api_key" in t:  # sent as "Authorization: Bearer KEY" (an OpenAI-compatible server's --api-key)
            api_key = c.string(f"{key}.api_key", t["api_key"])
            if not any(k.lower() == "authorization" for k in tc.headers):
                tc.headers["Authorization"] = f"Bearer {api_key}"
            redact.remember(api_key)
        redact.remember_headers(tc.headers)  # sent, never written (loadgen/redact.py)
        redact.remember_url(url)
        if "spec_details" in t:
            tc.spec_details = c.boolean(f"{key}.spec_details", t["spec_details"])
        if "start" in t:
            tc.start = c.string(f"{key}.start", t["start"]).strip() or None
        if "health" in t:
            tc.health = c.string(f"{key}.health", t["health"])
            if not tc.health.startswith("/"):
                raise c.fail(f"{key}.health", f"expected a path like \"/health\", got {tc.health!r}")
        if "stop_signal" in t:
            tc.stop_signal = c.string(f"{key}.stop_signal", t["stop_signal"]).upper()
            if not isinstance(getattr(signal, tc.stop_signal, None), signal.Signals):
                raise c.fail(f"{key}.stop_signal", f"unknown signal {t['stop_signal']!r} (e.g. SIGINT, SIGTERM)")
        if "adaptive" in t:
            tc.adaptive = c.boolean(f"{key}.adaptive", t["adaptive"])
        if not LABEL.match(label):
            raise c.fail(key, f"{label!r} is not a label (letters, digits, '_', '.', '+', '-')")
        if "startup_timeout" in t:
            tc.startup_timeout_s = c.seconds(f"{key}.startup_timeout", t["startup_timeout"])
        cfg.targets.append(tc)

    sim = c.table("simulator", doc.get("simulator", {}))
    c.known("simulator", sim, SIM_KEYS)
    for _, k in K.toml_knobs("simulator"):
        key = k.toml.split(".", 1)[1]
        if key in sim:
            _set(cfg, k.attr, c.value(k.toml, k, sim[key]))
            cfg.given.add(k.toml)
    return cfg


def load(path: str | Path | None) -> RampConfig:
    """The config file at ``path`` (None: all defaults)."""
    if path is None:
        return RampConfig()
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise LoadgenError(f"config file not found: {p}") from None
    except OSError as exc:
        raise LoadgenError(f"{p}: cannot read: {exc.strerror}") from None
    try:
        doc = tomli.loads(text)
    except tomli.TOMLDecodeError as exc:
        raise LoadgenError(f"{p}: not valid TOML: {exc}") from None
    return parse(doc, p.name)


def check_workload(cfg: RampConfig) -> None:
    """The workload and lengths resolve (a typo fails now, not on the first request)."""
    from loadgen.workloads import Lengths, resolve

    try:
        lengths = Lengths.parse(cfg.prompt_tokens, cfg.max_tokens, cfg.tokenizer, cfg.ignore_eos)
        resolve(cfg.workload, lengths)
    except LoadgenError as exc:
        raise LoadgenError(f"{cfg.source}: run.workload: {exc}") from None


def with_overrides(cfg: RampConfig, **cli: Any) -> RampConfig:
    """Locust's options (command line or web UI form, text) over the file, by dest; None or "" = not given.

    Each option sets its knob's attribute, checked as its TOML key is but named by its flag."""
    c = _Checker("")
    cfg = replace(cfg, simulator=replace(cfg.simulator), targets=list(cfg.targets))

    def given(k: str) -> bool:
        v = cli.get(k)
        return v is not None and not (isinstance(v, str) and not v.strip())

    for name, k in K.knobs("locust"):
        v = cli.get(name)
        if k.check == "boolean":  # a flag: given sets it, not given leaves the file's
            if v in (True, "true"):
                _set(cfg, k.attr, True)
            continue
        if not given(name):
            continue
        if k.check == "integer" and isinstance(v, str):
            try:
                v = int(v)
            except ValueError:
                raise c.fail(k.flag, f"expected a whole number, got {v!r}") from None
        elif k.check == "number":
            try:
                v = float(v)
            except (TypeError, ValueError):
                raise c.fail(k.flag, f"expected a number, got {v!r}") from None
        elif k.check in ("string", "word", "nonblank"):
            v = str(v)
        _set(cfg, k.attr, c.value(k.flag, k, v))
    if given("requests") and not given("duration"):
        cfg.duration_s = None  # a window closed by its request count only
    return cfg


def overlay(s: K.Settings, cfg: RampConfig, defaults: K.Settings, front: str) -> None:
    """``loadgen crossover --config``: each of ``front``'s knobs with a TOML key that the flags left at its
    default (``defaults``, typed) takes the config's value, already checked and typed by :func:`parse`, where
    the file set it: a key it left out keeps the front's default (crossover's simulator time scale 5, not the
    file's 1 of the Locust ramp)."""
    for name, k in K.knobs(front):
        if not (k.toml and k.from_config) or getattr(s, name) != getattr(defaults, name):
            continue
        if k.toml == "slo":
            if cfg.slo:
                s.slo = Slo(**cfg.slo)
            continue
        if k.toml not in cfg.given:
            continue
        v = get(cfg, k.attr)
        if v is None:
            continue
        setattr(s, name, list(v) if k.check in ("ladder", "rates") else v)


def check_flag(k: Knob, v: Any) -> None:
    """A flag's value, checked as its knob's TOML value is (``k.check``), named by the flag."""
    _Checker("").value(k.flag, k, v)


def check_url(key: str, v: Any) -> str:
    """An http(s) base URL without its trailing slash, or one line naming ``key``."""
    return _Checker("").url(key, v)


def check_reachable(targets: list[TargetConf], timeout_s: float = 3.0, source: str = "config") -> None:
    """Each target accepts a TCP connection; else one line naming the key and URL."""
    for t in targets:
        p = urlparse(t.url)
        port = p.port or (443 if p.scheme == "https" else 80)
        try:
            with socket.create_connection((p.hostname, port), timeout=timeout_s):
                pass
        except OSError as exc:
            why = exc.strerror or str(exc) or type(exc).__name__
            if isinstance(exc, socket.timeout):
                why = f"no answer within {timeout_s:g} s"
            raise LoadgenError(f"{source}: targets.{t.label}.url: cannot reach {t.url}: {why}") from None

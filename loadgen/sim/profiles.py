"""Simulator profiles: a deployment's cost model, caps and acceptance, read from TOML.

A profile describes one (hardware, model, speculative config) deployment well
enough to reproduce its throughput-vs-concurrency curve. Built-in profiles live
in ``loadgen/sim/profiles/*.toml``; ``--profile`` also accepts a path.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

import tomli

from loadgen.errors import LoadgenError

PROFILE_DIR = Path(__file__).with_name("profiles")


@dataclass(frozen=True)
class Cost:
    """Forward-pass costs in milliseconds (at time-scale 1).

    A target-model forward costs ``floor + comm + per_request*B + per_token*T
    + expert*coverage(T) + quad*B^2`` for B requests and T tokens in the batch;
    a decode step has T = B, a verify step T = B * draft tokens.
    """

    floor_ms: float
    """Kernel launches and dense weight reads: paid once per target forward."""
    comm_ms: float = 0.0
    """Tensor-parallel all-reduces: paid once per forward, draft forwards too (PCIe makes it large)."""
    per_request_ms: float = 0.0
    """KV-cache reads, sampling and scheduler CPU per request in the batch."""
    per_token_ms: float = 0.0
    """Compute per token in the batch (verify tokens count)."""
    expert_ms: float = 0.0
    """MoE: time to stream every expert's weights; a forward pays the fraction its tokens touch."""
    experts: int = 0
    experts_per_token: int = 0
    quad_ms: float = 0.0
    """Superlinear batch overhead (large eager batches, attention metadata), per request squared."""
    cuda_graph_max_bs: int = 0
    """Largest decode batch run from a captured CUDA graph (0 = every size); larger ones run eagerly."""
    eager_ms: float = 0.0
    """Extra launch overhead of an eager (non-graph) forward, paid per forward beyond cuda_graph_max_bs."""
    prefill_floor_ms: float = 0.0
    """A prefill forward's fixed cost (it pauses the decode batch, as SGLang does by default)."""
    prefill_per_token_ms: float = 0.0
    draft_floor_ms: float = 0.0
    """One draft-model forward's own cost (comm_ms is added on top)."""
    draft_per_request_ms: float = 0.0
    spec_overhead_ms: float = 0.0
    """Per speculative step: tree build, verify bookkeeping."""
    spec_prefill_factor: float = 1.0
    """Prefill cost multiplier under speculation (the draft model extends the prompt too)."""
    cpu_ms: float = 0.0
    """Scheduler CPU per speculative step that overlap scheduling hides behind the GPU; paid only
    by a mode whose spec has overlap = false."""
    cpu_per_request_ms: float = 0.0
    """Per request in the batch, the same (tree building, sampling, bookkeeping on the host)."""


@dataclass(frozen=True)
class Acceptance:
    """Per-draft-token acceptance probability by prompt class (see acceptance.py)."""

    copy: float = 0.9
    code: float = 0.8
    structured: float = 0.75
    chat: float = 0.6
    creative: float = 0.35
    temperature_penalty: float = 0.25
    """Acceptance falls by this fraction per unit of temperature (sampling diverges from the draft)."""
    jitter: float = 0.05
    """Per-prompt spread around the class value, so prompts of one class differ a little."""


@dataclass(frozen=True)
class Spec:
    algorithm: str = "EAGLE3"
    num_steps: int = 2
    eagle_topk: int = 1
    num_draft_tokens: int = 3
    max_running_requests: int = 48
    """SGLang forces 48 under speculation when the flag is unset."""
    cuda_graph_max_bs: int = 0
    """Overrides cost.cuda_graph_max_bs under speculation (0 = keep it); SGLang sizes it smaller there."""
    adaptive_off_batch: int = 64
    """With --speculative-adaptive, speculation is off at this batch size and above (SGLang's bs>=64 tier)."""
    adaptive_band: int = 0
    """Hysteresis: once off, speculation comes back on only at a batch below adaptive_off_batch - adaptive_band
    (0 = the naive threshold, on at every batch below adaptive_off_batch; must stay below adaptive_off_batch)."""
    adaptive_switch_ms: float = 0.0
    """A decode step that changes the speculation state costs this much more (a real engine re-captures its
    graphs or rebuilds the draft state)."""
    tree_branches: float = 0.0
    """Effective draft branches per depth of the verified tree (0 = from topk and the tree's size,
    model.branches); a fitted figure where a measured column says how a topk>1 tree accepts."""
    overlap: bool = True
    """Overlap scheduling (SGLang's spec v2): the host's per-step work runs while the GPU computes.
    False makes every speculative step pay cost.cpu_ms + cost.cpu_per_request_ms per request."""


_MODE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
BUILTIN_MODES = ("baseline", "spec")


@dataclass(frozen=True)
class Mode:
    """One configuration of a profile's deployment: how it differs from the profile's [spec] and [cost].

    ``baseline`` and ``spec`` exist in every profile; a ``[modes.NAME]`` table adds others, with
    ``speculative`` / ``adaptive`` and ``[modes.NAME.spec]`` / ``[modes.NAME.cost]`` overriding
    the profile's values for that mode only.
    """

    name: str
    description: str = ""
    speculative: bool = True
    adaptive: bool = False
    """Speculation off at spec.adaptive_off_batch and above, as --speculative-adaptive."""
    spec: tuple[tuple[str, object], ...] = ()
    cost: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    cost: Cost
    spec: Spec = field(default_factory=Spec)
    acceptance: Acceptance = field(default_factory=Acceptance)
    model_name: str = "default"
    context_length: int = 32768
    baseline_max_running_requests: int = 1024
    max_prefill_tokens: int = 16384
    eos_token_id: int = 2
    prefix_cache_tokens: int = 0
    """Tokens of prefix cache the server keeps (``loadgen sim --prefix-cache`` overrides it); 0: none."""
    calibration: str = ""
    """Free text: what traffic the profile was calibrated for."""
    source: str = ""
    extra_modes: tuple[Mode, ...] = ()
    """The profile's [modes.*] tables, in file order."""
    resolved_mode: str = ""
    """Set by for_mode: this profile's spec and cost already are that mode's."""

    def modes(self) -> list[str]:
        """Every mode ``--mode`` accepts for this profile."""
        return [*BUILTIN_MODES, *(m.name for m in self.extra_modes)]

    def mode(self, name: str) -> Mode:
        if name == "baseline":
            return Mode("baseline", speculative=False)
        if name == "spec":
            return Mode("spec")
        for m in self.extra_modes:
            if m.name == name:
                return m
        raise LoadgenError(f"profile {self.name} has no mode {name!r} (its modes: {', '.join(self.modes())})")

    def check_modes(self, modes, where: str) -> None:
        """Every one of ``modes`` is this profile's, before any simulator starts: else one line, ``where``
        (the flag or key that named them) first, naming the first that is not and the modes there are."""
        have = self.modes()
        for m in modes:
            if m not in have:
                raise LoadgenError(f"{where}: profile {self.name} has no mode {m!r} (it has: {', '.join(have)})")

    def is_speculative(self, mode: str) -> bool:
        return self.mode(mode).speculative

    def is_adaptive(self, mode: str) -> bool:
        return self.mode(mode).adaptive

    def for_mode(self, mode: str) -> Profile:
        """This profile with ``mode``'s spec and cost overrides applied (idempotent for one mode)."""
        if self.resolved_mode == mode:
            return self
        if self.resolved_mode:
            raise LoadgenError(f"profile {self.name} is already resolved for mode {self.resolved_mode}, not {mode}")
        m = self.mode(mode)
        return dataclasses.replace(self, spec=dataclasses.replace(self.spec, **dict(m.spec)),
                                   cost=dataclasses.replace(self.cost, **dict(m.cost)), resolved_mode=mode)

    def max_running(self, mode: str) -> int:
        if not self.is_speculative(mode):
            return self.baseline_max_running_requests
        return self.for_mode(mode).spec.max_running_requests


def builtin_names() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))


def _build(cls: type, data: dict, where: str):
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise LoadgenError(f"{where}: unknown key(s) {', '.join(unknown)}")
    try:
        obj = cls(**data)
    except TypeError as exc:
        raise LoadgenError(f"{where}: {exc}") from None
    for f in fields(obj):
        value = getattr(obj, f.name)
        if f.type == "bool" and not isinstance(value, bool):
            raise LoadgenError(f"{where}: {f.name} must be true or false, got {value!r}")
        if f.type in ("float", "int") and (
            not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0
        ):
            raise LoadgenError(f"{where}: {f.name} must be a non-negative number, got {value!r}")
    return obj


def _check_spec(spec: Spec, where: str) -> None:
    if spec.num_draft_tokens < 2 or spec.num_steps < 1:
        raise LoadgenError(f"{where}: need num_steps >= 1 and num_draft_tokens >= 2")
    check_band(spec, f"{where}: adaptive_band")


def check_band(spec: Spec, what: str) -> None:
    """``what`` (the key or flag that set it) names the problem: a band that leaves no batch to come back on at."""
    if spec.adaptive_band >= spec.adaptive_off_batch:
        raise LoadgenError(f"{what} must be below adaptive_off_batch ({spec.adaptive_off_batch}), "
                           f"got {spec.adaptive_band}")


def _parse_modes(tables: object, spec: Spec, cost: Cost, origin: str) -> tuple[Mode, ...]:
    """The [modes.*] tables; each override is checked by building the mode's own Spec and Cost."""
    if not isinstance(tables, dict):
        raise LoadgenError(f"{origin}: [modes] must be a table of [modes.NAME] tables")
    out = []
    for name, table in tables.items():
        where = f"{origin} [modes.{name}]"
        if not isinstance(table, dict):
            raise LoadgenError(f"{where}: must be a table")
        if name in BUILTIN_MODES or not _MODE_NAME.match(name):
            raise LoadgenError(f"{where}: a mode needs its own lower-case name (not baseline or spec)")
        table = dict(table)
        spec_over, cost_over = table.pop("spec", {}), table.pop("cost", {})
        mode_spec = _build(Spec, {**dataclasses.asdict(spec), **spec_over}, f"{where}.spec")
        _check_spec(mode_spec, f"{where}.spec")
        mode_cost = _build(Cost, {**dataclasses.asdict(cost), **cost_over}, f"{where}.cost")
        if mode_cost.floor_ms <= 0:
            raise LoadgenError(f"{where}.cost: floor_ms must be > 0")
        m = _build(Mode, {**table, "name": name}, where)
        out.append(dataclasses.replace(m, spec=tuple(spec_over.items()), cost=tuple(cost_over.items())))
    return tuple(out)


def parse(data: dict, origin: str) -> Profile:
    """A Profile from TOML data; every problem is a one-line LoadgenError naming ``origin``."""
    data = dict(data)
    try:
        cost = _build(Cost, data.pop("cost"), f"{origin} [cost]")
    except KeyError:
        raise LoadgenError(f"{origin}: missing [cost] table") from None
    spec = _build(Spec, data.pop("spec", {}), f"{origin} [spec]")
    acc = _build(Acceptance, data.pop("acceptance", {}), f"{origin} [acceptance]")
    modes = _parse_modes(data.pop("modes", {}), spec, cost, origin)
    data.setdefault("name", Path(origin).stem)
    data.setdefault("description", "")
    if "resolved_mode" in data:
        raise LoadgenError(f"{origin}: unknown key(s) resolved_mode")
    prof = _build(Profile, {**data, "cost": cost, "spec": spec, "acceptance": acc, "extra_modes": modes}, origin)
    if cost.floor_ms <= 0:
        raise LoadgenError(f"{origin} [cost]: floor_ms must be > 0")
    _check_spec(spec, f"{origin} [spec]")
    return prof


def load(name_or_path: str) -> Profile:
    """A built-in profile by name, or a TOML file by path."""
    path = Path(name_or_path)
    if name_or_path.endswith(".toml") or path.exists():
        if not path.is_file():
            raise LoadgenError(f"profile file not found: {name_or_path}")
    else:
        path = PROFILE_DIR / f"{name_or_path}.toml"
        if not path.is_file():
            raise LoadgenError(
                f"unknown profile {name_or_path!r} (built-in: {', '.join(builtin_names())}; or give a .toml path)"
            )
    try:
        data = tomli.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise LoadgenError(f"cannot read profile {path}: {exc}") from None
    except tomli.TOMLDecodeError as exc:
        raise LoadgenError(f"bad profile file {path}: {exc}") from None
    return parse(data, str(path))


def with_spec(profile: Profile, **changes) -> Profile:
    """The profile with some speculative settings overridden (from CLI flags)."""
    return dataclasses.replace(profile, spec=dataclasses.replace(profile.spec, **changes))

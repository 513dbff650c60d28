"""What an engine module fills in: the types every engine shares, and the quantities loadgen reads.

In: nothing. Out: :class:`Engine` and its parts — :class:`Probe` (how the probe tells it from others),
:class:`Metrics` (its ``/metrics`` series and when they move), :class:`Reset` (how its prefix cache is
emptied), :class:`Terms` (its per-batch speculation setting, if any) — and the typed hand-offs of the
engine terms (:class:`SpecSetup`, :class:`Tier`, :class:`Setting`). Plain data and pure functions: the
HTTP stays with whoever asks (run/probe.py, serverview/).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence


@dataclass(frozen=True)
class Series:
    """Where one quantity lives on a page."""

    names: tuple[str, ...]
    """Aliases across versions; the first present on the page is read."""
    agg: str = "sum"
    """Over label sets: "sum" (counts, requests over data-parallel ranks) or "mean" (ratios)."""
    where: Mapping[str, str] = field(default_factory=dict)
    """Only label sets with these label values (vLLM's request_success_total{finished_reason="abort"})."""


def S(*names: str, agg: str = "sum", **where: str) -> Series:
    return Series(tuple(names), agg, dict(where))


COUNTERS = ("output_tokens", "prompt_tokens", "requests", "aborted_requests", "drafts", "draft_tokens",
            "accepted_tokens", "verify_calls", "cache_queries", "cache_hits", "preemptions",
            "decode_steps")
"""The counter quantities a window summary reports (each engine has a subset)."""

GAUGES = ("running", "queued", "kv_usage", "cache_hit_rate")
HISTOGRAMS = ("ttft", "itl", "e2e", "queue_time")


@dataclass(frozen=True)
class Metrics:
    """An engine's ``/metrics``: sample names as ``prometheus_client``'s parser yields them (counters keep
    ``_total``); each quantity lists the aliases the engine used across versions, first found wins."""

    prefix: str
    """Every one of its sample names starts with it: a page carrying it is this engine's."""
    counters: Mapping[str, Series]
    gauges: Mapping[str, Series]
    histograms: Mapping[str, Series] = field(default_factory=dict)
    """Base names (no ``_bucket``/``_sum``/``_count``) of the server's latency histograms, in seconds."""
    per_position: Series | None = None
    """A counter labelled ``position="k"``: drafts whose k-th token was accepted."""
    busy_per_step: str | None = None
    """llama.cpp's ``n_busy_slots_per_decode`` gauge (mean busy slots per decode call since start)."""
    counted_when: str = "unknown"
    """"request_end": a request's tokens are added when it ends; "step": as they are produced."""
    counted_when_note: str = ""
    drafts_counted_before_cut: bool = False
    """Its draft counters take a step's accepted drafts before the output is cut at ``max_tokens`` or a stop, so
    a request's last step can count up to K accepted tokens its stream never carried (vLLM)."""
    kv_usage_note: str = ""
    rank_label: str | None = None
    """A label the engine writes one series per rank with, each the same batch: only rank "0" is read."""

    def name(self, quantity: str) -> str:
        """The first name of a counter, gauge or histogram quantity (what a simulator writes)."""
        for table in (self.counters, self.gauges, self.histograms):
            if quantity in table:
                return table[quantity].names[0]
        raise KeyError(quantity)

    def interval_names(self) -> set[str]:
        """What a sample between the edges needs: the gauges, and the counters a restart would move back."""
        out = {n for s in self.gauges.values() for n in s.names}
        for q in ("output_tokens", "requests", "decode_steps"):
            if q in self.counters:
                out.update(self.counters[q].names)
        return out


@dataclass(frozen=True)
class Probe:
    """What loadgen's probe (run/probe.py) asks a server to tell this engine from others, and what it keeps.

    The probe reads ``/v1/models`` first (its ``owned_by`` may name the engine), then, engine by engine in
    the registry's order, the info pages of those it may still be; the first whose page reads as its own wins.
    """

    owned_by: str = ""
    """The ``owned_by`` its ``/v1/models`` entries carry, where that names it ("" : it does not)."""
    info_paths: tuple[str, ...] = ()
    """GET in turn; the first JSON answer is its info page (none: told by ``owned_by`` alone)."""
    then_paths: tuple[str, ...] = ()
    """GET once the info page read as this engine's; their answers (decoded JSON, else the text; None where
    not 200) go to ``server_info``."""
    asked_always: bool = False
    """Its info page is asked even when ``/v1/models`` named another engine."""
    needs_owner: bool = False
    """Its info page is asked only when ``/v1/models`` named it (the page alone does not tell it apart)."""
    is_info: Callable[[Any], bool] = lambda page: False
    """Whether an info page (decoded JSON, or None) is this engine's."""
    server_info: Callable[..., dict] = lambda page, *then: dict(page)
    """``server_info`` from the info page and the ``then_paths`` answers."""


@dataclass(frozen=True)
class Reset:
    """How an engine's prefix cache is emptied: ``method path``; ``slots``: per slot (``path`` has ``{id}``),
    the ids listed by GET ``slots``. ``hints``: status → why, added to the error line."""

    method: str
    path: str
    busy: tuple[int, ...] = ()
    """Statuses meaning "requests still run": asked again for a while."""
    slots: str = ""
    hints: Mapping[int, str] = field(default_factory=dict)
    slots_hints: Mapping[int, str] = field(default_factory=dict)
    """On the ``slots`` listing's answer; key 0: any other status than 200."""


# --- engine terms: a per-batch speculation setting ------------------------------------------------


@dataclass
class SpecSetup:
    """One configuration as a per-batch setting needs it: its engine, whether it speculates, and the one
    number such a setting changes (SGLang's num_steps, vLLM's K); ``same`` is what must match across the
    policy's configurations for one server to play them all, ``why_not`` why this one cannot."""

    label: str
    engine: str
    speculative: bool | None
    steps: int | None
    same: dict[str, Any]
    info: dict[str, Any]
    why_not: str = ""


@dataclass(frozen=True)
class Tier:
    """One step of the policy as analysis/engineterms.py resolved it: from running batch ``start`` on (1 for
    the first), ``label``'s configuration; ``where`` says where the switch was measured ("" for the first)."""

    label: str
    start: int
    where: str
    tie: tuple[str, ...] = ()


@dataclass(frozen=True)
class Setting:
    """A per-batch setting in the engine's own spelling: ``config`` what it reads, ``flags`` its launch flags,
    ``text`` one sentence, ``caveat`` what it does not reproduce of the measured configurations."""

    text: str
    config: str
    caveat: str
    flags: str = ""


class Terms(Protocol):
    def setup(self, label: str, probe: Mapping) -> SpecSetup:
        """A configuration from what the probe found (run.json's ``run.servers[label]``)."""

    def write(self, tiers: Sequence[Tier], setups: Mapping[str, SpecSetup], reference: str) -> Setting:
        """The tiers (two or more) as the engine's setting."""


@dataclass(frozen=True)
class Engine:
    name: str
    """As run.json, crossover.json and the ``server`` block write it."""
    title: str = ""
    """As a sentence names it ("" : its name)."""
    cap_word: str = "its cap on running requests"
    """Its cap on running requests as its users set it (the report's words)."""
    probe: Probe = field(default_factory=Probe)
    speculative: Callable[[Mapping], bool | None] = lambda server_info: None
    """Whether the server decodes speculatively, from the ``server_info`` its probe kept; None: it does not say."""
    read_command: Callable[[Sequence[str]], dict] = lambda argv: {}
    """What the start command loadgen was given (its words) says of the server where the server itself does
    not (``server_info`` keys the probe kept win; these fill the gaps)."""
    closes_after_stream: str = ""
    """The ``Server`` header (its start) of a server that closes the connection right after every stream
    without saying so: the client drops such a connection instead of pooling it ("" : keeps them)."""
    native_protocol: str = ""
    """The client protocol (client/protocols) speaking its own API ("" : none)."""
    spec_details: bool = False
    """Its OpenAI routes report acceptance only when a request asks (``spec_details``)."""
    metrics: Metrics | None = None
    reset: Reset | None = None
    terms: Terms | None = None
    no_terms: str = ""
    """Why it has no per-batch setting, where ``terms`` is None ({engine}: the servers' engine name)."""

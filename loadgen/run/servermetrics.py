"""The server's own counters over a window: two scrapes of its Prometheus ``/metrics``, and their difference.

Use (what the runner does around a stage's steady window)::

    before = await servermetrics.scrape(session, base_url)   # at window open
    ...                                                      # the window
    after = await servermetrics.scrape(session, base_url)    # at window close
    stage_dict["server"] = servermetrics.window_summary(before, after)

``scrape`` never raises for a server fault (no ``/metrics``, HTTP errors, text that is not
Prometheus exposition, a timeout): it returns a :class:`Snapshot` whose ``ok`` is False and
whose ``error`` is one line naming the URL. ``window_summary`` turns two snapshots into a
JSON-able dict (see its docstring for every key), or a dict with ``"available": False`` and a
``"reason"`` when either scrape failed, the engine has no counters we know, or a counter went
backwards (the server restarted).

What the difference covers depends on *when* the engine adds to its counters. llama.cpp
(measured, tests/e2e/test_servermetrics_llama.py and docs/real-servers.md) adds a request's
tokens, drafts and accepted drafts all at once when the request **ends** (its slot is released,
also when it is cancelled); nothing moves while it streams. So a window's delta is the sum over
the requests that *ended* between the two scrapes, including the tokens they generated before
the window opened, and none of the tokens of requests still running at its close. It compares
with the client's "completion tokens of the requests that ended in the window", not with the
tokens whose chunks arrived in it; with requests much longer than the window the two differ by
up to a whole request per user. The summary says so in ``counted_when``.

Engines are told apart by their metric prefix (``llamacpp:``, ``vllm:``, ``sglang:``); each has
a :class:`Names` entry mapping the generic quantities to its metric names. Adding an engine or a
quantity (issue 14) is one entry here.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field

import aiohttp

_now = time.perf_counter_ns  # the clock loadgen stamps requests and windows with (CLOCK_MONOTONIC)

MAX_BYTES = 4 << 20
"""Largest /metrics body read (SGLang's with all histograms is ~100 kB)."""


@dataclass(frozen=True)
class Names:
    """One engine's metric names for the quantities a window summary reports (sample names, with ``_total``)."""

    prefix: str
    output_tokens: str
    drafts: str | None = None
    """Verify steps that checked a draft (llama.cpp, vLLM: "num_drafts")."""
    draft_tokens: str | None = None
    accepted_tokens: str | None = None
    accepted_per_position: str | None = None
    """A counter labelled ``position="k"``, k = 0 .. draft max - 1."""
    decode_steps: str | None = None
    """A counter of decode calls that moves while requests run (llama.cpp ``n_decode_total``)."""
    busy_per_step: str | None = None
    """A gauge: busy slots per decode call since start (llama.cpp ``n_busy_slots_per_decode``)."""
    counted_when: str = "unknown"
    """"request_end": a request's counts are added when it ends; "step": as they are produced."""
    counted_when_note: str = ""


ENGINES: dict[str, Names] = {
    "llama.cpp": Names(
        prefix="llamacpp:",
        output_tokens="llamacpp:tokens_predicted_total",
        drafts="llamacpp:spec_decode_num_drafts_total",
        draft_tokens="llamacpp:spec_decode_num_draft_tokens_total",
        accepted_tokens="llamacpp:spec_decode_num_accepted_tokens_total",
        accepted_per_position="llamacpp:spec_decode_num_accepted_tokens_per_pos_total",
        decode_steps="llamacpp:n_decode_total",
        busy_per_step="llamacpp:n_busy_slots_per_decode",
        counted_when="request_end",
        counted_when_note=("llama.cpp adds a request's tokens and drafts when the request ends (slot released, "
                           "also on cancel): these are the requests that ENDED between the two scrapes, with all "
                           "their tokens, not the tokens generated in the window (measured on b1-0c1e570)"),
    ),
    "vllm": Names(
        prefix="vllm:",
        output_tokens="vllm:generation_tokens_total",
        drafts="vllm:spec_decode_num_drafts_total",
        draft_tokens="vllm:spec_decode_num_draft_tokens_total",
        accepted_tokens="vllm:spec_decode_num_accepted_tokens_total",
        accepted_per_position="vllm:spec_decode_num_accepted_tokens_per_pos_total",
        counted_when="step",
        counted_when_note="vLLM (v1) counts per engine step; not checked against a running vLLM here",
    ),
    "sglang": Names(
        prefix="sglang:",
        output_tokens="sglang:generation_tokens_total",
        drafts="sglang:spec_verify_calls_total",
        counted_when="request_end",
        counted_when_note="SGLang counts finished requests (as loadgen.sim does); not checked against a running SGLang here",
    ),
}


@dataclass
class Snapshot:
    """One scrape of ``base_url + "/metrics"``.

    ``samples`` maps a sample's name to its value, summed over every label set except
    ``position`` (vLLM and SGLang label by model, engine, rank...: one server is one figure);
    ``per_position`` maps a per-position counter's name to {position: value}.
    ``t_ns`` is the midpoint of the request (``time.perf_counter_ns``, loadgen's clock);
    ``rtt_ns`` how long the scrape took (llama.cpp answers between decode steps: up to one
    step late).
    """

    url: str
    t_ns: int
    rtt_ns: int = 0
    ok: bool = False
    error: str = ""
    engine: str = "unknown"
    samples: dict[str, float] = field(default_factory=dict)
    per_position: dict[str, dict[int, float]] = field(default_factory=dict)

    def value(self, name: str | None) -> float | None:
        return self.samples.get(name) if name else None


def parse(text: str, url: str = "", t_ns: int = 0) -> Snapshot:
    """A Snapshot from Prometheus exposition text (``ok`` False with the parser's reason if it is not)."""
    snap = Snapshot(url=url, t_ns=t_ns)
    try:
        # Imported here: a machine without it (a bare GPU image) still runs; it loses only these figures.
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        snap.error = f"{url}: not read (prometheus_client is not installed: pip install prometheus_client)"
        return snap
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:  # the parser raises ValueError, IndexError, KeyError... on bad text
        snap.error = f"{url}: not Prometheus text ({type(exc).__name__}: {str(exc)[:120]})"
        return snap
    for fam in families:
        for s in fam.samples:
            labels = s.labels
            if "position" in labels:
                try:
                    pos = int(labels["position"])
                except ValueError:
                    continue
                d = snap.per_position.setdefault(s.name, {})
                d[pos] = d.get(pos, 0.0) + float(s.value)
            else:
                snap.samples[s.name] = snap.samples.get(s.name, 0.0) + float(s.value)
    names = set(snap.samples) | set(snap.per_position)
    for engine, n in ENGINES.items():
        if any(x.startswith(n.prefix) for x in names):
            snap.engine = engine
            break
    if not names:
        snap.error = f"{url}: no metrics in the answer"
        return snap
    snap.ok = True
    return snap


async def scrape(session: aiohttp.ClientSession, base_url: str, timeout_s: float = 5.0) -> Snapshot:
    """GET ``base_url/metrics`` once; never raises for what the server does.

    Returns a :class:`Snapshot`: ``ok`` True with the parsed samples, or ``ok`` False and
    ``error`` one line such as ``"http://h:p/metrics: HTTP 404"``, ``"...: not Prometheus text
    (...)"``, ``"...: ClientConnectorError: ..."``, ``"...: no answer in 5 s"``. Use a session
    of your own (or the client's); the request is small and the answer is read whole.
    Cancellation (``asyncio.CancelledError``) is passed on.
    """
    url = base_url.rstrip("/") + "/metrics"
    t0 = _now()
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            body = await r.content.read(MAX_BYTES)
            t1 = _now()
            if r.status != 200:
                return Snapshot(url=url, t_ns=(t0 + t1) // 2, rtt_ns=t1 - t0, error=f"{url}: HTTP {r.status}")
            ctype = r.headers.get("Content-Type", "")
    except asyncio.TimeoutError:
        t1 = _now()
        return Snapshot(url=url, t_ns=(t0 + t1) // 2, rtt_ns=t1 - t0, error=f"{url}: no answer in {timeout_s:g} s")
    except (aiohttp.ClientError, OSError) as exc:
        t1 = _now()
        return Snapshot(url=url, t_ns=(t0 + t1) // 2, rtt_ns=t1 - t0,
                        error=f"{url}: {type(exc).__name__}: {str(exc)[:200]}")
    if "json" in ctype or "html" in ctype:
        return Snapshot(url=url, t_ns=(t0 + t1) // 2, rtt_ns=t1 - t0,
                        error=f"{url}: not Prometheus text (Content-Type {ctype})")
    snap = parse(body.decode("utf-8", "replace"), url, (t0 + t1) // 2)
    snap.rtt_ns = t1 - t0
    return snap


def _delta(before: Snapshot, after: Snapshot, name: str | None) -> float | None:
    if not name:
        return None
    a, b = after.samples.get(name), before.samples.get(name)
    if a is None or b is None:
        return None
    return a - b


def _num(x: float | None):
    """Counters are integers on every engine we know; keep them ints in JSON."""
    if x is None:
        return None
    return int(x) if float(x).is_integer() else round(x, 6)


def _busy_slot_steps(before: Snapshot, after: Snapshot, names: Names) -> dict:
    if not (names.decode_steps and names.busy_per_step):
        return {"busy_slot_steps": None, "busy_slot_steps_error": None}
    vals = [(s.samples.get(names.decode_steps), s.samples.get(names.busy_per_step)) for s in (before, after)]
    if any(n is None or g is None for n, g in vals):
        return {"busy_slot_steps": None, "busy_slot_steps_error": None}
    (n0, g0), (n1, g1) = vals

    def err(n: float, g: float) -> float:
        # llama.cpp writes the gauge with C++'s default 6 significant digits
        return 0.0 if g == 0 else 0.5 * 10 ** (math.floor(math.log10(abs(g))) - 5) * n

    return {"busy_slot_steps": round(n1 * g1 - n0 * g0), "busy_slot_steps_error": math.ceil(err(n0, g0) + err(n1, g1))}


def window_summary(before: Snapshot | None, after: Snapshot | None) -> dict:
    """The server's counters between two scrapes, as a JSON-able dict.

    When it cannot be had: ``{"available": False, "reason": str, "url": str}`` (a scrape
    failed or is missing, the engine's counters are unknown, the engines differ, or a
    counter went backwards: a restart). Otherwise ``"available": True`` and:

    - ``engine``: "llama.cpp" | "vllm" | "sglang"; ``url``.
    - ``interval_s``: seconds between the two scrapes' midpoints (compare with the window);
      ``scrape_rtt_ms``: [before, after] duration of each scrape.
    - ``counted_when``: "request_end" (llama.cpp: the counts are those of the requests that
      ENDED between the scrapes, with all their tokens) or "step" (vLLM, unchecked);
      ``counted_when_note``: the same in words, with where it was measured.
    - ``output_tokens``: generated tokens (llama.cpp ``tokens_predicted_total``).
    - ``drafts``: verify steps that checked a draft (``spec_decode_num_drafts_total``);
      ``draft_tokens``: tokens drafted (proposed); ``accepted_tokens``: drafted tokens accepted.
      None when the server has no such counter (0 on a llama.cpp baseline: it has them).
    - ``accept_rate`` = accepted_tokens / draft_tokens; ``mean_draft_length`` = draft_tokens /
      drafts (tokens proposed per draft); ``mean_accept_length`` = 1 + accepted_tokens / drafts
      (tokens per verify step, llama.cpp's log "mean len"). None when the divisor is 0.
    - ``accepted_per_position``: list, [k] = drafts whose token k was accepted (k = 0 first
      drafted token), length = the server's draft max (llama.cpp only lists it once a draft
      happened: then ``[]``); ``acceptance_per_position``: the same / drafts.
    - ``output_tokens_from_drafts``: accepted_tokens / output_tokens.
    - ``busy_slot_steps`` (llama.cpp): the sum over the decode calls between the scrapes of the
      slots busy in each, from ``n_decode_total`` x ``n_busy_slots_per_decode`` (both move while
      requests run). On a server without speculation every busy slot of a decode step yields one
      token, so this is the tokens generated IN the window (plus about one step per prompt
      processed): the server-side counterpart of loadgen's window tokens, which ``output_tokens``
      is not. Measured on the CPU baseline with 4 s windows: 202/200, 223/222, 242/240, 183/181
      against the tokens whose chunks arrived. With speculation a step yields 1 + accepted drafts
      per slot, so it undercounts. ``busy_slot_steps_error``: its uncertainty from the gauge's 6
      printed significant digits (grows with the server's uptime). None on other engines.
    - ``counters``: {metric name: delta} of every counter used above, as the server names it.
    """
    for snap in (before, after):
        if snap is not None and not snap.ok:
            return {"available": False, "reason": snap.error, "url": snap.url}
    if before is None or after is None:
        which = "window open" if before is None else "window close"
        return {"available": False, "reason": f"not scraped at {which}", "url": (before or after).url if (before or after) else ""}
    if before.engine != after.engine:
        return {"available": False, "reason": f"engine changed between scrapes ({before.engine} -> {after.engine})",
                "url": after.url}
    names = ENGINES.get(after.engine)
    if names is None:
        return {"available": False, "reason": f"{after.url}: no counters loadgen knows (not llama.cpp, vLLM or SGLang)",
                "url": after.url}
    counters: dict[str, float] = {}
    for name in (names.output_tokens, names.drafts, names.draft_tokens, names.accepted_tokens):
        d = _delta(before, after, name)
        if d is not None:
            counters[name] = d
    per_pos: list[float] | None = None
    if names.accepted_per_position:
        a = after.per_position.get(names.accepted_per_position, {})
        b = before.per_position.get(names.accepted_per_position, {})
        if a:
            per_pos = [a.get(k, 0.0) - b.get(k, 0.0) for k in range(max(a) + 1)]
        elif names.drafts in after.samples:
            per_pos = []
    backwards = [k for k, v in counters.items() if v < 0] + (["per-position"] if per_pos and min(per_pos) < 0 else [])
    if backwards:
        return {"available": False, "url": after.url,
                "reason": f"{after.url}: counter went backwards between scrapes ({', '.join(backwards)}): server restarted?"}
    out_tok = counters.get(names.output_tokens)
    drafts = counters.get(names.drafts) if names.drafts else None
    drafted = counters.get(names.draft_tokens) if names.draft_tokens else None
    accepted = counters.get(names.accepted_tokens) if names.accepted_tokens else None

    def ratio(x, y, plus=0.0):
        return round(plus + x / y, 4) if x is not None and y else None

    return {
        "available": True,
        "engine": after.engine,
        "url": after.url,
        "interval_s": round((after.t_ns - before.t_ns) / 1e9, 4),
        "scrape_rtt_ms": [round(before.rtt_ns / 1e6, 3), round(after.rtt_ns / 1e6, 3)],
        "counted_when": names.counted_when,
        "counted_when_note": names.counted_when_note,
        "output_tokens": _num(out_tok),
        "drafts": _num(drafts),
        "draft_tokens": _num(drafted),
        "accepted_tokens": _num(accepted),
        "accept_rate": ratio(accepted, drafted),
        "mean_draft_length": ratio(drafted, drafts),
        "mean_accept_length": ratio(accepted, drafts, 1.0),
        "accepted_per_position": [_num(x) for x in per_pos] if per_pos is not None else None,
        "acceptance_per_position": [round(x / drafts, 4) for x in per_pos] if per_pos and drafts else None,
        "output_tokens_from_drafts": ratio(accepted, out_tok),
        **_busy_slot_steps(before, after, names),
        "counters": {k: _num(v) for k, v in counters.items()},
    }


class WindowCounters:
    """The runner's window probe (loadgen.run.runner.WindowProbe): scrapes at the window's open and close,
    and gives the stage its ``server`` summary. Holds only the URL until used, so a stage worker
    process can take it."""

    def __init__(self, base_url: str, timeout_s: float = 5.0) -> None:
        self.base_url = base_url
        self.timeout_s = timeout_s
        self._before: Snapshot | None = None
        self.span_ns: tuple[int, int] | None = None

    async def _scrape(self) -> Snapshot:
        async with aiohttp.ClientSession() as session:
            return await scrape(session, self.base_url, self.timeout_s)

    async def at_open(self) -> None:
        self._before = await self._scrape()

    async def at_close(self) -> dict:
        after = await self._scrape()
        if self._before is not None:
            self.span_ns = (self._before.t_ns, after.t_ns)
        return window_summary(self._before, after)

"""One scrape of a server's ``/metrics``: fetched within a time and size bound, parsed into a Snapshot.

In: a base URL (or page text). Out: a :class:`Snapshot` whose ``ok`` is False with a one-line
``error`` naming the URL when the page could not be had: HTTP errors, nothing listening, no answer
in time, a body over :data:`MAX_BYTES` (refused whole, never parsed truncated: a cut page would
give wrong sums), a Content-Type of JSON or HTML, text ``prometheus_client``'s parser rejects.

The fetch is blocking (``http.client``) on purpose: the scrapes run in a thread of their own
(``watch``), the same code for the asyncio runner and the gevent Locust master, and never on the
client's event loop, whose receive stamps they must not delay.
"""

from __future__ import annotations

import http.client
import re
import socket
import time
from dataclasses import dataclass, field

from loadgen.engines import detect, get
from loadgen.engines.base import Series
from loadgen.serverview import wire

_now = time.perf_counter_ns  # loadgen's clock (CLOCK_MONOTONIC), the one requests and windows are stamped with

MAX_BYTES = 8 << 20
"""Largest page read. SGLang's with every histogram is ~100 kB, vLLM's ~50-200 kB per model."""

Labels = tuple[tuple[str, str], ...]


@dataclass
class Snapshot:
    """One page: every sample, by name, with its labels.

    ``t_ns`` is the midpoint of the request on loadgen's clock; ``rtt_ns`` how long it took (llama.cpp
    answers between decode steps: 749 ms at C=256 on the H200, docs/real-servers.md).
    """

    url: str
    t_ns: int
    rtt_ns: int = 0
    ok: bool = False
    error: str = ""
    engine: str = "unknown"
    series: dict[str, list[tuple[Labels, float]]] = field(default_factory=dict)
    raw: bytes | None = None
    """Fetched, not parsed yet (``fetch(keep=...)``): :meth:`finish` parses it."""

    def finish(self) -> "Snapshot":
        """Parse a page fetched with ``keep`` (a no-op on a parsed or failed one)."""
        if self.raw is None or self.error:
            return self
        done = parse(self.raw.decode("utf-8", "replace") + "\n", self.url, self.t_ns)
        done.rtt_ns = self.rtt_ns
        return done

    # --- reading quantities ---------------------------------------------------------------------
    def _rows(self, name: str, where) -> list[tuple[Labels, float]] | None:
        rows = self.series.get(name)
        if rows is None:
            return None
        metrics = get(self.engine).metrics
        rank = metrics.rank_label if metrics is not None else None
        out = []
        for labels, v in rows:
            d = dict(labels)
            # an engine writing a gauge once per rank (SGLang: per tensor-parallel rank) writes the same batch
            # in each: rank 0 is read
            if rank is not None and d.get(rank, "0") != "0":
                continue
            if any(d.get(k) != want for k, want in where.items()):
                continue
            out.append((labels, v))
        return out

    def read(self, s: Series | None) -> float | None:
        """The quantity's value (first alias present), aggregated over label sets; None if absent."""
        if s is None:
            return None
        for name in s.names:
            rows = self._rows(name, s.where)
            if rows is None:
                continue
            if not rows:
                return 0.0 if s.where else None  # a labelled subset not seen yet (no abort so far): zero
            vals = [v for _, v in rows]
            return sum(vals) if s.agg == "sum" else sum(vals) / len(vals)
        return None

    def name_of(self, s: Series | None) -> str | None:
        """Which alias the page has."""
        if s is None:
            return None
        return next((n for n in s.names if n in self.series), None)

    def positions(self, s: Series | None) -> dict[int, float] | None:
        """A per-position counter as {position: value} (summed over other labels)."""
        name = self.name_of(s)
        if name is None:
            return None
        out: dict[int, float] = {}
        for labels, v in self._rows(name, {}) or []:
            pos = dict(labels).get("position")
            if pos is not None and pos.lstrip("-").isdigit():
                out[int(pos)] = out.get(int(pos), 0.0) + v
        return out

    def buckets(self, s: Series | None) -> dict | None:
        """A histogram as {"le": {upper bound: cumulative count}, "sum": float, "count": float}."""
        if s is None:
            return None
        for base in s.names:
            rows = self._rows(base + "_bucket", s.where)
            if not rows:
                continue
            le: dict[float, float] = {}
            for labels, v in rows:
                bound = dict(labels).get("le")
                if bound is None:
                    continue
                b = float("inf") if bound in ("+Inf", "Inf") else float(bound)
                le[b] = le.get(b, 0.0) + v
            total = sum(v for _, v in self._rows(base + "_sum", s.where) or [])
            count = sum(v for _, v in self._rows(base + "_count", s.where) or [])
            return {"name": base, "le": le, "sum": total, "count": count}
        return None


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
            snap.series.setdefault(s.name, []).append((tuple(sorted(s.labels.items())), float(s.value)))
    if not snap.series:
        snap.error = f"{url}: no metrics in the answer"
        return snap
    snap.engine = detect(snap.series)
    snap.ok = True
    return snap


def line_filter(names: set[str]) -> "re.Pattern[bytes]":
    """The sample lines of these names (any labels), for :func:`fetch`'s ``keep``: matched in C, so a
    sample between a window's edges holds the client's interpreter for the HTTP exchange alone."""
    alts = b"|".join(re.escape(n.encode()) for n in sorted(names, key=len, reverse=True))
    return re.compile(rb"^(?:" + alts + rb")[{ ][^\n]*", re.M)


def fetch(base_url: str, timeout_s: float = 5.0, headers: dict | None = None,
          keep: "re.Pattern[bytes] | None" = None) -> Snapshot:
    """GET ``base_url/metrics`` once, blocking; never raises for what the server does.

    ``keep`` (a :func:`line_filter`): keep only those lines, unparsed, in ``raw``; :meth:`Snapshot.finish`
    parses them later (the samples between the edges are parsed once the window has closed)."""
    url = base_url.rstrip("/") + "/metrics"
    t0 = _now()

    def failed(why: str) -> Snapshot:
        t1 = _now()
        return Snapshot(url=url, t_ns=(t0 + t1) // 2, rtt_ns=t1 - t0, error=f"{url}: {why}")

    try:
        status, ctype, body = wire.call(base_url, "GET", "/metrics", timeout_s=timeout_s, max_bytes=MAX_BYTES,
                                        headers={"Accept": "text/plain", **(headers or {})})
        t1 = _now()
    except (socket.timeout, TimeoutError):
        return failed(f"no answer in {timeout_s:g} s")
    except (OSError, http.client.HTTPException) as exc:
        return failed(f"{type(exc).__name__}: {str(exc)[:200]}")
    if status != 200:
        return failed(f"HTTP {status}")
    if len(body) > MAX_BYTES:
        return failed(f"page larger than {MAX_BYTES >> 20} MiB: not read")
    if "json" in ctype or "html" in ctype:
        return failed(f"not Prometheus text (Content-Type {ctype})")
    if keep is not None:
        return Snapshot(url=url, t_ns=(t0 + t1) // 2, rtt_ns=t1 - t0, raw=b"\n".join(keep.findall(body)))
    snap = parse(body.decode("utf-8", "replace"), url, (t0 + t1) // 2)
    snap.rtt_ns = t1 - t0
    return snap

"""The client's figures set against the server's: tokens, acceptance, and the running batch against C.

In: the ``server`` block (``summary``) and a :class:`ClientView`, what the client counted over the
same two scrape instants. Out: ``block["checks"]``, one verdict per comparison, and a note on the
block for each disagreement.

Which client figure a server counter is compared with depends on when the engine counts
(``counted_when``): an engine that adds a request's tokens when it ends (SGLang, llama.cpp) is
compared with the requests that ended between the two scrapes, all their tokens; one that counts
per step (vLLM) with the tokens the client received between the two scrape instants (read just
before and after each scrape: the uncertainty is what arrived while it ran).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from loadgen import engines

TOKENS_AGREE_PCT = 1.0
"""Issue 14's bar: client and server token counts within 1 %."""
RUNS_C = 0.9
"""The running batch "is" C when its median over the window is at least 90 % of C (a closed-loop user
is briefly between requests: on the simulator the median was C and the mean 0.95-0.99 C)."""
RUNNING_MIN_READINGS = 3
"""A median of two readings is the window's opening and closing scrapes only, and a count window's closing
scrape follows its last request's end by construction: a simulator stage at C=2 of 8 requests (0.2 s, no
sample inside) read 1 and 0 on a busy host. Fewer readings than this are "too few readings", not "below C"."""


@dataclass
class Ended:
    """Requests that ended (completed) between the two scrapes, and their sums."""

    requests: int = 0
    output_tokens: int = 0
    verify_calls: int = 0
    with_verify: int = 0
    accepted_drafts: int = 0
    proposed_drafts: int = 0
    with_drafts: int = 0

    def add(self, tokens: int, verify_ct: int | None, accepted: int | None, proposed: int | None) -> None:
        self.requests += 1
        self.output_tokens += tokens
        if verify_ct is not None:
            self.verify_calls += verify_ct
            self.with_verify += 1
        if accepted is not None and proposed is not None:
            self.accepted_drafts += accepted
            self.proposed_drafts += proposed
            self.with_drafts += 1

    def merge(self, other: "Ended") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def ended_between(rows, lo: int, hi: int) -> Ended:
    """The requests of ``rows`` — (end ns, output tokens, verify_ct, accepted, proposed[, last token ns]) —
    whose stream closed in (lo, hi]."""
    out = Ended()
    for e, k, verify, accepted, proposed, *_ in rows:
        if lo < e <= hi:
            out.add(k, verify, accepted, proposed)
    return out


def ended_inside(rows, lo: int, hi: int, *, surely: bool) -> Ended:
    """The requests the server counted inside (lo, hi] for sure (``surely``), or can have counted there.

    A server counts a request somewhere between the arrival of its last token and the close of its
    stream (the row's last token ns and end ns): it finished generating after sending that token and
    before closing. The close alone misplaces requests whose final chunk the server delivered late:
    with both cores busy a llama-server counted 279 tokens in a window where the streams that closed
    inside it held 255, one request of 24 counted before the closing scrape and closed after it."""
    out = Ended()
    for e, k, verify, accepted, proposed, *last in rows:
        start = min(last[0], e) if last and last[0] else e
        if (lo < start and e <= hi) if surely else (lo < e and start <= hi):
            out.add(k, verify, accepted, proposed)
    return out


@dataclass
class ClientView:
    concurrency: int
    """The stage's C; an open loop's in-flight cap (0: none)."""
    processes: int = 1
    ended: Ended = field(default_factory=Ended)
    tokens_open: tuple[int, int] | None = None
    """Tokens the client had received just before and just after the window-open scrape."""
    tokens_close: tuple[int, int] | None = None
    max_running: int | None = None
    """The server's running cap (SGLang max_running_requests, llama.cpp slots), when the probe found it."""
    ended_narrow: Ended | None = None
    """Requests that ended after the opening scrape was answered and before the closing one was sent:
    counted by the server for sure. ``ended_wide``: from the opening one's sending to the closing one's
    answer: every request it can have counted. The server read its counters somewhere inside each
    scrape; at C=256 on the H200 llama.cpp answered 300 ms late, and the midpoints alone put 105 of
    the requests' 5148 tokens (3.6 %) on the wrong side."""
    ended_wide: Ended | None = None
    open_loop: bool = False
    """An open-loop stage: the server's batch is whatever the arrivals make it, there is no C to hold it to."""
    not_comparable: str | None = None
    """Why the client's counts cannot be set against these scrapes at all (the Locust master's: a worker on
    another host...): the token and drafts checks then say "not comparable" with it."""

    past_first_open: tuple[int, int] | None = None
    """Tokens the client had received past the first of each event, just before and just after the opening
    scrape (``past_first_close``: the closing one): a per-step stream's accepted drafts (vLLM)."""
    past_first_close: tuple[int, int] | None = None
    positions_open: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    """Per draft position p, the client's events of p + 2 tokens or more so far, just before and just after
    the opening scrape (``positions_close``: the closing one): a per-step stream's accepted drafts at p."""
    positions_close: tuple[tuple[int, ...], tuple[int, ...]] | None = None

    def ended_range(self, attr: str) -> tuple[float, float]:
        """(low, high) of one sum over the requests the server can have counted (the midpoint count when
        the scrapes' edges are not known)."""
        mid = getattr(self.ended, attr)
        lo = getattr(self.ended_narrow, attr) if self.ended_narrow is not None else mid
        hi = getattr(self.ended_wide, attr) if self.ended_wide is not None else mid
        return min(lo, mid), max(hi, mid)

    def tokens_between(self) -> tuple[float, float] | None:
        """Tokens received between the two scrape midpoints, ± what arrived while the scrapes ran."""
        return _between(self.tokens_open, self.tokens_close)

    def past_first_between(self) -> tuple[float, float] | None:
        """Tokens past the first of each event received between the scrape midpoints, ± as tokens_between."""
        return _between(self.past_first_open, self.past_first_close)


def _between(at_open: tuple[int, int] | None, at_close: tuple[int, int] | None) -> tuple[float, float] | None:
    if not (at_open and at_close):
        return None
    mid = lambda p: (p[0] + p[1]) / 2  # noqa: E731
    return mid(at_close) - mid(at_open), (at_open[1] - at_open[0] + at_close[1] - at_close[0]) / 2


def _pct(client: float, server: float) -> float | None:
    return None if not server else round(100.0 * (client - server) / server, 3)


def tokens_check(block: dict, view: ClientView) -> dict:
    server = block.get("output_tokens")
    if server is None:
        return {"verdict": "not comparable", "why": "the server has no generated-token counter (or it reset)"}
    if view.not_comparable:
        return {"verdict": "not comparable", "server": server, "why": view.not_comparable}
    if view.processes > 1:
        return {"verdict": "not comparable", "server": server,
                "why": f"the stage ran in {view.processes} processes; the client's count at the scrapes is one's"}
    if block.get("counted_when") == "step":
        got = view.tokens_between()
        if got is None:
            return {"verdict": "not comparable", "server": server, "why": "the client's count was not read at the scrapes"}
        client, slack = got
        what = "tokens received between the scrapes"
        lo = hi = client
    else:
        client, slack = view.ended.output_tokens, 0.0
        what = "output tokens of the requests that ended between the scrapes"
        lo, hi = view.ended_range("output_tokens")
    diff = client - server
    pct = _pct(client, server)
    tol = (TOKENS_AGREE_PCT / 100) * max(server, client)
    agree = abs(diff) <= slack + tol
    out = {"verdict": "agree" if agree else "disagree", "client": round(client, 1), "server": server,
           "client_counts": what, "diff_pct": pct, "slack_tokens": round(slack, 1)}
    if block.get("counted_when") != "step" and (lo, hi) != (client, client):
        out["client_range"] = [lo, hi]
        if not agree and lo - tol <= server <= hi + tol:
            # the server's count lies among what it can have counted while each scrape was in flight
            out["verdict"] = "agree"
            out["why"] = ("within the requests that ended while a scrape was in flight "
                          f"({lo}-{hi}; the midpoints alone give "
                          + (f"{pct:+.2f} %)" if pct is not None else f"{client:g} against the server's 0)"))
    if server == 0 and client == 0:
        out["why"] = "nothing counted on either side between the scrapes"
    return out


def acceptance_check(block: dict, view: ClientView) -> dict:
    """Counts of drafts both sides have, over the same requests (engines that count at request end)."""
    if view.not_comparable:
        return {"verdict": "not comparable", "why": view.not_comparable}
    e = view.ended
    pairs = []
    if block.get("verify_calls") is not None and e.with_verify:
        pairs.append(("verify_calls", e.verify_calls, block["verify_calls"]))
    if block.get("accepted_tokens") is not None and e.with_drafts:
        pairs.append(("accepted_tokens", e.accepted_drafts, block["accepted_tokens"]))
        pairs.append(("draft_tokens", e.proposed_drafts, block["draft_tokens"]))
    if block.get("counted_when") == "step" and block.get("accepted_tokens") is not None:
        return _step_acceptance(block, view)
    if not pairs:
        if block.get("accepted_tokens") is None and block.get("verify_calls") is None:
            why = "the server counts no drafts (no speculation, or no counter)"
        else:
            why = "the client's requests carried no draft counts"
        return {"verdict": "not comparable", "why": why}
    if block.get("counted_when") == "step":
        return {"verdict": "not comparable", "why": "per-step counters cover other requests than those that ended"}
    attr = {"verify_calls": "verify_calls", "accepted_tokens": "accepted_drafts", "draft_tokens": "proposed_drafts"}
    rows, same = {}, True
    for name, c, s in pairs:
        tol = (TOKENS_AGREE_PCT / 100) * max(abs(s), 1)
        lo, hi = view.ended_range(attr[name])
        rows[name] = {"client": c, "server": s, "diff_pct": _pct(c, s)}
        if (lo, hi) != (c, c):
            rows[name]["client_range"] = [lo, hi]
        same = same and (abs(c - s) <= tol or lo - tol <= s <= hi + tol)
    out = {"verdict": "equal" if same else "differ", "counts": rows}
    if e.with_verify and e.verify_calls:
        out["client_mean_accept_length"] = round(e.output_tokens / e.verify_calls, 4)
    elif e.with_drafts and e.proposed_drafts:
        out["client_accept_rate"] = round(e.accepted_drafts / e.proposed_drafts, 4)
    out["server_mean_accept_length"] = block.get("mean_accept_length")
    out["server_accept_rate"] = block.get("accept_rate")
    return out


def _step_acceptance(block: dict, view: ClientView) -> dict:
    """A per-step server's accepted drafts against its stream's: one event a step, so the tokens past each
    event's first are the drafts it accepted. A request's last step may count up to K more than its stream
    carried where the engine counts before cutting at max_tokens (vLLM: ``drafts_counted_before_cut``)."""
    got = view.past_first_between()
    if got is None:
        return {"verdict": "not comparable",
                "why": "the client's count of tokens past each event's first was not read at the scrapes"}
    client, slack = got
    server = block["accepted_tokens"]
    k = len(block.get("accepted_per_position") or [])
    ended = (view.ended_wide or view.ended).requests
    metrics = engines.get(block.get("engine")).metrics
    cut = k * ended if metrics is not None and metrics.drafts_counted_before_cut else 0
    tol = (TOKENS_AGREE_PCT / 100) * max(server, client, 1)
    lo, hi = max(0.0, client - slack - tol), client + slack + tol + cut
    out = {"verdict": "equal" if lo <= server <= hi else "differ",
           "counts": {"accepted_tokens": {"client": round(client, 1), "server": server, "diff_pct": _pct(client, server),
                                          "client_range": [round(lo, 1), round(hi, 1)]}},
           "client_counts": "tokens past the first of each event received between the scrapes",
           "server_mean_accept_length": block.get("mean_accept_length"), "server_accept_rate": block.get("accept_rate")}
    if cut:
        out["why"] = (f"the server also counts drafts accepted past max_tokens: up to {k} for each of the {ended} "
                      "requests that ended between the scrapes")
    per = _positions(block, view, ended if cut else 0)
    if per is not None:
        out["per_position"] = per
        if per["verdict"] != "equal":
            out["verdict"] = "differ"
    return out


def _positions(block: dict, view: ClientView, cut_each: int) -> dict | None:
    """Per position, the server's accepted drafts against the client's events that reached it between the
    scrapes (each event of p + 2 tokens or more accepted position p). A request cut at max_tokens can have
    had one more counted at each position past its last streamed token: ``cut_each`` (the requests that
    ended) more at most, per position."""
    server = block.get("accepted_per_position")
    if not server or view.positions_open is None or view.positions_close is None:
        return None
    (ob, oa), (cb, ca) = view.positions_open, view.positions_close
    n = min(len(server), len(ob))
    client, ranges, same = [], [], True
    for p in range(n):
        lo, hi = cb[p] - oa[p], ca[p] - ob[p] + cut_each
        tol = (TOKENS_AGREE_PCT / 100) * max(server[p], hi, 1)
        client.append(round(((cb[p] + ca[p]) - (ob[p] + oa[p])) / 2, 1))
        ranges.append([lo, hi])
        same = same and lo - tol <= server[p] <= hi + tol
    return {"verdict": "equal" if same else "differ", "client": client, "server": list(server[:n]),
            "client_range": ranges}


def running_check(block: dict, view: ClientView) -> dict:
    g = (block.get("gauges") or {}).get("running")
    if not g:
        return {"verdict": "not measured", "concurrency": view.concurrency,
                "why": "the page has no running-requests gauge"}
    c, cap = view.concurrency, view.max_running
    expect = min(c, cap) if cap else c
    q = (block.get("gauges") or {}).get("queued") or {}
    out = {"concurrency": c, "cap": cap, "running_mean": g["mean"], "running_p50": g["p50"], "running_max": g["max"],
           "queued_mean": q.get("mean"), "samples": g["n"]}
    if block.get("mean_busy_per_step") is not None:
        out["busy_per_decode_step"] = block["mean_busy_per_step"]
    if view.open_loop:
        # the arrivals set the batch; its mean and the queue are what the rate analysis reads
        out["verdict"] = "open loop"
        return out
    if g["n"] < RUNNING_MIN_READINGS:
        out["verdict"] = "too few readings"
    elif g["p50"] >= RUNS_C * expect:
        out["verdict"] = "runs C" if expect == c else "capped"
    else:
        out["verdict"] = "below C"
    if g["max"] > c * 1.05 + 1:
        out["verdict"] = "above C"  # someone else's requests share the server
    return out


def _g3(v: float | None) -> str:
    """A gauge's mean to three figures (a mean of 32 readings printed as 0.03125)."""
    return "?" if v is None else f"{v:.3g}"


def add_checks(block: dict, view: ClientView) -> dict:
    """Set ``block["checks"]`` and append a note for each disagreement; returns the block."""
    if not block.get("available"):
        return block
    checks = {"tokens": tokens_check(block, view), "acceptance": acceptance_check(block, view),
              "running": running_check(block, view)}
    block["checks"] = checks
    block["client_ended_between_scrapes"] = None if view.not_comparable else {
        "requests": view.ended.requests, "output_tokens": view.ended.output_tokens}
    notes = block.setdefault("notes", [])
    t = checks["tokens"]
    if t["verdict"] == "disagree":
        notes.append(f"the server counted {t['server']} generated tokens between its scrapes and the client "
                     f"{t['client']:g} ({t['client_counts']}): {t['diff_pct']:+.2f} %, beyond the 1 % agreement")
    a = checks["acceptance"]
    if a["verdict"] == "differ":
        notes.append("the server's draft counters differ from what the requests reported: "
                     + ", ".join(f"{k} {v['client']} vs {v['server']}" for k, v in a["counts"].items()))
    r = checks["running"]
    if r.get("verdict") == "below C":
        notes.append(f"the server ran a median of {r['running_p50']:g} requests at once (mean {r['running_mean']:.3g}, "
                     f"queue {_g3(r['queued_mean'])}) while the stage kept "
                     f"{r['concurrency']} open: the stage's load is not C on the server")
    elif r.get("verdict") == "capped":
        notes.append(f"the server ran at its cap of {r['cap']} ({r['running_p50']:g} median); the rest of C="
                     f"{r['concurrency']} queued (mean {_g3(r['queued_mean'])})")
    elif r.get("verdict") == "above C":
        notes.append(f"the server ran up to {r['running_max']:g} requests at once, more than the stage's "
                     f"{r['concurrency']}: other traffic shares it")
    return block

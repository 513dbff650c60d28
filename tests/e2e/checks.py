"""Checks shared by the load tests: what every stage measured against llama-server must satisfy.

Every check here is exact whatever the host's speed: counts of requests, tokens and drafts, set
against the server's own counters or against the stage's other slices, and analyses checked against
the samples they were given. Timing accuracy (client stamps against a server's truth) is measured
by ``loadgen bench``; per request against llama.cpp's own timings in test_llama_protocol.py.
"""

from __future__ import annotations

from .runs import ServerTotals


def check_counts(stage: dict, requests: int) -> None:
    """The window held ``requests`` requests (a count window), all completed, and the token counts agree
    with the server's own usage, per request and per chunk."""
    where = f"{stage['target']} C={stage['concurrency']}"
    req = stage["requests"]
    assert req["started"] == req["completed"] == requests and not stage["incomplete"], (where, req, stage["notes"])
    slices = {"all": stage, **stage["workloads"]}
    for name, m in slices.items():
        # exact: for every request, the chunks' token counts summed to the server's usage
        assert m["token_counts"] == "exact", (where, name)
        tpc = m["tokens_per_chunk"]
        if tpc.get("count"):
            # llama.cpp streams one event per token, also for accepted drafts
            assert tpc["max"] == 1.0 and tpc["mean"] == 1.0, (where, name, tpc)
        assert m["requests"]["failed"] == 0, (where, name, m["requests"]["failures"])
    # the workload slices partition the stage
    for key in ("output_tokens", "server_output_tokens"):
        assert sum(m[key] for m in stage["workloads"].values()) == stage[key], (where, key)
    for key in ("started", "completed"):
        assert sum(m["requests"][key] for m in stage["workloads"].values()) == stage["requests"][key], (where, key)
    for key in ("accepted", "proposed"):
        assert sum(m["drafts"][key] for m in stage["workloads"].values()) == stage["drafts"][key], (where, key)


def check_server_view(stage: dict, *, spec: bool) -> None:
    """The stage's server block (loadgen.serverview) against the server it ran on. llama.cpp counts a request
    when it ends; the requests that ended between the window's two scrapes carry, in their usage and
    timings, what it counted. Which requests those are is known up to each scrape's flight: a request that
    ended while a scrape was on its way may lie on either side (with both cores busy, one stage's server
    counted 289 tokens where the scrapes' midpoints gave the client 257: one request), so the tool's own
    verdict is asserted, which places those requests on whichever side the server counted them."""
    sv = stage["server"]
    c = stage["concurrency"]
    assert sv["available"] and sv["engine"] == "llama.cpp" and sv["counted_when"] == "request_end", sv
    t = sv["checks"]["tokens"]
    assert t["verdict"] == "agree", t
    a = sv["checks"]["acceptance"]
    if spec:
        assert a["verdict"] == "equal", a
        assert sv["accepted_tokens"] <= sv["draft_tokens"] and sv["accepted_per_position"] is not None, sv
    else:
        assert a["verdict"] == "not comparable" and sv["drafts"] == 0, a
    r = sv["checks"]["running"]
    # C users in a closed loop, and nobody else on the server: never more than C at once (the cap is the
    # server's 4 slots). Not "at least C": the gauge is read at the window's edges and once a second, and a
    # count window closes just as a user ends a request, so its closing read finds C - 1.
    assert r["cap"] == 4 and r["concurrency"] == c and r["running_max"] <= c, r
    assert sv["samples"]["failed"] == 0, sv["samples"]


def check_subset_of_server_counters(stages: list[dict], totals: ServerTotals) -> None:
    """Window requests are a subset of everything the server generated during the run."""
    tot = totals.total()
    assert sum(s["server_output_tokens"] for s in stages) <= tot.tokens, tot
    assert sum(s["drafts"]["proposed"] for s in stages) <= tot.drafted, tot
    assert sum(s["drafts"]["accepted"] for s in stages) <= tot.accepted, tot


def pooled_acceptance(stages: list[dict], workload: str) -> dict:
    """Drafts and tokens of one workload summed over stages (and its accept rate)."""
    acc = prop = toks = 0
    for s in stages:
        m = s["workloads"].get(workload)
        if m is None:
            continue
        acc += m["drafts"]["accepted"]
        prop += m["drafts"]["proposed"]
        toks += m["server_output_tokens"]
    return {"accepted": acc, "proposed": prop, "tokens": toks, "accept_rate": acc / prop if prop else None,
            "accepted_per_token": acc / toks if toks else None}

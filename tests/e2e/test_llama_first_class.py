"""llama.cpp as a first-class target (issue 12, item 5), on the real CPU llama-servers.

- the probe reads the speculative settings from ``/slots`` and says speculative True / False;
- no request is first written to a dead pooled connection (llama.cpp closes after every stream),
  so ``retries`` stays 0;
- ``loadgen.serverview`` reads the server's counters, which move when a request *ends*, and
  agree exactly with loadgen's own per-request sums (usage, ``timings.draft_n`` /
  ``draft_n_accepted``) over the requests that ended between two scrapes.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from loadgen.serverview.page import fetch
from loadgen.serverview.summary import window_summary
from loadgen.client.stream import StreamClient
from loadgen.run.probe import probe_sync
from loadgen.client.protocols import get_protocol
from loadgen.request import GenRequest

from .llama import SPEC_NGRAM_M
from .prompts import COPY_PROMPTS, CREATIVE_PROMPTS

pytestmark = pytest.mark.e2e

TOKENS = "llamacpp:tokens_predicted_total"


async def scrape(url: str):
    return await asyncio.to_thread(fetch, url)


def value(snap, name: str) -> float:
    return sum(v for _, v in snap.series[name])


def _copy_chat(i: int, max_tokens: int = 48, **kw) -> GenRequest:
    p = COPY_PROMPTS[i % len(COPY_PROMPTS)]
    return GenRequest(workload="copy", max_tokens=max_tokens, messages=({"role": "user", "content": p},),
                      temperature=0.0, extra={"cache_prompt": False}, **kw)


def _creative(i: int, max_tokens: int, **kw) -> GenRequest:
    return GenRequest(workload="open", max_tokens=max_tokens, prompt=f"({i}) " + CREATIVE_PROMPTS[i % 4],
                      temperature=0.8, seed=100 + i, ignore_eos=True, extra={"cache_prompt": False}, **kw)


async def _closed_loop(url: str, protocol: str, reqs: list[GenRequest], concurrency: int):
    """Send ``reqs`` from ``concurrency`` users, one after another each; the records and the client."""
    recs = []
    async with StreamClient(url, get_protocol(protocol, "gemma"), concurrency=concurrency) as client:
        await client.warm(concurrency)
        queue = list(enumerate(reqs))[::-1]

        async def user() -> None:
            while queue:
                i, req = queue.pop()
                recs.append(await client.stream(req, f"r{i}"))

        await asyncio.gather(*(user() for _ in range(concurrency)))
    return recs, client


def _served_one(url: str) -> None:
    asyncio.run(_closed_loop(url, "completions", [_creative(0, 4)], 1))


# --------------------------------------------------------------------------- probe


def test_probe_records_speculation(llama_spec: str, llama_baseline: str) -> None:
    for url in (llama_spec, llama_baseline):
        _served_one(url)  # a slot that served a request reports its speculative types
    spec, base = probe_sync(llama_spec), probe_sync(llama_baseline)
    assert spec.engine == base.engine == "llama.cpp"
    assert spec.speculative is True and spec.to_dict()["speculative"] is True
    assert base.speculative is False and base.to_dict()["speculative"] is False
    si, bi = spec.server_info, base.server_info
    assert si["total_slots"] == bi["total_slots"] == 4
    assert si["speculative_slots"] == 4 and bi["speculative_slots"] == 0
    assert si["speculative_types"] == si["speculative_algorithm"] == "ngram-simple"
    assert "speculative_types" not in bi and "speculative_algorithm" not in bi
    assert si["slots_endpoint"] is True and si["n_ctx_per_slot"] == 2048
    assert si["version"] == si["build_info"] and si["version"].startswith("b")


# --------------------------------------------------------------------------- connections


@pytest.mark.parametrize("concurrency", [1, 4])
def test_no_failed_send_after_streams(llama_baseline: str, concurrency: int) -> None:
    # Before the fix 39 of 40 requests at C=1 were first written to the connection the server
    # had closed after the previous stream, and each counted as a retry.
    recs, client = asyncio.run(_closed_loop(llama_baseline, "completions",
                                            [_creative(i, 6) for i in range(16)], concurrency))
    assert all(r.ok for r in recs), [(r.error_class, r.error_message) for r in recs if not r.ok]
    assert sum(r.retries for r in recs) == 0 and client.stale_resends == 0
    assert client.close_after_stream  # recognised from the first stream's headers


# --------------------------------------------------------------------------- /metrics


def test_counters_move_when_a_request_ends_not_while_it_streams(llama_baseline: str) -> None:
    async def go():
        reads: list[tuple[int, float]] = []  # (tokens the client had when it sent the scrape, the count read)
        async with StreamClient(llama_baseline, get_protocol("completions", "gemma")) as client:
            before = await scrape(llama_baseline)
            task = asyncio.create_task(client.stream(_creative(1, 120), "long"))
            while not task.done():
                seen = client.tokens_seen
                snap = await scrape(llama_baseline)
                assert snap.ok, snap.error
                reads.append((seen, value(snap, TOKENS)))
                await asyncio.sleep(0.02)
            rec = await task
            after = await scrape(llama_baseline)
        return before, after, rec, reads

    before, after, rec, reads = asyncio.run(go())
    assert rec.ok and rec.output_tokens == 120
    w = window_summary(before, after)
    assert w["output_tokens"] == 120 and w["counted_when"] == "request_end"
    b = value(before, TOKENS)
    values = [v for _, v in reads]
    # the counter never shows part of the request: it reads the count from before, or with all 120 tokens
    # (once the slot was released, which can come just before the client has the final events) ...
    assert set(values) <= {b, b + 120} and values == sorted(values), reads
    # ... and a scrape sent once the first token had arrived, with 119 decode steps still to run, read the
    # count from before (llama.cpp answers /metrics between two decode steps, whatever their speed)
    mid = [v for seen, v in reads if seen >= 1]
    assert mid and mid[0] == b, reads


def test_window_summary_matches_loadgens_sums_over_the_same_requests(llama_spec: str) -> None:
    async def go():
        async with aiohttp.ClientSession() as s:
            before = await scrape(llama_spec)
            recs, _client = await _closed_loop(llama_spec, "chat", [_copy_chat(i) for i in range(8)], 2)
            after = await scrape(llama_spec)
        return before, after, recs

    before, after, recs = asyncio.run(go())
    assert all(r.ok for r in recs)
    w = window_summary(before, after)
    assert w["available"] and w["engine"] == "llama.cpp"
    assert w["output_tokens"] == sum(r.output_tokens for r in recs)
    assert w["draft_tokens"] == sum(r.proposed_drafts or 0 for r in recs) > 0
    assert w["accepted_tokens"] == sum(r.accepted_drafts or 0 for r in recs) > 0
    pos = w["accepted_per_position"]
    assert len(pos) == SPEC_NGRAM_M and sum(pos) == w["accepted_tokens"]
    assert all(a >= b for a, b in zip(pos, pos[1:])) and 0 < pos[0] <= w["drafts"]
    # a draft is 1..M tokens; every verify step yields its accepted drafts plus one token
    assert 1 <= w["mean_draft_length"] <= SPEC_NGRAM_M
    assert w["mean_accept_length"] == round(1 + w["accepted_tokens"] / w["drafts"], 4)
    assert w["drafts"] <= w["output_tokens"]


def test_baseline_window_has_no_drafts(llama_baseline: str) -> None:
    async def go():
        async with aiohttp.ClientSession() as s:
            before = await scrape(llama_baseline)
            recs, _ = await _closed_loop(llama_baseline, "completions", [_creative(i, 8) for i in range(3)], 1)
            return before, await scrape(llama_baseline), recs

    before, after, recs = asyncio.run(go())
    w = window_summary(before, after)
    assert w["output_tokens"] == sum(r.output_tokens for r in recs) == 24
    assert w["drafts"] == w["draft_tokens"] == w["accepted_tokens"] == 0 and w["accepted_per_position"] == []


async def _stream_with_scrapes(url: str, body: dict, marks: set[int]) -> tuple[list, int]:
    """Stream ``body`` (plain aiohttp: this reader decides when to scrape), scraping /metrics right after
    text event k for every k in ``marks`` and once the stream has ended. Returns [(k, snapshot)] (k =
    events read when the scrape was sent; the last one after the end) and the number of text events."""
    snaps = []
    events = 0
    body = {**body, "stream": True}
    async with aiohttp.ClientSession() as s, s.post(f"{url}/v1/completions", json=body) as r:
        assert r.status == 200, await r.text()
        async for line in r.content:
            line = line.strip()
            if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                continue
            ev = json.loads(line[5:])
            if any(ch.get("text") for ch in ev.get("choices") or []):
                events += 1
                if events in marks:
                    snaps.append((events, await scrape(url)))
    snaps.append((events, await scrape(url)))
    return snaps, events


def test_short_windows_compare_with_requests_ended_not_with_chunks(llama_baseline: str) -> None:
    """Windows shorter than the requests: the server's delta is the tokens of the requests that ENDED in it.

    Three 60-token requests one after another, a scrape after text events 10, 30 and 50 of each and
    after its end: windows bounded by those scrapes. The tokens whose chunks arrived in a window
    (loadgen's window tokens) are a different quantity: in a window where no request ended the
    server's counter does not move at all; its live counterpart on a baseline is ``busy_slot_steps``.
    The windows are set by the stream's own events, not by a clock, so what each holds is the same
    whatever the host's speed: a scrape after event 50 is answered between two decode steps, before
    the request's tenth decode step from there (its end).
    """
    n, marks = 60, {10, 30, 50}

    async def go():
        start = await scrape(llama_baseline)
        runs = []
        for i in range(3):
            body = {"prompt": f"({i}) " + CREATIVE_PROMPTS[i % 4], "max_tokens": n, "temperature": 0.8,
                    "seed": 100 + i, "ignore_eos": True, "cache_prompt": False}
            runs.append(await _stream_with_scrapes(llama_baseline, body, marks))
        return start, runs

    start, runs = asyncio.run(go())
    prev = ("start", start)
    rows = []
    for snaps, events in runs:
        assert events == n  # one text event per token
        for k, snap in snaps:
            assert snap.ok, snap.error
            w = window_summary(prev[1], snap)
            ended = n if k == n and prev[0] != n else 0
            chunks = k - (0 if prev[0] in ("start", n) else prev[0])
            rows.append((prev[0], k, w["output_tokens"], ended, chunks, w["busy_slot_steps"], w["busy_slot_steps_error"]))
            # exact: the server's delta is the tokens of the request that ended in the window, 0 in a window
            # where only its chunks arrived
            assert w["output_tokens"] == ended, rows
            prev = (k, snap)
    assert sum(r[2] for r in rows) == window_summary(start, prev[1])["output_tokens"] == 3 * n
    assert sum(1 for r in rows if r[2] == 0 and r[4] > 0) == 3 * len(marks), rows
    # the live figure: slots busy per decode call, summed, is the tokens generated in the window. Both edges
    # are scrapes sent right after reading event k and answered between two decode steps, so each edge is
    # off by the step the server may have run past event k before answering, the same way at both: at most
    # one step apart (measured: equal, with and without busy loops on both cores), plus the gauge's rounding
    for a, k, _server, _ended, chunks, busy, err in rows:
        if a in (10, 30):  # both edges inside one request
            assert abs(busy - chunks) <= 1 + err, rows

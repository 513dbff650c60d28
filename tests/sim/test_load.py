"""250 simultaneous streams complete; beyond max-running they queue, and their TTFT shows it."""

from __future__ import annotations

import asyncio
import statistics
import time

import aiohttp
import orjson

from loadgen.workloads import tokens
from loadgen.sim.closedloop import conversational_prompts
from tests.sim.helpers import request


async def _stream_all(url: str, n: int, max_tokens: int):
    prompts = conversational_prompts(n, seed=7)
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=120)) as s:

        async def one(i: int):
            body = {"model": "m", "messages": [{"role": "user", "content": prompts[i]}], "max_tokens": max_tokens,
                    "temperature": 0, "ignore_eos": True, "stream": True, "rid": f"load-{i}",
                    "stream_options": {"include_usage": True}}  # fmt: skip
            t0 = time.perf_counter()
            async with s.post(url + "/v1/chat/completions", data=orjson.dumps(body),
                              headers={"Content-Type": "application/json"}) as resp:  # fmt: skip
                ttft = None
                text, usage = [], None
                buf = b""
                async for chunk in resp.content.iter_any():
                    buf += chunk
                    while b"\n\n" in buf:
                        ev, buf = buf.split(b"\n\n", 1)
                        if ev == b"data: [DONE]":
                            continue
                        d = orjson.loads(ev[6:])
                        if d["choices"] and d["choices"][0]["delta"].get("content"):
                            ttft = ttft or time.perf_counter() - t0
                            text.append(d["choices"][0]["delta"]["content"])
                        if d.get("usage"):
                            usage = d["usage"]
                return i, ttft, "".join(text), usage

        results = await asyncio.gather(*(one(i) for i in range(n)))
        truth = (await request(url, "/loadgen/truth?clear=1", method="GET", session=s)).json()
    return results, truth


def test_250_streams_queue_beyond_cap(spec_sim):
    results, truth = asyncio.run(_stream_all(spec_sim.url, 250, 40))
    assert len(results) == 250
    for i, ttft, text, usage in results:
        assert usage["completion_tokens"] == 40 == tokens.count(text), i
    mine = {t["rid"]: t for t in truth if t["rid"].startswith("load-")}
    assert len(mine) == 250
    # the spec server runs at most 48 at once; the rest waited in the queue
    waits = sorted((t["admitted_ns"] - t["received_ns"]) / 1e9 for t in mine.values())
    step_s = 0.2 / 20  # far below one 40-token request's life at time-scale 20
    assert sum(w > step_s for w in waits) >= 250 - 48
    # queued requests wait for running ones to finish: their TTFT exceeds the first batch's by
    # at least half a request's life (absolute TTFTs also hold this busy machine's CPU lag)
    by_ttft = sorted(mine.values(), key=lambda t: t["first_token_ns"] - t["received_ns"])
    ttft = [(t["first_token_ns"] - t["received_ns"]) / 1e9 for t in by_ttft]
    life = statistics.median((t["finished_ns"] - t["first_token_ns"]) / 1e9 for t in by_ttft[:48])
    assert statistics.median(ttft[-100:]) - statistics.median(ttft[:48]) > 0.5 * life
    client = sorted(r[1] for r in results)
    assert statistics.median(client[-100:]) - statistics.median(client[:48]) > 0.5 * life
    # and the truth agrees with what was streamed
    for t in mine.values():
        assert sum(n for _, n in t["events"]) == t["completion_tokens"] == 40
        assert t["first_token_ns"] >= t["admitted_ns"] >= t["received_ns"]


def test_250_streams_baseline_all_run(baseline_sim):
    results, truth = asyncio.run(_stream_all(baseline_sim.url, 250, 30))
    assert all(r[3]["completion_tokens"] == 30 for r in results)
    mine = [t for t in truth if t["rid"].startswith("load-")]
    assert len(mine) == 250
    # baseline's cap (512) holds all 250: one batch, so every request saw ~30 steps of the same batch
    assert max(len(t["steps"]) for t in mine) == 30


def test_adaptive_speculation_turns_off_at_large_batch(live):
    from loadgen.sim.process import SimProcess
    from loadgen.sim.closedloop import closed_loop

    args = ["--speculative-adaptive", "--max-running-requests", "100"]
    with SimProcess(mode="spec", time_scale=25, extra_args=args) as sim:
        asyncio.run(closed_loop(sim.url, 80, 1, max_tokens=30))

        async def fetch():
            return (await request(sim.url, "/loadgen/truth", method="GET")).json()

        truth = asyncio.run(fetch())
    # at batch >= 64 (the profile's adaptive_off_batch) steps are plain decodes: 1 token, no verify
    assert len(truth) == 80
    plain_steps = [len(t["steps"]) - 1 - t["verify_ct"] for t in truth]
    assert sum(p > 0 for p in plain_steps) >= 64  # everyone in the big batch had plain steps
    # a request that never verified got exactly one token per step
    assert all(n == 1 for t in truth if t["verify_ct"] == 0 for _, n in t["steps"])
    # identity: prefill token + plain steps + verify steps + accepted drafts
    assert all(t["completion_tokens"] == 1 + p + t["verify_ct"] + t["accepted_drafts"] for t, p in zip(truth, plain_steps))

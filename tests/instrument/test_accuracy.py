"""The client's figures against a server's own send log (loopback, real processes)."""

import asyncio

import aiohttp
import orjson
import pytest

from loadgen.bench.truth import compare, truth_record
from loadgen.client import StreamClient
from loadgen.protocols import get_protocol
from loadgen.request import GenRequest
from loadgen.runner import _frozen_heap, new_event_loop

from loadgen.bench.procs import pinned, schedserver


async def _drive(url, protocol, concurrency, per_user, max_tokens):
    req = GenRequest(workload="w", prompt="hi", max_tokens=max_tokens)
    records = []
    async with StreamClient(url, get_protocol(protocol), concurrency=concurrency) as client:
        await client.warm(concurrency)

        async def user(u):
            # Starts spread as a stage's ramp spreads them: a first wave of 50 requests written at once
            # keeps the loop from polling while the first chunks land, which is the send burst's cost,
            # not the receive stamping under test.
            await asyncio.sleep(u * 0.004)
            for i in range(per_user):
                records.append(await client.stream(req, f"u{u}-{i}"))

        await asyncio.gather(*(user(u) for u in range(concurrency)))
    async with aiohttp.ClientSession() as s:
        async with s.get(url + "/truth?clear=1") as r:
            truth = orjson.loads(await r.read())
    return records, truth


def measure(url, protocol, concurrency, per_user, max_tokens, loop_kind="auto"):
    loop = new_event_loop(loop_kind)
    try:
        with _frozen_heap():  # as the stage runner measures
            records, truth = loop.run_until_complete(_drive(url, protocol, concurrency, per_user, max_tokens))
    finally:
        loop.close()
    assert all(r.ok for r in records), [(r.error_class, r.error_message) for r in records if not r.ok][:3]
    # The truth's clock starts when the client's request left (the same CLOCK_MONOTONIC): what
    # TTFT is with a perfect receiver. The server's own read time would leave out the time its
    # process took to get to the request, which is server latency the client rightly sees.
    sent = {r.server_id or r.rid: r.sent_ns for r in records}
    t = [truth_record(rid, sent[rid], v["sends"]) for rid, v in truth.items()]
    return records, t, compare(records, t)


@pytest.mark.parametrize("protocol", ["sglang", "chat"])
def test_k_token_chunks_count_as_k_tokens(protocol):
    with schedserver("--tokens", "1,3,2", "--interval-ms", "5", "--ttft-ms", "5") as url, pinned(1):
        records, truth, _ = measure(url, protocol, 4, 2, 41)
    for r in records:
        assert r.output_tokens == 41 and r.tokens_received == 41 and r.token_counts_exact
        # first chunk 1 token, then the 1,3,2 pattern
        assert list(r.chunk_tokens[:7]) == [1, 1, 3, 2, 1, 3, 2]


@pytest.mark.parametrize("concurrency,mode", [(1, "staggered"), (50, "lockstep")])
def test_ttft_itl_chunk_gap_p50_within_half_a_millisecond_of_truth(concurrency, mode):
    # Constant 2-token chunks: with a mixed pattern the per-token ITL is multimodal and its p50 sits on
    # a cliff between modes, where a 0.1 ms shift of one sample moves it by milliseconds.
    with schedserver("--tokens", "2", "--interval-ms", "10", "--ttft-ms", "30", "--mode", mode) as url, \
            pinned(1):
        # C=1: 40 short requests, so TTFT p99 is not just the one slowest request of a handful
        _, _, cmp = measure(url, "sglang", concurrency, 3 if concurrency > 1 else 40, 60 if concurrency > 1 else 20)
    # p50 to half a millisecond. The p99 targets (issue 3) are timing figures that any other process on
    # the machine can spoil, so they live in `loadgen bench client`; here p99 only has to be sane.
    for name in ("ttft", "itl", "chunk_gap"):
        # Lock-step TTFT at C=50 is the known weak spot (measured 0.1-1.0 ms p50 on a quiet machine): the
        # server's write burst spans longer than the client's first wake-up, and first chunks landing
        # while the client handles that wake-up's 50 events get the next poll's stamp. Gaps between
        # chunks of one stream shift alike, so ITL and chunk gap stay within 0.5 ms.
        p50_limit = 2.0 if (name == "ttft" and mode == "lockstep" and concurrency > 1) else 0.5
        assert abs(cmp[name]["error_p50"]) <= p50_limit, (name, "p50", cmp[name])
        assert abs(cmp[name]["error_p99"]) <= 5.0, (name, "p99", cmp[name])
    assert cmp["tokens_per_chunk"]["error_p50"] == 0

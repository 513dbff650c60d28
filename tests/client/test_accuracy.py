"""The client's figures against a server's own send log (loopback, real processes)."""

import asyncio

import aiohttp
import orjson
import pytest

from loadgen.bench.sendlog import compare, truth_record
from loadgen.client.stream import StreamClient
from loadgen.client.protocols import get_protocol
from loadgen.request import GenRequest
from loadgen.client.loops import new_event_loop
from loadgen.run.lifecycle import frozen_heap

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
    """(client records, the server's send log by request id, compare())."""
    loop = new_event_loop(loop_kind)
    try:
        with frozen_heap():  # as the stage runner measures
            records, truth = loop.run_until_complete(_drive(url, protocol, concurrency, per_user, max_tokens))
    finally:
        loop.close()
    assert all(r.ok for r in records), [(r.error_class, r.error_message) for r in records if not r.ok][:3]
    # The truth's clock starts when the client's request left (the same CLOCK_MONOTONIC): what
    # TTFT is with a perfect receiver. The server's own read time would leave out the time its
    # process took to get to the request, which is server latency the client rightly sees.
    sent = {r.server_id or r.rid: r.sent_ns for r in records}
    t = [truth_record(rid, sent[rid], v["sends"]) for rid, v in truth.items()]
    return records, truth, compare(records, t)


@pytest.mark.parametrize("protocol", ["sglang", "chat"])
def test_k_token_chunks_count_as_k_tokens(live, protocol):
    with schedserver("--tokens", "1,3,2", "--interval-ms", "5", "--ttft-ms", "5") as url, pinned(1):
        records, _, _ = measure(url, protocol, 4, 2, 41)
    for r in records:
        assert r.output_tokens == 41 and r.tokens_received == 41 and r.token_counts_exact
        # first chunk 1 token, then the 1,3,2 pattern
        assert list(r.chunk_tokens[:7]) == [1, 1, 3, 2, 1, 3, 2]


def _no_chunk_before_it_was_written(record, truth) -> None:
    """The client's chunks are the server's sends, some read together: each chunk's token count is a run of
    consecutive sends, and it was stamped no earlier than the send before its run's last one had been written
    (the server stamps right after each write, so the last send's own stamp may follow the client's receive).
    Exact however slow the host: a late read only merges sends and moves stamps later."""
    cum, at = 0, {}
    for i, (_, k) in enumerate(truth["sends"]):
        cum += k
        at[cum] = i
    got = 0
    for t_ns, k in zip(record.chunk_ns, record.chunk_tokens):
        got += k
        assert got in at, ("a chunk ends inside a send", list(record.chunk_tokens)[:20], truth["sends"][:20])
        i = at[got]
        floor = truth["sends"][i - 1][0] if i else truth["received_ns"]
        assert t_ns >= floor, (record.rid, i, t_ns - floor)
    assert got == cum == record.output_tokens


@pytest.mark.parametrize("concurrency,mode", [(1, "staggered"), (50, "lockstep")])
def test_chunks_are_the_servers_sends_stamped_after_they_were_written(live, concurrency, mode):
    with schedserver("--tokens", "2", "--interval-ms", "10", "--ttft-ms", "30", "--mode", mode) as url, \
            pinned(1):
        records, truth, cmp = measure(url, "sglang", concurrency, 3 if concurrency > 1 else 40,
                                          60 if concurrency > 1 else 20)
    for r in records:
        _no_chunk_before_it_was_written(r, truth[r.server_id or r.rid])
    # How close the stamps are (p50 within half a millisecond of the send log on a quiet host) is a figure
    # of `loadgen bench client`, not a test: it moves with the host's load.
    assert cmp["ttft"]["client"]["count"] == cmp["ttft"]["truth"]["count"] == len(records)

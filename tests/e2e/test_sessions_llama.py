"""Multi-turn sessions against the real baseline llama-server (chat, its own template and tokenizer).

Each later turn's prompt carries the server's own earlier replies: the prompt tokens the server counted for
turn k equal what its own /apply-template and /tokenize make of the history rebuilt from the client's records
(the workload's user messages, the replies the client collected). The server reports what it reused from
its slot's cache (``timings.cache_n``), so every turn's cache hit rate is reported.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from loadgen.bench.procs import pinned
from loadgen.client.loops import new_event_loop
from loadgen.client.target import Target
from loadgen.run.order import fixed_spec
from loadgen.run.spec import RunOptions
from loadgen.run.stage import run_stage
from loadgen.workloads import Lengths, resolve
from loadgen.workloads.sessions import SessionSpec

from tests.sessionreplay import replayed

from .runs import client_cpus

pytestmark = pytest.mark.e2e

TURNS, PREFIX, SEED = 3, 24, 3


def _stage(url: str):
    source = resolve("chat", Lengths.parse(None, "12", None, False)).requests
    records = []
    opts = RunOptions(seed=SEED, sessions=SessionSpec(turns=TURNS, shared_prefix=PREFIX))
    spec = fixed_spec(2, 0.0, duration_s=None, requests=6)
    loop = new_event_loop()
    try:
        result = loop.run_until_complete(run_stage(Target("baseline", url, "chat", "gemma"), spec, source, opts,
                                                   on_record=records.append))
    finally:
        loop.close()
    return source, records, result


async def _server_count(url: str, messages: list[dict]) -> int:
    """The prompt tokens the server makes of ``messages``: its template, then its tokenizer with BOS."""
    async with aiohttp.ClientSession() as s:
        async with s.post(url + "/apply-template", json={"messages": messages}) as r:
            prompt = (await r.json())["prompt"]
        async with s.post(url + "/tokenize", json={"content": prompt, "add_special": True}) as r:
            return len((await r.json())["tokens"])


def test_later_turns_carry_the_servers_own_replies_and_the_cache_is_reported(llama_baseline: str,
                                                                            llama_server_cpu) -> None:
    with pinned(min(client_cpus(llama_server_cpu))):
        source, records, result = _stage(llama_baseline)
    later = 0
    for rec, history in replayed(records, source(SEED), TURNS, PREFIX):
        assert rec.prompt_tokens == asyncio.run(_server_count(llama_baseline, history)), rec.turn
        assert rec.cached_tokens is not None and 0 <= rec.cached_tokens < rec.prompt_tokens
        assert rec.turn.last or rec.reply  # the answer's text, as the server streamed it
        later += rec.turn.index > 1
    assert later >= 2, "no session reached a later turn"
    figures = result.sessions
    assert figures is not None and figures.planned_turns == TURNS
    d = figures.to_dict()
    done = [t for t in d["per_turn"] if t["completed"]]
    assert len(done) >= 2 and all(t["cache_hit_rate"] is not None for t in done)
    means = [t["prompt_tokens_mean"] for t in done]
    assert means == sorted(means) and means[0] < means[-1]

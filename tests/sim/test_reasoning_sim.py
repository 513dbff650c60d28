"""A reasoning phase on the simulator (``--reasoning-tokens``): its chat stream's wire shape, and the client's
reasoning and answer counts and first output chunk against the simulator's own truth, over loopback."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from loadgen.client.protocols import get_protocol
from loadgen.client.stream import StreamClient
from loadgen.record import RequestRecord
from loadgen.request import GenRequest
from loadgen.sim.process import SimProcess
from loadgen.stage.result import StageAccumulator
from tests.sim.helpers import call, get

THINK = 12
THINK_SPEC = 10
"""Inside a step of the seeded spec server's streams (1, 1, 2, 3, 1, 3, ... tokens): one event ends the thought
and starts the answer."""
SCALE = 20.0


@pytest.fixture(scope="module")
def thinking_sim(live):
    with SimProcess(mode="baseline", time_scale=SCALE, seed=1, extra_args=["--reasoning-tokens", str(THINK)]) as sim:
        yield sim


@pytest.fixture(scope="module")
def thinking_spec_sim(live):
    with SimProcess(mode="spec", time_scale=SCALE, seed=1, extra_args=["--reasoning-tokens", str(THINK_SPEC)]) as sim:
        yield sim


def _chat(url: str, max_tokens: int, **extra):
    body = {"model": "m", "messages": [{"role": "user", "content": "How do tides work?"}], "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True, "stream": True, **extra}
    return call(url, "/v1/chat/completions", body)


def test_the_first_tokens_stream_as_reasoning_content_and_usage_counts_them(thinking_sim):
    ev = _chat(thinking_sim.url, 30, rid="shape-1", stream_options={"include_usage": True}).events()[:-1]
    deltas = [e["choices"][0]["delta"] for e in ev[1:] if e["choices"] and e["choices"][0]["finish_reason"] is None]
    kinds = ["thought" if d.get("reasoning_content") else "answer" for d in deltas]
    assert kinds == ["thought"] * THINK + ["answer"] * (len(kinds) - THINK)
    assert all(d["content"] is None for d in deltas[:THINK]) and all(d["content"] for d in deltas[THINK:])
    usage = ev[-1]["usage"]
    assert usage["completion_tokens"] == 30  # reasoning tokens are completion tokens, as in OpenAI's usage
    assert usage["reasoning_tokens"] == usage["completion_tokens_details"]["reasoning_tokens"] == THINK
    truth = get(thinking_sim.url, "/loadgen/truth?rid=shape-1").json()[0]
    assert truth["reasoning_tokens"] == THINK and truth["completion_tokens"] == 30
    tokens_at = [t for t, n in truth["events"] if n > 0]
    assert tokens_at.index(truth["first_content_ns"]) == THINK


def test_other_routes_carry_no_reasoning(thinking_sim):
    body = {"model": "m", "prompt": "How do tides work?", "max_tokens": 20, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    ev = call(thinking_sim.url, "/v1/completions", body).events()[:-1]
    assert ev[-1]["usage"]["reasoning_tokens"] == 0 and ev[-1]["usage"]["completion_tokens"] == 20
    reply = _chat(thinking_sim.url, 20, stream=False).json()["choices"][0]["message"]
    assert reply["reasoning_content"] and reply["content"]  # the non-streamed answer splits them too


async def _drive(url: str, requests: list[tuple[str, int]]) -> list[RequestRecord]:
    async with StreamClient(url, get_protocol("chat"), concurrency=len(requests)) as client:
        return list(await asyncio.gather(*(client.stream(GenRequest(workload="w", prompt="Why is the sky blue?",
                                                                       max_tokens=m, ignore_eos=True), rid)
                                           for rid, m in requests)))


def _records_and_truth(sim, requests):
    records = asyncio.run(_drive(sim.url, requests))
    assert all(r.ok for r in records), [(r.error_class, r.error_message) for r in records if not r.ok]
    truth = {t["rid"]: t for t in get(sim.url, "/loadgen/truth?clear=1").json()}
    return [(r, truth[r.server_id]) for r in records]


def test_client_counts_each_kind_as_the_simulator_sent_it(thinking_sim):
    """One token an event (baseline): every count exact, the first output chunk the truth's first answer event."""
    pairs = _records_and_truth(thinking_sim, [(f"k{i}", 40) for i in range(6)] + [("short", 8)])
    for rec, truth in pairs:
        assert rec.output_tokens == rec.tokens_received == truth["completion_tokens"] and rec.token_counts_exact
        assert rec.reasoning_tokens == truth["reasoning_tokens"] == rec.server_reasoning_tokens
        assert list(rec.chunk_tokens) == [n for _, n in truth["events"] if n > 0]
        if truth["first_content_ns"]:
            tokens_at = [t for t, n in truth["events"] if n > 0]
            assert rec.first_output_index == tokens_at.index(truth["first_content_ns"]) == THINK
            assert rec.ttfo_ns >= rec.ttft_ns
        else:  # 8 tokens, all of them thought: no output token came
            assert rec.reasoning_tokens == 8 and rec.first_output_index is None and rec.ttfo_ns is None
    acc = StageAccumulator(0, 1 << 62, 1 << 40)
    for rec, _ in pairs:
        acc.add(rec)
    d = acc.result(target="t", url=thinking_sim.url, protocol="chat", concurrency=7).to_dict()
    assert d["reasoning_tokens"]["count"] == 7 and d["reasoning_tokens"]["mean"] == round((6 * THINK + 8) / 7, 4)
    assert d["ttfo"]["count"] == d["output_tpot"]["count"] == 6 and d["reasoning_tpot"]["count"] == 7
    assert d["ttfo"]["min"] >= d["ttft"]["min"]


def test_under_speculation_a_step_across_the_thought_s_end_is_the_answer_s(thinking_spec_sim):
    """One step an event: an event carrying the thought's end and the answer's start is an answer chunk; the
    first output chunk is the truth's first answer event, and the client's reasoning count is the truth's less
    the reasoning part of that event."""
    pairs = _records_and_truth(thinking_spec_sim, [(f"s{i}", 40) for i in range(6)])
    for rec, truth in pairs:
        assert rec.output_tokens == rec.tokens_received == truth["completion_tokens"] == 40
        steps = [n for _, n in truth["events"] if n > 0]
        tokens_at = [t for t, n in truth["events"] if n > 0]
        first = tokens_at.index(truth["first_content_ns"])
        assert list(rec.chunk_tokens) == steps and rec.first_output_index == first
        assert rec.reasoning_tokens == sum(steps[:first]) <= truth["reasoning_tokens"] == THINK_SPEC
        assert rec.server_reasoning_tokens == THINK_SPEC
    assert any(rec.reasoning_tokens < truth["reasoning_tokens"] for rec, truth in pairs)  # that event came
    blocks = _chat(thinking_spec_sim.url, 40).body.split(b"\n\n")
    assert all(b.count(b'"content":') <= 1 for b in blocks)
    assert sum(b'"reasoning_content":"' in b and b'"content":"' in b for b in blocks) == 1  # on the wire, one


def test_without_reasoning_the_first_output_is_the_first_token(baseline_sim):
    for rec, truth in _records_and_truth(baseline_sim, [("plain", 20)]):
        assert rec.reasoning_tokens == 0 and truth["reasoning_tokens"] == 0 and truth["first_content_ns"] == 0
        assert rec.first_output_index == 0 and rec.ttfo_ns == rec.ttft_ns and rec.server_reasoning_tokens == 0


def test_a_negative_reasoning_phase_is_a_one_line_error(live):
    p = subprocess.run([sys.executable, "-m", "loadgen", "sim", "--port", "0", "--reasoning-tokens", "-1"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and p.stderr.strip() == "loadgen: error: --reasoning-tokens must be >= 0", p.stderr

"""Multi-turn sessions against the simulator: each later turn's prompt is the history with the server's own
earlier replies, to the token by the server's count, and the stage's per-turn figures are the records'."""

from collections import Counter

import pytest

from loadgen.client.loops import new_event_loop
from loadgen.client.target import Target
from loadgen.record import CANCELLED
from loadgen.run.order import fixed_spec
from loadgen.run.spec import RunOptions
from loadgen.run.stage import run_stage
from loadgen.sim.process import SimProcess
from loadgen.sim.validate import chat_prompt
from loadgen.workloads import Lengths, resolve
from loadgen.workloads import tokens
from loadgen.workloads.sessions import SessionSpec, prefix_text

from tests.sessionreplay import replayed

TURNS, PREFIX, SEED = 3, 30, 11


@pytest.fixture(scope="module")
def sim(live):
    with SimProcess(mode="spec", time_scale=20, seed=5) as s:
        yield s.url


def _run(url, protocol, spec, lengths=Lengths.parse(None, "400", None, False)):
    # by default natural stops (no ignore_eos, a cap above chat's replies): a reply that ends on EOS ends with an
    # event adding no text
    source = resolve("chat", lengths).requests
    records = []
    opts = RunOptions(seed=SEED, sessions=spec)
    stage = fixed_spec(2, 0.2, duration_s=None, requests=12)
    loop = new_event_loop()
    try:
        result = loop.run_until_complete(run_stage(Target(protocol, url, protocol), stage, source, opts,
                                                   on_record=records.append))
    finally:
        loop.close()
    return source, records, result


@pytest.mark.parametrize("protocol", ["chat", "sglang"])
def test_later_turns_carry_the_servers_own_replies(sim, protocol):
    spec = SessionSpec(turns=TURNS, shared_prefix=PREFIX)
    source, records, result = _run(sim, protocol, spec)
    checked = 0
    # the stage's step 0: the same stream the users drew their sessions from
    for rec, history in replayed(records, source(SEED), TURNS, PREFIX):
        # the server counted the prompt it received: the history with its own earlier replies, to the token
        assert rec.prompt_tokens == tokens.count(chat_prompt(history)), rec.turn
        if not rec.turn.last:
            # the whole answer, as streamed: a natural stop's EOS token has no text
            assert tokens.count(rec.reply) == rec.output_tokens - (rec.finish_reason == "stop")
        checked += rec.turn.index > 1
    assert checked >= 2, "no session reached a later turn"
    assert any(r.finish_reason == "stop" for r in records if r.ok and not r.turn.last)
    # the last turn asks for no reply: nothing to carry
    assert all(r.reply is None for r in records if r.turn is not None and r.turn.last)
    figures = result.sessions
    assert figures is not None and figures.planned_turns == TURNS
    # the stage's per-turn figures are its window's records, turn by turn
    inside = [r for r in records if result.window_start_ns <= r.start_ns < result.window_end_ns and r.turn]
    for index, t in enumerate(figures.turns, 1):
        mine = [r for r in inside if r.turn.index == index]
        assert t.started == len(mine) and t.completed == sum(r.ok for r in mine)
        assert t.prompt_tokens == sum(r.prompt_tokens for r in mine if r.ok)
    means = [t.prompt_tokens / t.prompt_counted for t in figures.turns if t.prompt_counted]
    assert means == sorted(means) and len(means) == TURNS  # the history grows turn by turn


def test_one_turn_sessions_are_plain_requests_with_the_shared_system_prompt(sim):
    source, records, result = _run(sim, "chat", SessionSpec(turns=1, shared_prefix=PREFIX))
    assert result.sessions is None and all(r.turn is None and r.reply is None for r in records)
    drawn = source(SEED)
    system = {"role": "system", "content": prefix_text(PREFIX)}
    expected = [tokens.count(chat_prompt([system, *next(drawn).as_messages()])) for _ in records]
    got = [r.prompt_tokens for r in records if r.ok]
    # the users drew them in order; which of them ended first is the server's business
    assert got and Counter(got) <= Counter(expected)


@pytest.fixture(scope="module")
def small_sim(live):
    # a context of 240 tokens: a chat session's history passes it by its third or fourth turn
    with SimProcess(mode="baseline", time_scale=20, seed=5, extra_args=["--context-length", "240"]) as s:
        yield s.url


def test_a_history_that_overflows_the_context_ends_its_session_as_a_counted_failure(small_sim):
    source, records, result = _run(small_sim, "chat", SessionSpec(turns=6), Lengths.parse(None, "24", None, True))
    failed = [r for r in records if not r.ok and r.error_class != CANCELLED]
    assert failed and all(r.error_class == "http_400" and "context length" in r.error_message for r in failed)
    # a session ends on its failed turn: none of its later turns was sent, and its user began a new one
    last = {}
    for r in records:
        last[r.turn.session] = max(last.get(r.turn.session, 0), r.turn.index)
    assert all(last[r.turn.session] == r.turn.index for r in failed)
    assert max(last) > len({r.turn.session for r in failed}) >= 2
    # the overflow came when the history passed 240 tokens, never before: every ok turn fit
    assert all(r.prompt_tokens + r.output_tokens <= 240 for r in records if r.ok)
    s = result.sessions
    inside = [r for r in failed if result.window_start_ns <= r.start_ns < result.window_end_ns]
    assert sum(t.failed for t in s.turns) == len(inside)
    assert s.ended_by.get("http_400", 0) <= len(inside) and s.turns[0].failed == 0

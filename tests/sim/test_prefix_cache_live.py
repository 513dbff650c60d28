"""The simulator's prefix cache under multi-turn sessions (``loadgen sim --prefix-cache``): each record's
cached tokens are the simulator's truth for that request, a session's first turn finds the shared system
prompt once another request's prefill has put it in the cache, and a later turn finds its whole history
(the previous turn's prompt and reply, cached when that turn finished); without the cache nothing moves."""

import json
import time
import urllib.error
import urllib.request

import pytest

from loadgen.client.loops import new_event_loop
from loadgen.client.target import Target
from loadgen.run.order import fixed_spec
from loadgen.run.spec import RunOptions
from loadgen.run.stage import run_stage
from loadgen.sim.process import SimProcess
from loadgen.workloads import Lengths, resolve
from loadgen.workloads import tokens
from loadgen.workloads.sessions import SessionSpec

TURNS, PREFIX, SEED = 3, 40, 11


@pytest.fixture(scope="module")
def cached_sim(live):
    with SimProcess(mode="baseline", time_scale=20, seed=5, prefix_cache=1_000_000) as s:
        yield s.url


@pytest.fixture(scope="module")
def plain_sim(live):
    with SimProcess(mode="baseline", time_scale=20, seed=5) as s:
        yield s.url


def _get(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        body = r.read()
    return json.loads(body) if body[:1] in b"[{" else body.decode()


def _flush(url: str) -> None:
    """/flush_cache, once the requests an earlier stage cut at its end are aborted (400 while any runs)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            urllib.request.urlopen(urllib.request.Request(f"{url}/flush_cache", method="POST"), timeout=10).close()
            return
        except urllib.error.HTTPError as exc:
            if exc.code != 400 or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _run(url, protocol):
    # an empty cache: the same seed sends the same conversations again, which an earlier run's left cached
    _flush(url)
    source = resolve("chat", Lengths.parse(None, "24", None, True)).requests
    records = []
    opts = RunOptions(seed=SEED, sessions=SessionSpec(turns=TURNS, shared_prefix=PREFIX))
    loop = new_event_loop()
    try:
        result = loop.run_until_complete(run_stage(Target(protocol, url, protocol), fixed_spec(2, 0.2, duration_s=None,
                                                                                               requests=12),
                                                   source, opts, on_record=records.append))
    finally:
        loop.close()
    truth = {t["rid"]: t for t in _get(f"{url}/loadgen/truth?clear=1")}
    return [r for r in records if r.ok], truth, result


@pytest.mark.parametrize("protocol", ["sglang", "chat"])
def test_sessions_reuse_their_history_and_the_records_say_the_truth(cached_sim, protocol):
    records, truth, result = _run(cached_sim, protocol)
    assert records
    # (the truth may hold requests an earlier run cut, finished after its flush: only this run's count)
    prefill_ends = sorted(truth[r.server_id]["steps"][0][0] for r in records if truth[r.server_id]["steps"])
    by_turn = {(r.turn.session, r.turn.index): r for r in records}
    later = shared = 0
    for r in records:
        t = truth[r.server_id]
        # the client read what the server said, and the server said its truth (meta_info / usage)
        assert r.cached_tokens == t["cached_tokens"] < r.prompt_tokens, r.turn
        if r.turn.index == 1:
            # another request's prefill had ended when this one was admitted: the shared system prompt was cached
            if prefill_ends and prefill_ends[0] <= t["admitted_ns"]:
                assert r.cached_tokens >= PREFIX, r.turn
                shared += 1
            continue
        prev = by_turn.get((r.turn.session, r.turn.index - 1))
        if prev is None:
            continue
        # the previous turn's prompt and its reply went in when it finished, before this turn was sent; what
        # follows them (the next user message) is this session's own: the match ends exactly there
        assert r.cached_tokens == prev.prompt_tokens + tokens.count(prev.reply), r.turn
        later += 1
    assert later >= 2 and shared >= 1, (later, shared)
    # the stage's per-turn cache hit is the records'
    for index, turn in enumerate(result.sessions.turns, 1):
        inside = [r for r in records if r.turn.index == index and result.window_start_ns <= r.start_ns
                  < result.window_end_ns]
        assert turn.cached_tokens == sum(r.cached_tokens for r in inside)
    # SGLang's counter moved by the finished requests' cached tokens
    page = _get(f"{cached_sim}/metrics")
    total = next(float(line.rsplit(" ", 1)[1]) for line in page.splitlines()
                 if line.startswith("sglang:cached_tokens_total"))
    assert total >= sum(r.cached_tokens for r in records) > 0


def test_without_the_cache_nothing_is_cached(plain_sim):
    records, truth, result = _run(plain_sim, "sglang")
    assert records and all(r.cached_tokens == 0 and truth[r.server_id]["cached_tokens"] == 0 for r in records)
    assert all(t.cached_tokens == 0 for t in result.sessions.turns)
    assert _get(f"{plain_sim}/server_info")["loadgen_sim"]["prefix_cache"] is None
    # the OpenAI routes say nothing of a cache they do not have
    chat, _, _ = _run(plain_sim, "chat")
    assert chat and all(r.cached_tokens is None for r in chat)

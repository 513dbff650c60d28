"""--stream-shape burst: llama.cpp's stream, one token per event, a step's tokens written back to back."""

from __future__ import annotations

import orjson
import pytest

from loadgen.errors import LoadgenError
from loadgen.sim.process import SimProcess
from tests.conftest import favour
from tests.sim.helpers import call, get

PROMPT = "Copy this sentence exactly: the quick brown fox jumps over the lazy dog near the river bank."
GENERATE = {"text": PROMPT, "sampling_params": {"max_new_tokens": 60, "temperature": 0, "ignore_eos": True},
            "stream": True}  # fmt: skip
CHAT = {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 60, "temperature": 0,
        "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}}  # fmt: skip


@pytest.fixture(scope="module")
def burst_sim(live):
    with SimProcess(profile="pcie-8gpu-eagle3", mode="spec", time_scale=2, seed=1, stream_shape="burst") as sim:
        favour(sim.proc.pid)  # a burst written back to back must not be preempted midway by the host's other work
        yield sim


def _truth(url: str, rid: str) -> dict:
    (t,) = get(url, f"/loadgen/truth?rid={rid}").json()
    return t


def test_generate_sends_one_event_per_token_and_bursts_per_step(burst_sim):
    events = call(burst_sim.url, "/generate", {**GENERATE, "rid": "b-gen"}).events()[:-1]
    counts = [e["meta_info"]["completion_tokens"] for e in events]
    assert counts == list(range(1, 61))  # one token per event, cumulative as SGLang's /generate
    assert [e["meta_info"]["finish_reason"] for e in events[:-1]] == [None] * 59
    last = events[-1]["meta_info"]
    assert last["finish_reason"]["type"] == "length" and last["spec_verify_ct"] >= 1
    assert "spec_verify_ct" not in events[-2]["meta_info"]  # the finish is only on the burst's last event
    t = _truth(burst_sim.url, "b-gen")
    assert [n for _, n in t["events"]] == [1] * 60
    # steps that accepted drafts (a copy prompt: most do) were written as bursts, back to back: a burst
    # spans far less than the gap between steps (11.7 ms at time-scale 2; a burst's events measured 0.1 ms
    # apart: 120x). Time-scale 2, not 20: with 1.1 ms steps a host busy compiling llama.cpp stalled the
    # simulator, its late steps ran back to back (median gap 0.18 ms) and the 5x margin failed.
    # Medians, so one preemption of the simulator on a busy machine does not decide it.
    steps = [n for _, n in t["steps"]]
    assert sum(steps) == 60 and max(steps) > 1 and len(steps) == t["verify_ct"] + 1
    stamps = [ts for ts, _ in t["events"]]
    spans, starts, i = [], [], 0
    for n in steps:
        starts.append(stamps[i])
        if n > 1:
            spans.append(stamps[i + n - 1] - stamps[i])
        i += n
    gaps = sorted(b - a for a, b in zip(starts[1:], starts[2:]))  # the first gap is the prefill's
    assert sorted(spans)[len(spans) // 2] < 0.2 * gaps[len(gaps) // 2], (spans, gaps)


def test_chat_sends_one_token_per_content_event(burst_sim):
    events = call(burst_sim.url, "/v1/chat/completions", {**CHAT, "rid": "b-chat"}).events()
    content = [e for e in events if e != "[DONE]" and e["choices"] and e["choices"][0]["delta"].get("content")]
    assert [e["usage"]["completion_tokens"] for e in content] == list(range(1, 61))
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"  # the role rides on the first event
    assert all(e["choices"][0]["finish_reason"] is None for e in content)
    t = _truth(burst_sim.url, "b-chat")
    assert [n for _, n in t["events"] if n > 0] == [1] * 60 and t["verify_ct"] < 60


def test_server_info_names_the_shape_and_step_is_the_default(live, burst_sim):
    assert get(burst_sim.url, "/server_info").json()["loadgen_sim"]["stream_shape"] == "burst"
    with SimProcess(time_scale=20) as sim:
        assert get(sim.url, "/server_info").json()["loadgen_sim"]["stream_shape"] == "step"


def test_unknown_shape_is_one_line_error(live):
    with pytest.raises(LoadgenError, match="stream-shape"):
        with SimProcess(stream_shape="zigzag"):
            pass

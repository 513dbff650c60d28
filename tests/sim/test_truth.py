"""Ground truth: endpoint, rid filter, clear, JSONL file; a fixed seed gives the same streams."""

from __future__ import annotations

import orjson

from loadgen.sim.process import SimProcess
from tests.sim.helpers import call, get

BODY = {"text": "Hello! Can you tell me how the tides work, in a few friendly sentences?",
        "sampling_params": {"max_new_tokens": 60, "temperature": 0, "ignore_eos": True}, "stream": True}  # fmt: skip


def _stream(url, rid):
    return call(url, "/generate", {**BODY, "rid": rid}).events()[:-1]


def test_truth_records_match_stream(spec_sim):
    ev = _stream(spec_sim.url, "truth-1")
    recs = get(spec_sim.url, "/loadgen/truth?rid=truth-1").json()
    assert len(recs) == 1
    t = recs[0]
    m = ev[-1]["meta_info"]
    assert t["completion_tokens"] == m["completion_tokens"] == 60
    assert t["verify_ct"] == m["spec_verify_ct"] and t["accepted_drafts"] == m["spec_num_correct_drafts"]
    assert t["proposed_drafts"] == m["spec_num_proposed_drafts"]
    assert t["finish_reason"] == "length" and t["prompt_kind"] == "chat" and 0 < t["accept_p"] < 1
    # one event per step here (the client kept up), each stamped after the step that made it
    counts = [e["meta_info"]["completion_tokens"] for e in ev]
    assert [n for _, n in t["events"]] == [b - a for a, b in zip([0] + counts, counts)]
    assert t["received_ns"] <= t["admitted_ns"] <= t["steps"][0][0] <= t["first_token_ns"] == t["events"][0][0]
    assert all(s[0] <= e[0] for s, e in zip(t["steps"], t["events"]))
    assert sum(n for _, n in t["steps"]) == 60 and len(t["steps"]) == t["verify_ct"] + 1
    assert t["finished_ns"] <= t["events"][-1][0]


def test_truth_clear_and_file(live, tmp_path):
    path = tmp_path / "truth.jsonl"
    with SimProcess(time_scale=50, extra_args=["--truth-file", str(path)]) as sim:
        _stream(sim.url, "f-1")
        _stream(sim.url, "f-2")
        assert {r["rid"] for r in get(sim.url, "/loadgen/truth?clear=1").json()} == {"f-1", "f-2"}
        assert get(sim.url, "/loadgen/truth").json() == []
    lines = [orjson.loads(x) for x in path.read_bytes().splitlines()]
    assert [r["rid"] for r in lines] == ["f-1", "f-2"]
    assert set(lines[0]) >= {"rid", "received_ns", "first_token_ns", "events", "prompt_tokens",
                             "completion_tokens", "verify_ct", "accepted_drafts", "finish_reason"}  # fmt: skip


def test_fixed_seed_same_streams(live):
    def run(seed):
        with SimProcess(mode="spec", time_scale=50, seed=seed) as sim:
            out = []
            for rid in ("a", "b"):
                ev = _stream(sim.url, rid)
                out.append([(e["text"], e["meta_info"]["completion_tokens"]) for e in ev])
            return out

    first = run(3)
    assert run(3) == first
    assert run(4) != first

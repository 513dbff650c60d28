"""A trace replayed open-loop against the real llama-servers: ``loadgen crossover --trace FILE`` with
the baseline and the n-gram server as its two targets (chat route, the suite's tiny model on CPU).

The trace is written here, in Mooncake's format: 12 requests over 5.5 s (2 a second), short prompts
(two shared prefix blocks) and 8-16 output tokens, about 0.4 s each on a usual day: at a quarter of
that speed the 4-slot servers still end the window's requests inside the stage's 10 s cool-down. Each target replays the same 12 planned sends (the trace's timestamps, prompts of
its input lengths sharing its prefix blocks, max_tokens its output lengths): the stage dicts must
carry the trace's schedule (planned = sent, the window's requests those the trace plans in it), every
request must end as a completion or a counted failure with its class, the servers' usage must be the
trace's output lengths of the requests that completed, and rates.json and the report must describe
the replay in rate terms.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from loadgen.timing.trace import load_trace

from .runs import LOADGEN, client_cpus, run_cli

pytestmark = pytest.mark.e2e

SPEED = 1.0
WARMUP_S = 1.0
NAME = "tiny"
# (ms after the first, prompt tokens, output tokens, prefix block): the first two are the warm-up's
ENTRIES = [(500 * i, 48 + 8 * (i % 5), 8 + (i * 5) % 9, i % 2) for i in range(12)]
# A dispatch lag p99 above this flags a stage and the rate analysis leaves it out of its comparisons; the
# test checks that whichever way the client's timing went (test_rates_json_and_report_speak_of_the_replay).
MAX_LAG_MS = 50


def _write_trace(path: Path) -> Path:
    # Mooncake's hash_ids are 512-token blocks: every prompt here is one block, half of them the same one
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": n_in, "output_length": n_out,
                                        "hash_ids": [block]}) + "\n" for t, n_in, n_out, block in ENTRIES))
    return path


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory, llama_baseline_server, llama_spec_server, llama_server_cpu):
    root = tmp_path_factory.mktemp("trace")
    trace = _write_trace(root / f"{NAME}.jsonl")
    out = root / "out"
    cmd = LOADGEN + ["crossover", "--target", f"base={llama_baseline_server.url}",
                     "--target", f"ngram={llama_spec_server.url}", "--protocol", "chat", "--model", "gemma",
                     "--trace", str(trace), "--trace-speed", str(SPEED), "--warmup", f"{WARMUP_S:g}s",
                     "--max-dispatch-lag", str(MAX_LAG_MS), "--seed", "3", "--out", str(out)]
    proc = run_cli(cmd, cpus=client_cpus(llama_server_cpu), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"trace": load_trace(trace), "out": out, "proc": proc, "doc": json.loads((out / "run.json").read_text()),
            "rates": json.loads((out / "rates.json").read_text())}


def test_each_target_replays_the_trace_schedule(replay) -> None:
    trace = replay["trace"]
    assert len(trace) == len(ENTRIES)
    in_window = sum(1 for t in trace.times(SPEED) if t >= WARMUP_S)
    assert in_window == 10
    stages = replay["doc"]["stages"]
    assert sorted(s["target"] for s in stages) == ["base", "ngram"]
    for s in stages:
        ol = s["open_loop"]
        assert ol["arrival"] == f"trace x{SPEED:g}"
        assert ol["planned"] == ol["sent"] == len(trace), ol
        req = s["requests"]
        # every request planned inside the window is counted: completed or a failure with its class
        assert req["started"] == in_window, (req, in_window)
        assert req["completed"] + req["failed"] + req["cancelled"] == req["started"]
        assert sum(f["count"] for f in req["failures"].values()) == req["failed"]
        assert s["workloads"].keys() == {f"trace:{NAME}"}
        assert s["rate"] == pytest.approx(trace.rate * SPEED, rel=1e-6)


def test_the_servers_generated_the_traces_lengths(replay) -> None:
    trace = replay["trace"]
    lengths = [e.output_length for e in trace.entries if e.timestamp_s / SPEED >= WARMUP_S]
    for s in replay["doc"]["stages"]:
        done = s["requests"]["completed"]
        # ignore_eos: the server's usage is each completed request's output_length, so the stage's sum is
        # that of `done` of the window's requests (all of them unless a request failed or was cut: a stage
        # whose server fell behind the schedule is cut 10 s after its window, its unfinished requests
        # counted as cancelled)
        sums = {sum(c) for c in itertools.combinations(lengths, done)}
        assert s["server_output_tokens"] in sums, (s["target"], s["server_output_tokens"], done, lengths)
        if s["requests"]["failed"] == s["requests"]["cancelled"] == 0:
            assert s["server_output_tokens"] == sum(lengths)
        assert s["server"]["checks"]["tokens"]["verdict"] == "agree", s["server"]["checks"]["tokens"]


def test_rates_json_and_report_speak_of_the_replay(replay) -> None:
    r = replay["rates"]
    assert r["axis"] == "rate" and r["reference"] == "base" and r["candidates"] == ["ngram"]
    stages = replay["doc"]["stages"]
    for s in stages:
        ol = s["open_loop"]
        # the flag is the stage's own dispatch lag against the bound, nothing else
        assert ol["lag_flagged"] == (ol["dispatch_lag_ms"]["p99"] > MAX_LAG_MS), ol
    # every target is a point; one whose schedule was not kept (dispatch lag flagged: 954 ms once, the client
    # starved beside a load average of 12) carries the flag and is left out of the comparisons, and named
    flagged = {s["target"] for s in stages if s["open_loop"]["lag_flagged"]}
    pts = r["points"][f"trace:{NAME}"]
    assert sorted(p["target"] for p in pts) == ["base", "ngram"], pts
    for p in pts:
        assert p["lag_flagged"] == (p["target"] in flagged), (p, flagged)
        assert p["ended_per_s"] is not None and p["figures"]["ttft_planned_p50"] is not None
    assert {x["target"] for x in (r.get("left_out") or {}).get(f"trace:{NAME}", [])} == flagged, r.get("left_out")
    assert f"trace:{NAME}: open loop" in replay["proc"].stdout
    html = (replay["out"] / "report.html").read_text()
    assert NAME in html and "C=" not in html

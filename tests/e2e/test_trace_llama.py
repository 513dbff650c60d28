"""The shipped trace replayed open-loop against the real llama-servers: ``loadgen crossover --trace
mooncake-small`` with the baseline and the n-gram server as its two targets (chat route, the suite's
tiny model on CPU). Each target replays the same 162 planned sends (the trace's timestamps, prompts of
its input lengths sharing its prefix blocks, max_tokens its output lengths): the stage dicts must carry
the trace's schedule (planned = sent, the window's requests those the trace plans in it), every
request must end as a completion or a counted failure with its class, the servers' usage must equal
the trace's output lengths, and rates.json and the report must describe the replay in rate terms.
"""

from __future__ import annotations

import json

import pytest

from loadgen.timing.trace import load_trace

from .runs import LOADGEN, client_cpus, run_cli

pytestmark = pytest.mark.e2e

SPEED = 1.0
WARMUP_S = 3.0


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory, llama_baseline_server, llama_spec_server, llama_server_cpu):
    out = tmp_path_factory.mktemp("trace") / "out"
    cmd = LOADGEN + ["crossover", "--target", f"base={llama_baseline_server.url}",
                     "--target", f"ngram={llama_spec_server.url}", "--protocol", "chat", "--model", "gemma",
                     "--trace", "mooncake-small", "--trace-speed", str(SPEED), "--warmup", f"{WARMUP_S:g}s",
                     "--max-dispatch-lag", "50", "--seed", "3", "--out", str(out)]
    proc = run_cli(cmd, cpus=client_cpus(llama_server_cpu), timeout=420)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"out": out, "proc": proc, "doc": json.loads((out / "run.json").read_text()),
            "rates": json.loads((out / "rates.json").read_text())}


def test_each_target_replays_the_trace_schedule(replay) -> None:
    trace = load_trace("mooncake-small")
    times = trace.times(SPEED)
    in_window = sum(1 for t in times if t >= WARMUP_S)
    stages = replay["doc"]["stages"]
    assert sorted(s["target"] for s in stages) == ["base", "ngram"]
    for s in stages:
        ol = s["open_loop"]
        assert ol["arrival"] == f"trace x{SPEED:g}"
        assert ol["planned"] == ol["sent"] == len(trace), ol
        req = s["requests"]
        # every request planned inside the window is counted: completed or a failure with its class
        assert req["started"] == in_window, (req, in_window)
        assert req["completed"] + req["failed"] == req["started"]
        assert sum(f["count"] for f in req["failures"].values()) == req["failed"]
        assert s["workloads"].keys() == {"trace:mooncake-small"}
        assert s["rate"] == pytest.approx(trace.rate * SPEED, rel=1e-6)


def test_the_servers_generated_the_traces_lengths(replay) -> None:
    trace = load_trace("mooncake-small")
    want = sum(e.output_length for e in trace.entries if e.timestamp_s / SPEED >= WARMUP_S)
    for s in replay["doc"]["stages"]:
        if s["requests"]["failed"] == 0:
            # ignore_eos: the server's usage is each request's output_length
            assert s["server_output_tokens"] == want, (s["target"], s["server_output_tokens"], want)


def test_rates_json_and_report_speak_of_the_replay(replay) -> None:
    r = replay["rates"]
    assert r["axis"] == "rate" and r["reference"] == "base" and r["candidates"] == ["ngram"]
    pts = r["points"]["trace:mooncake-small"]
    assert {p["target"] for p in pts} == {"base", "ngram"}
    for p in pts:
        assert p["ended_per_s"] is not None and p["figures"]["ttft_planned_p50"] is not None
    assert "trace:mooncake-small: open loop" in replay["proc"].stdout
    html = (replay["out"] / "report.html").read_text()
    assert "mooncake-small" in html and "C=" not in html

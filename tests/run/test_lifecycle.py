"""A stage's lifecycle as a user meets it: the steady warm-up, time budgets, cuts told as they happened.

Real processes (`loadgen run` against the embedded simulator), real signals.
"""

import json
import re
import signal
import subprocess
import sys
import time

from loadgen.bench.client_bench import RequestCycle
from loadgen.bench.procs import schedserver
from loadgen.request import GenRequest
from loadgen.run.spec import RunOptions, StageSpec
from loadgen.run.stage import run_stage_sync
from loadgen.client.target import Target


def _start(out, *args):
    """``out``: the run's run.json; --out is its folder."""
    return subprocess.Popen([sys.executable, "-m", "loadgen", "run", "--sim-time-scale", "10", "--out", str(out.parent),
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stages(out):
    return json.loads(out.read_text())["stages"] if out.exists() else []


def _wait_for(pred, timeout_s=120.0):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.2)
    return False


def _stderr_until(p, needle: str, timeout_s=120.0) -> str:
    """Read the child's stderr line by line until ``needle`` shows up (or it exits)."""
    seen = []
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            break
    return "".join(seen)


def test_interrupted_warmup_is_noted_as_such(live, tmp_path):
    """SIGTERM during a long warm-up: the stage is kept, cut in the warm-up, and says only that (before:
    "cool-down exceeded 600 s", "N of M users had not finished a first request", "no request started")."""
    out = tmp_path / "run.json"
    p = _start(out, "--ladder", "4", "--warmup", "60s", "--duration", "5s")
    _stderr_until(p, "[1/1]")  # the stage has begun: its warm-up lasts 60 s
    time.sleep(1.0)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    [s] = _stages(out)
    assert s["incomplete"] is True
    assert s["cut"]["phase"] == "warm-up" and s["cut"]["by"] == "interrupt"
    assert 0 < s["cut"]["at_s"] < 60.0  # where it was cut: inside the 60 s warm-up
    assert len(s["notes"]) == 1, s["notes"]
    assert "during the warm-up" in s["notes"][0] and "never opened" in s["notes"][0]
    assert not any("cool-down" in n or "users had not finished" in n or "no request started" in n for n in s["notes"])


def test_interrupted_window_with_two_processes_is_kept_with_progress(live, tmp_path):
    """--processes 2: progress lines appear and the interrupted stage is kept, marked incomplete,
    its window cut where it was (before: no progress line, and the stage missing from run.json)."""
    out = tmp_path / "run.json"
    p = _start(out, "--ladder", "4", "--warmup", "0.5s", "--duration", "60s", "--processes", "2")
    seen = _stderr_until(p, "window", timeout_s=60)  # the merged progress line: the window is open
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=90)
    assert p.returncode == 130, seen + err
    assert "C=4: window" in seen + err, seen + err  # the merged progress line of both processes
    stages = _stages(out)
    [s] = stages
    assert s["incomplete"] is True and s["client"]["processes"] == 2
    assert s["cut"]["phase"] == "window" and s["cut"]["by"] == "interrupt"
    assert 0 < s["window"]["duration_s"] < 60 and s["output_tokens"] > 0
    assert any("in the window" in n and "cut to" in n for n in s["notes"]), s["notes"]


def test_max_stage_time_cuts_the_stage_and_the_ladder_goes_on(live, tmp_path):
    out = tmp_path / "run.json"
    p = _start(out, "--ladder", "1,2", "--warmup", "0.5s", "--duration", "30s", "--max-stage-time", "4s")
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    stages = _stages(out)
    assert [s["concurrency"] for s in stages] == [1, 2]
    for s in stages:
        assert s["incomplete"] is True and s["cut"]["by"] == "max-stage-time" and s["cut"]["phase"] == "window"
        # the window is what the 4 s budget left after the warm-up
        assert 0 < s["window"]["duration_s"] < 4.0 and s["output_tokens"] > 0
        assert any("--max-stage-time (4 s) reached in the window" in n for n in s["notes"]), s["notes"]
        # the requests running at the cut were cancelled by the runner: counted apart, none as the server's failure
        req = s["requests"]
        assert req["failed"] == 0 and req["failures"] == {} and req["started"] == req["completed"] + req["cancelled"]
    assert "estimated" in err and "left" in err


def test_max_run_time_stops_the_run_and_says_what_was_not_run(live, tmp_path):
    out = tmp_path / "run.json"
    # each stage gets at least its warm-up and a second of window (2 s): three fit in 6 s, the fourth does not
    p = _start(out, "--ladder", "1,2,3,4", "--warmup", "1s", "--duration", "3s", "--max-run-time", "6s")
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    doc = json.loads(out.read_text())
    assert len(doc["run"]["planned_stages"]) == 4
    ran = len(doc["stages"])
    assert 1 <= ran < 4
    assert doc["run"]["cut"] == {"by": "max-run-time", "stages_not_run": 4 - ran}
    assert "at most 6 s (--max-run-time)" in err and "--max-run-time reached" in err
    for s in doc["stages"]:  # each stage was cut by its share and says so; the ladder went on
        assert s["cut"]["by"] == "max-run-time" and s["output_tokens"] > 0
        assert any("its share of --max-run-time" in n for n in s["notes"]), s["notes"]


def test_warmup_ends_when_the_load_is_steady(live):
    """A server with a constant rate: the window opens once every user started and the rate settled,
    long before the cap (the old rule: 2.5 request durations)."""
    req = GenRequest(workload="w", prompt="x", max_tokens=100)
    with schedserver("--interval-ms", "10", "--tokens", "1", "--ttft-ms", "10", cpu=None) as url:
        spec = StageSpec(8, duration_s=2.0, warmup_s=0.5, max_warmup_s=30.0, ramp_s=1.0, expected_request_s=1.0)
        t0 = time.perf_counter_ns()
        res = run_stage_sync(Target("t", url, "sglang"), spec, RequestCycle([req]), RunOptions())
    opened_after_s = (res.window_start_ns - t0) / 1e9
    # not before the 1 s ramp has started every user, and measured steady, not at the 30 s cap (a note would
    # say so): ~2 s on a quiet host, the ramp then two 0.5 s spans of equal rate
    assert opened_after_s > 1.0, opened_after_s
    d = res.to_dict()
    assert d["cut"] is None and not d["incomplete"] and d["notes"] == [], d["notes"]
    assert d["requests"]["completed"] > 0 and d["output_tokens"] == sum(d["timeline"]["tokens"])


def test_streams_running_at_the_stage_end_count_their_window_chunks(live):
    """Requests far longer than the window (started in the warm-up, still streaming when the stage ends)
    deliver most of the window's tokens: they count (before: dropped, window tokens ~0)."""
    req = GenRequest(workload="w", prompt="x", max_tokens=2000)  # 20 s per request at 100 tok/s
    with schedserver("--interval-ms", "10", "--tokens", "1", "--ttft-ms", "10", cpu=None) as url:
        spec = StageSpec(4, duration_s=2.0, warmup_s=1.0, max_cooldown_s=2.0)
        res = run_stage_sync(Target("t", url, "sglang"), spec, RequestCycle([req]), RunOptions())
    d = res.to_dict()
    # the window's tokens all came from streams that neither started nor ended in it (4 streams x 100 tok/s,
    # 400 tok/s on a quiet host; how close is `loadgen bench client`'s)
    assert d["output_tokens"] > 0 and d["output_tokens"] == sum(d["timeline"]["tokens"]), d["output_tokens"]
    assert d["requests"]["started"] == 0 and "no request started inside the steady window" in d["notes"]


def test_a_window_shorter_than_a_request_says_so(live):
    req = GenRequest(workload="w", prompt="x", max_tokens=300)  # 3 s per request at 100 tok/s
    with schedserver("--interval-ms", "10", "--tokens", "1", "--ttft-ms", "10", cpu=None) as url:
        spec = StageSpec(16, duration_s=1.0, warmup_s=1.0, ramp_s=3.0)  # users starting in the window
        res = run_stage_sync(Target("t", url, "sglang"), spec, RequestCycle([req]), RunOptions())
    d = res.to_dict()
    assert d["requests"]["completed"] >= 1
    [note] = [n for n in d["notes"] if "shorter than this stage's typical request" in n]
    # a request is 300 tokens 10 ms apart by the server's schedule: 3.0 s, more on a slow host
    e2e = float(re.search(r"E2E p50 ([\d.]+) s", note).group(1))
    assert "window (1.0 s)" in note and e2e >= 3.0, note


def test_the_default_window_grows_to_a_request_within_the_budget():
    from loadgen.run.ramp import warmed_spec

    assert warmed_spec(64, 5.0, 20.0, duration_s=8.0).duration_s == 8.0  # the user's window stays
    assert warmed_spec(64, 5.0, 20.0, duration_s=8.0, adapt_window=True).duration_s == 20.0
    # a 60 s budget leaves 60 - (ramp 20 + 2) - cool-down 20 = 18 s for the window
    assert warmed_spec(64, 5.0, 20.0, duration_s=8.0, adapt_window=True, max_stage_s=60.0).duration_s == 18.0
    spec = warmed_spec(64, 5.0, 20.0, duration_s=8.0)
    assert spec.max_warmup_s == 50.0 and spec.warmup_s == 5.0 and spec.ramp_s == 20.0
    # no duration to go by (a target's first stage): steadiness decides, not a cap at the minimum
    first = warmed_spec(256, 3.0, None, duration_s=10.0)
    assert first.ramp_s == 0 and first.warmup_s == 3.0 and first.max_warmup_s == 120.0
    # the users' starts spread over the likely request (never longer than the guess); the cap stays the guess's,
    # and no earlier than 2 s whatever the minimum warm-up
    likely = warmed_spec(10, 1.0, 4.5, duration_s=6.0, likely_e2e_s=0.9)
    assert (likely.ramp_s, likely.expected_request_s, likely.max_warmup_s) == (0.9, 4.5, 11.25)
    assert warmed_spec(10, 1.0, 0.5, duration_s=6.0, likely_e2e_s=0.9).ramp_s == 0.5
    assert warmed_spec(30, 1.0, 0.6, duration_s=6.0, likely_e2e_s=0.5).max_warmup_s == 2.0


def test_warmup_waits_for_every_first_request_to_stream(live):
    """A server that takes its first prompts in slowly (3 s to a first token): a rate flat at zero is not a
    steady load; the window opens only once every user's first request streams (seen on an H200 at C=256:
    a 10 s window with 167 tokens while the server was still admitting)."""
    req = GenRequest(workload="w", prompt="x", max_tokens=1000)  # then 10 s of streaming
    with schedserver("--interval-ms", "10", "--tokens", "1", "--ttft-ms", "3000", cpu=None) as url:
        spec = StageSpec(4, duration_s=1.0, warmup_s=0.5, max_warmup_s=30.0, ramp_s=0.2, expected_request_s=1.0)
        t0 = time.perf_counter_ns()
        res = run_stage_sync(Target("t", url, "sglang"), spec, RequestCycle([req]), RunOptions())
    opened_after_s = (res.window_start_ns - t0) / 1e9
    assert opened_after_s > 3.0, opened_after_s  # the server's first token comes 3 s after each request
    d = res.to_dict()
    assert d["output_tokens"] > 0 and not any("cap" in n for n in d["notes"]), d["notes"]


def test_a_warmup_cut_short_by_the_budget_says_so(live):
    """A stage budget too small for the warm-up the load needs: the window opens early and the note says
    why (the H200 run's last stage opened 3 s in, silently, while the server was still taking prompts in)."""
    req = GenRequest(workload="w", prompt="x", max_tokens=1000)
    with schedserver("--interval-ms", "10", "--tokens", "1", "--ttft-ms", "3000", cpu=None) as url:
        spec = StageSpec(4, duration_s=1.0, warmup_s=0.5, max_warmup_s=30.0, ramp_s=0.2, expected_request_s=1.0,
                         max_stage_s=3.0)
        res = run_stage_sync(Target("t", url, "sglang"), spec, RequestCycle([req]), RunOptions())
    notes = res.to_dict()["notes"]
    assert any("warm-up was cut short" in n and "stage's budget (3 s, max-stage-time)" in n for n in notes), notes


def test_users_started_together_wait_for_their_first_requests_to_end(live):
    """No ramp (a first stage): the window opens only after every user has finished a first request, not
    on the flat rate of one lock-step wave (the H200's first stage at C=256 opened 3 s in)."""
    req = GenRequest(workload="w", prompt="x", max_tokens=300)  # 3 s per request
    with schedserver("--interval-ms", "10", "--tokens", "1", "--ttft-ms", "10", cpu=None) as url:
        spec = StageSpec(8, duration_s=1.0, warmup_s=0.5, max_warmup_s=30.0)
        t0 = time.perf_counter_ns()
        res = run_stage_sync(Target("t", url, "sglang"), spec, RequestCycle([req]), RunOptions())
    assert (res.window_start_ns - t0) / 1e9 > 3.0  # a first request is 3 s by the server's schedule
    assert not any("had not finished a first request" in n for n in res.to_dict()["notes"])


def test_a_dead_server_is_measured_not_waited_on(live, tmp_path):
    """Nothing listens: no token ever arrives, but requests fail steadily — the window opens and counts
    them (a zero rate alone is not steady; with failures it is), instead of waiting out the 120 s cap."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = StageSpec(2, duration_s=1.0, warmup_s=0.5, max_warmup_s=120.0)
    t0 = time.perf_counter_ns()
    res = run_stage_sync(Target("t", f"http://127.0.0.1:{port}", "sglang"), spec,
                         RequestCycle([GenRequest(workload="w", prompt="x", max_tokens=10)]), RunOptions())
    d = res.to_dict()
    # the window opened on the steady failures, not at the warm-up's 120 s cap (which a note would name)
    assert (res.window_start_ns - t0) / 1e9 < 120 and not any("cap" in n for n in d["notes"]), d["notes"]
    assert d["requests"]["completed"] == 0 and set(d["requests"]["failures"]) == {"connect"}

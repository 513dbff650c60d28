"""The concurrency ramp over two or more targets as a Locust locustfile.

    locust -f scenarios/ramp.py --headless                       # embedded simulators, default ladder
    locust -f scenarios/ramp.py --headless --ladder 1,2 --duration 5s --warmup 1s
    locust -f scenarios/ramp.py --headless --sim-modes baseline,spec,spec-topk4   # three configurations
    locust -f scenarios/ramp.py --config scenarios/example.toml  # web UI on http://localhost:8089
    locust -f scenarios/ramp.py --headless --processes 2         # users spread over 2 worker processes

At every concurrency each target runs once, all seeing the same prompts: two alternate
(baseline@1, spec@1, baseline@2, ...), three or more rotate so that none always runs first or
last. The first target is the reference, the others its candidates. Results (JSON, CSV, .hlog)
are written to the output folder as each stage ends; `loadgen crossover --from results/ramp/ramp.json`
analyses them. With no [targets.*] in the config, the embedded simulator is started once per
[simulator].modes (default baseline and spec). See docs/locust.md.
"""

from loadgen.locust import LLMUser, RampShape, install  # noqa: F401  (Locust finds the user and shape here)

install()

"""The two-target concurrency ramp as a Locust locustfile.

    locust -f scenarios/ramp.py --headless                       # embedded simulators, default ladder
    locust -f scenarios/ramp.py --headless --ladder 1,2 --duration 5s --warmup 1s
    locust -f scenarios/ramp.py --config scenarios/example.toml  # web UI on http://localhost:8089
    locust -f scenarios/ramp.py --headless --processes 2         # users spread over 2 worker processes

Stages alternate between the targets (baseline@1, spec@1, baseline@2, ...), both
seeing the same prompts; results (JSON, CSV, .hlog) are written to the output
folder as each stage ends. With no [targets] in the config, the embedded
simulator is started twice (baseline and speculative). See docs/locust.md.
"""

from loadgen.locust import LLMUser, RampShape, install  # noqa: F401  (Locust finds the user and shape here)

install()

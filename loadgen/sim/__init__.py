"""The embedded simulator: an SGLang-compatible server that knows its own truth.

In: a profile (model, GPU, speculative method and its acceptance), a mode (baseline or
spec), a time scale. Out: an HTTP server speaking SGLang's API and the OpenAI routes, whose
scheduler decides every token's time; it records what it sent (``truth``) and can run the same
schedule in virtual time (``virtual``, ``known``) so a run's crossover can be checked.

- ``profiles``/``model``/``calibrate``: the cost model; ``scheduler``: continuous batching;
- ``server`` (request life), ``routes`` (generation), ``admin`` (info, health, metrics), ``wire``;
- ``validate``/``requestplan``/``textgen``/``acceptance``: a request's checks, plan and text;
- ``process``: the simulator as a child process; ``closedloop``: a plain load on it (its benchmark,
  ``loadgen bench sim``, is loadgen/bench/sim_bench.py).
"""

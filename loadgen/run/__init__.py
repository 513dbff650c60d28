"""Running load: the one stage order, one stage's one lifecycle, and the result files.

In: targets, a workload source and the run's plan (:class:`loadgen.run.ramp.RampPlan`). Out:
finished :class:`loadgen.stage.result.StageResult` s, written as each stage ends (``run.json``,
``run.csv``, ``run.hlog``), plus the run's cut, estimates and progress lines.

- ``order``: the one stage order (targets alternating per concurrency) and each stage's plan
  (steady warm-up, window, budget share, estimates); ``ramp`` runs that order;
- ``spec``: what a stage is asked to do; ``window``: its bookkeeping;
- ``lifecycle``: the one window lifecycle (warm-up until steady, open/close, cool-down, cut,
  notes), used by ``stage`` (one process), ``processes`` (N processes) and the Locust stage;
- ``pacing``: the one user loop and its pacing policy: ``Closed`` (C users, the next request when one
  ends) or ``Open`` (planned instants, an optional in-flight cap), for the runner and Locust alike;
- ``orchestrate``/``probe``: starting servers and asking them what they are;
- the server's own ``/metrics`` view of each window is loadgen.serverview (a ServerWatch per stage);
- ``results``: the result files; ``progress``: the live progress line.
"""

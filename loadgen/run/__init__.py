"""Running load: stages, their one lifecycle, and the one stage order.

In: targets, a workload and the run's settings. Out: finished
:class:`loadgen.stage.result.StageResult` s, written as each stage ends (``run.json``,
``run.csv``, ``run.hlog``), plus the run's cut, estimates and progress lines.

- ``runner``: one stage (users, warm-up until steady, window, cool-down), in one or many processes;
- ``ramp``: the stage order over targets and concurrencies, budgets and estimates;
- ``orchestrate``/``probe``: starting servers and asking them what they are;
- ``servermetrics``: the server's own ``/metrics`` view of each window;
- ``results``: the result files; ``progress``: the live progress line.
"""

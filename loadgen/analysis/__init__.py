"""Analysis: stage results become comparisons, crossovers and verdicts.

In: the stages of a run (live or reloaded from ``run.json``). Out: per workload and metric,
the per-stage differences with bootstrap intervals, where the better configuration changes,
and a verdict that claims no more than was measured.

- ``stats``: bootstrap and interval arithmetic; ``crossover``: samples, comparison, locating
  and refining a crossover; ``compare``: a whole run's analysis and the words of its verdicts.
"""

"""Analysis: stage results become comparisons, crossovers and verdicts.

In: the stages of a run (live or reloaded from ``run.json``). Out: per workload and metric,
the per-stage differences with bootstrap intervals, where the better configuration changes,
and a verdict that claims no more than was measured.

- ``stats``: bootstrap and interval arithmetic;
- ``results``: the typed results (comparison, crossover, region, metric analysis) and their JSON;
- ``bootstrap``: a comparison's replicates, regenerated from the inputs it carries;
- ``comparison``: one concurrency; ``locate``: a ladder, its crossovers; ``refine``: where to measure next;
- ``verdict``: the words; ``crossover``: the reading guide, and every name of the above in one import;
- ``coverage``: what a run's verdicts rest on; ``compare``: a whole run's analysis (crossover.json);
  ``rates``: an open loop's (rates.json); ``configs``: three or more configurations at once;
- ``truth``: the embedded simulators' own answers beside a run's; ``answer``: which analysis a run gets
  (its axis), made with that truth, and the one reader and writer of its file.
"""

"""Where does speculative decoding stop (or start) paying off?  The statistics.

This package part is pure: it takes per-window measurements of one metric for
the two targets ("baseline" and "spec") at each concurrency C of the ladder and
says, with stated confidence, where speculation is better, worse or tied and
where the better target changes (a *crossover*).  It does no I/O.

This module is the reading guide and the one import for all of it; the work is
done in, pipeline order: ``results`` (the typed results and their JSON form),
``bootstrap`` (§2: replicates from a comparison's inputs), ``comparison`` (§1-3:
one concurrency), ``locate`` (§4: the whole ladder, crossovers), ``refine``
(§4: where to measure next) and ``verdict`` (§3-4 in words).

Reading guide (plain words)
===========================

1. What is compared at one concurrency
--------------------------------------
A stage's steady window is cut into equal time windows (say 2 s) and the
metric is measured in each, e.g. output tok/s.  For each target we take the
**mean** over the windows; for equal windows the mean of per-window rates is
the total tokens over the total time, the figure people mean by "throughput".
(Medians of 3-20 values are coarse and bootstrap badly, so we don't use them.)
The difference is relative::

    delta = (mean_spec - mean_baseline) / mean_baseline

so +0.10 means speculation is 10 % higher.  For a metric where lower is
better (TTFT, ITL) a negative delta is good for speculation.

2. How sure are we about delta?  (the interval)
-----------------------------------------------
Consecutive windows are not independent: a window with a lucky batch is
followed by a similar one.  Treating them as independent would make the
interval too narrow.  So:

* We estimate how strongly neighbouring windows are correlated (the lag-1
  autocorrelation), pooled over every stage and both targets of the metric:
  one stage's ten windows cannot tell, but a ladder's couple of hundred can.
  Short series underestimate it by about (1 + 3r)/n, which we add back.
* We resample each target's windows with a **circular block bootstrap**: glue
  together randomly chosen runs of consecutive windows (block length from the
  Hall-Horowitz-Jing rule for the estimated correlation, at most n/3) into a
  new series of the same length and take its mean; 2000 times.  The two
  targets ran separately, so they are resampled independently.  Random
  numbers come from fixed seeds derived from (seed, C, target): the same input
  always gives the same answer.
* A bootstrap from a handful of windows is too narrow, for three known
  reasons, and we correct each: the spread of a resampled mean is short by the
  familiar factor (n-1)/n (more with blocks); short blocks miss correlation
  between windows further apart (we add it back assuming the correlation decays
  geometrically, AR(1)); and with few windows the spread itself is uncertain, so
  the interval is stretched from normal to Student-t width, with degrees of
  freedom from the effective number of independent windows (Welch-Satterthwaite
  across the two targets).
* The interval is read off the resampled log(mean_spec / mean_baseline) at the
  5th and 95th percentiles (for 90 %) and turned back into delta.

Measured on synthetic stages (tests/analysis prints the figures): nominal
90 % intervals cover the true delta in 91-95 % of stages, for independent
windows, for lag-1 correlation 0.3 and 0.5, for 4 to 20 windows a stage and
for unequal counts between the targets.

3. The verdict at one stage
---------------------------
"tie" when the interval contains 0, or when |delta| is below a practical
margin (default 1 %: a smaller difference is not worth a configuration
change even when it is real); otherwise "spec" or "baseline", whichever is
better for this metric.

A tie only says the two were not told apart.  It is a *measured* tie
("no difference beyond ±5 %") when the whole interval lies inside
±``tie_margin`` (default 5 %); otherwise the stage is **inconclusive**
(``StageComparison.wide``): on the issue's GPU run a "tie" at C=16 had the
interval [-43.9, +102.7] %, which rules out nothing.  5 %: repeated runs of
one server drifted by ±10 % (§Limits), so a single run's tie is not worth
claiming tighter, and a possible loss wider than that matters to the
decision.  :func:`recommendation` says how much more data an inconclusive
stage needs: the interval's half-width falls as 1/sqrt(windows), so
narrowing it to ±tie_margin takes about (half-width / tie_margin)² times the
windows (on the log scale; tests/analysis/test_verdicts.py checks it).  A
narrower interval is necessary, not sufficient, for a tie: if the difference
is real it then shows up as a winner instead, which settles it as well.

4. Many stages at once, and crossovers
--------------------------------------
A 90 % interval is wrong one time in ten.  Over an 8-stage ladder of pure
noise, stage-by-stage verdicts show speculation "winning" somewhere and
"losing" somewhere else - a false crossover - in about 9 % of ladders
(measured).  A crossover is a claim about the whole ladder, so it is judged on
**simultaneous** intervals: each of the k ladder stages at level
0.90^(1/k) (98.7 % for k = 8; the Sidak correction), so that all k hold
together with 90 % probability.  A false crossover needs at least one wrong
verdict, so it happens in at most 10 % of ladders, in practice far fewer (0 of
200 pure-noise ladders).  ``StageComparison.family_verdict`` is the verdict at
that level and the regions in :class:`MetricAnalysis` use it; a change of
winner that only the per-stage verdicts show is listed in ``candidates``,
not ``crossovers``.

A crossover is declared between two consecutive significant ladder stages
with opposite verdicts.  Tied stages between them are allowed (the crossover
lies somewhere across the tie); all stages from one bracket to the other form
its *span*.

* **Estimate.**  Across the span, delta should move from one sign to the
  other; we fit the closest monotone sequence to the measured deltas (weighted
  isotonic regression, so a noisy tie cannot make it zig-zag) and find where
  the line joining them on log C reaches zero.  With only the two brackets
  this is plain linear interpolation of delta on log C.
* **Interval.**  Every concurrency in the span where the difference,
  interpolated on log C between neighbouring stages, is not distinguishable
  from zero at the simultaneous level: for each candidate C, the matching
  bootstrap replicates of the two neighbouring stages are interpolated, and C
  is in the interval unless zero falls in a tail of that distribution.  (This
  is Fieller's idea: it widens by itself when the slope is uncertain, where
  percentiles of a bootstrapped zero would not.)  It is then cut at the last
  stage where one target is significantly better and the first where the
  other is, since the zero cannot lie beyond them if delta is monotone; in
  particular it never leaves the bracket.  The interval is at the
  simultaneous level, so read "90 %" as "at least 90 %": in the tests it
  covers the true crossover in 98-100 % of ladders.
* **Direction.**  "spec_to_baseline" when speculation wins below and loses
  above, else "baseline_to_spec".

Interpolation is the weak point: delta is not a straight line in log C, and
with stages a factor 3 apart the interpolated zero can be off by 10 % or more
(the issue's table: 14.8 interpolated between C=10 and 30, against 13.4 where
smooth curves through the same points cross), while the interval only
accounts for noise; on the coarse ladder it still covered the true crossover
in 56 of 60 synthetic ladders, but the estimate was within 15 % in only 48.
:func:`refine_plan` fixes this by proposing a stage in the middle (on log C)
of the gap between measured stages that holds most of the interval, until
both the interval and the gaps it overlaps are narrower than a ratio
(default 1.3) or a budget is spent; with about 5 extra stages the estimate
was within 15 % in 60 of 60.  Stages added this way help to place the crossovers they lie in but
never declare one (pass the planned ``ladder`` to :func:`analyze`), so
refining cannot create a crossover nor dilute the simultaneous level.

5. Limits
---------
* The interval covers window-to-window noise within a run, not drift between
  runs done at different times (the issue's five single-stream runs of one
  server ranged 88.6-107.7 tok/s).  To include that, repeat stages and pass
  one value per repetition as the samples, or alternate the targets.
* With fewer than about 5 windows per stage the correlation cannot be
  estimated and is taken as 0 (right for repetitions, optimistic for windows).
* Power: with the issue's table, 2-5 % window noise and lag-1 correlation
  0.3, the crossover was confirmed in 60/60 ladders with 20 windows a stage,
  53/60 with 15 and 34/60 with 10; with correlation 0.5 and 20 windows, 50/60.
  Most misses still show up as candidates: measure longer steady windows
  when that happens.
"""

from __future__ import annotations

from loadgen.analysis.bootstrap import Boot, boot_of
from loadgen.analysis.comparison import compare_stage
from loadgen.analysis.locate import analyze, find_crossovers, judge
from loadgen.analysis.refine import refine_plan
from loadgen.analysis.results import (
    BASELINE,
    BASELINE_TO_SPEC,
    DEFAULT_CONFIDENCE,
    DEFAULT_MARGIN,
    DEFAULT_N_BOOT,
    DEFAULT_TIE_MARGIN,
    INCONCLUSIVE,
    NOT_COMPARED,
    SPEC,
    SPEC_TO_BASELINE,
    TIE,
    Bootstrap,
    Crossover,
    MetricAnalysis,
    Region,
    StageComparison,
    StageSamples,
)
from loadgen.analysis.verdict import Scope, Verdict, more_data_factor, recommendation, verdict

__all__ = [
    "StageSamples",
    "StageComparison",
    "Bootstrap",
    "Crossover",
    "Region",
    "MetricAnalysis",
    "compare_stage",
    "find_crossovers",
    "analyze",
    "judge",
    "refine_plan",
    "recommendation",
    "DEFAULT_CONFIDENCE",
    "DEFAULT_MARGIN",
    "DEFAULT_TIE_MARGIN",
    "DEFAULT_N_BOOT",
    "Scope",
    "Verdict",
    "verdict",
    "more_data_factor",
    "Boot",
    "boot_of",
    "SPEC",
    "BASELINE",
    "TIE",
    "INCONCLUSIVE",
    "NOT_COMPARED",
    "SPEC_TO_BASELINE",
    "BASELINE_TO_SPEC",
]

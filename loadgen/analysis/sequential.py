"""When one load point's comparison is over: decided, a measured tie, or still open after the looks it had.

In: a point's :class:`~loadgen.analysis.results.StageComparison` (from the pooled windows of every pass over it
so far, its interval at :func:`look_level`), and the number of looks the run planned. Out: an :class:`Ending`:

- **decided**: the interval excludes zero (and the difference is past the practical margin): a winner;
- **tie**: the whole interval lies inside ±``tie_margin`` (``--tie``): "tie within ±5 %", a claim;
- **open**: neither; :attr:`Ending.more` says about how many times the windows so far would end it at this spread.

The method: Bonferroni's split of α over planned looks
------------------------------------------------------
A point may be looked at after each pass over it, at most ``looks`` times, and stops at the first look that ends
it. Each look takes the interval at level 1 − α/looks (α = 1 − the run's confidence). A wrong winner needs some
look's interval to exclude zero on the wrong side of the true Δ, and a false tie needs some look's interval to
lie inside ±tie while |Δ| lies outside: either way one of at most ``looks`` intervals misses Δ, each with
probability at most α/looks, so over the whole sequence the chance is at most α, however the data steer the
stopping (stopping early only drops looks). It is conservative: a point decided at its first look had a
wider interval than one fixed look would give, and the wrong-winner rate comes out well under α (``loadgen
bench stopping`` measures it on the simulator's windows with known Δ). Anytime-valid confidence sequences
(Howard et al. 2021) would allow unplanned looks; a run's looks are its passes, planned before it starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loadgen.analysis.results import TIE, StageComparison

DECIDED = "decided"
TIED = "tie"
OPEN = "open"
NOT_COMPARED = "not compared"


def look_level(confidence: float, looks: int) -> float:
    """The level of each look's interval when ``looks`` are planned: 1 − (1 − confidence)/looks."""
    if looks < 1:
        raise ValueError(f"looks must be >= 1, not {looks}")
    return 1.0 - (1.0 - confidence) / looks


@dataclass(frozen=True)
class Ending:
    kind: str
    """DECIDED, TIED, OPEN or NOT_COMPARED."""
    winner: str = ""
    """The comparison's verdict for a decided point ("spec", "baseline")."""
    more: float | None = None
    """An open point: about how many times its windows so far would decide it or call a tie at this spread."""

    def words(self, tie_margin: float) -> str:
        if self.kind == TIED:
            return f"tie within ±{tie_margin * 100:g} %"
        if self.kind == OPEN:
            return "open" + (f": about {self.more:.1f}× its windows would end it" if self.more else "")
        return self.kind


def more_needed(c: StageComparison) -> float | None:
    """About how many times its windows an open point needs: its interval's half-width h (log scale) falls as
    1/sqrt(windows); it decides once h < |log(1 + Δ)| and ties once h < log(1 + tie) − |log(1 + Δ)|, so the
    easier of the two takes (h / max of those)². None without an interval."""
    if c.delta is None or c.ci_low is None or c.ci_high is None or c.delta <= -1.0:
        return None
    h = (math.log1p(c.ci_high) - math.log1p(max(c.ci_low, -0.999999))) / 2.0
    d = abs(math.log1p(c.delta))
    need = max(d, math.log1p(c.tie_margin) - d)
    return (h / need) ** 2 if h > 0.0 and need > 0.0 else None


def ending(c: StageComparison) -> Ending:
    """How the point stands on this comparison (its interval at the look's level)."""
    if c.ci_low is None or c.ci_high is None:
        return Ending(NOT_COMPARED)
    if c.verdict != TIE:
        return Ending(DECIDED, c.verdict)
    if not c.wide:
        return Ending(TIED)
    return Ending(OPEN, more=more_needed(c))

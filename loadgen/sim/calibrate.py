"""Fit a profile's cost model to a user's measured throughput table.

Input: rows of (concurrency, spec tok/s, baseline tok/s) measured with one
traffic shape (prompt and output lengths). Output: the same profile with its
[cost] numbers replaced by a least-squares fit in log space, so that
``model.expected_throughput`` reproduces the table. A small penalty keeps the
sign of (spec - baseline) at each measured point, so the fitted profile puts the
crossover(s) between the same rows as the measurement.

Pure Python (a Nelder-Mead simplex) so it runs wherever loadgen does.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from loadgen.errors import LoadgenError
from loadgen.sim import model
from loadgen.sim.profiles import Profile

# The cost terms a fit may move; everything else (caps, expert counts, graph sizes) stays as given.
DEFAULT_PARAMS = (
    "floor_ms",
    "comm_ms",
    "per_request_ms",
    "per_token_ms",
    "expert_ms",
    "quad_ms",
    "draft_floor_ms",
    "draft_per_request_ms",
    "eager_ms",
)


@dataclass(frozen=True)
class Row:
    concurrency: int
    spec: float | None
    baseline: float | None


def read_table(text: str) -> list[Row]:
    """Rows 'C, spec, baseline' (commas or whitespace; '-' for a missing figure; '#' comments)."""
    rows: list[Row] = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].replace(",", " ").replace("|", " ").strip()
        if not line:
            continue
        parts = line.split()
        try:
            if len(parts) != 3:
                raise ValueError
            c = int(parts[0])
            vals = [None if p == "-" else float(p) for p in parts[1:]]
        except ValueError:
            if not rows and not parts[0].isdigit():
                continue  # a header line
            raise LoadgenError(f"table line {n}: expected 'C spec baseline', got {line!r}") from None
        if c < 1 or any(v is not None and v <= 0 for v in vals):
            raise LoadgenError(f"table line {n}: concurrency and throughputs must be positive")
        rows.append(Row(c, vals[0], vals[1]))
    if len(rows) < 2:
        raise LoadgenError("table: need at least two rows")
    return rows


def nelder_mead(
    f: Callable[[list[float]], float], x0: Sequence[float], *, step: float = 0.5, iters: int = 6000
) -> tuple[list[float], float]:
    """Minimise f from x0 (relative initial steps). Enough for a dozen smooth parameters."""
    n = len(x0)
    simplex = [list(x0)]
    for i in range(n):
        x = list(x0)
        x[i] = x[i] * (1 + step) if x[i] else step * 0.1
        simplex.append(x)
    vals = [f(x) for x in simplex]
    for _ in range(iters):
        order = sorted(range(n + 1), key=vals.__getitem__)
        simplex = [simplex[i] for i in order]
        vals = [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) < 1e-13:
            break
        centroid = [sum(x[i] for x in simplex[:-1]) / n for i in range(n)]
        worst = simplex[-1]
        refl = [c + (c - w) for c, w in zip(centroid, worst)]
        fr = f(refl)
        if fr < vals[0]:
            exp = [c + 2 * (c - w) for c, w in zip(centroid, worst)]
            fe = f(exp)
            simplex[-1], vals[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            simplex[-1], vals[-1] = refl, fr
        else:
            con = [c + 0.5 * (w - c) for c, w in zip(centroid, worst)]
            fc = f(con)
            if fc < vals[-1]:
                simplex[-1], vals[-1] = con, fc
            else:
                best = simplex[0]
                simplex = [best] + [[b + 0.5 * (x - b) for b, x in zip(best, s)] for s in simplex[1:]]
                vals = [vals[0]] + [f(x) for x in simplex[1:]]
    i = min(range(n + 1), key=vals.__getitem__)
    return simplex[i], vals[i]


def _winner_checks(rows: Sequence[Row]) -> list[tuple[int, float]]:
    """(C, +1 if spec should win else -1) at each row, and between neighbouring rows with the same winner."""
    both = sorted((r for r in rows if r.spec and r.baseline), key=lambda r: r.concurrency)
    checks = [(r.concurrency, 1.0 if r.spec >= r.baseline else -1.0) for r in both]
    for a, b in zip(both, both[1:]):
        wa, wb = a.spec >= a.baseline, b.spec >= b.baseline
        if wa == wb:
            lo, hi = a.concurrency, b.concurrency
            for k in range(1, 6):
                c = round(lo * (hi / lo) ** (k / 6))
                if lo < c < hi:
                    checks.append((c, 1.0 if wa else -1.0))
    return sorted(set(checks))


def _with_cost(profile: Profile, names: Sequence[str], x: Sequence[float]) -> Profile:
    # abs(): the simplex may wander negative; a cost term is never below zero.
    cost = dataclasses.replace(profile.cost, **{k: abs(v) for k, v in zip(names, x)})
    return dataclasses.replace(profile, cost=cost)


def fit(
    profile: Profile,
    rows: Sequence[Row],
    *,
    prompt_tokens: int = 30,
    output_tokens: int = 200,
    accept: float | None = None,
    params: Sequence[str] = DEFAULT_PARAMS,
    sign_margin: float = 0.02,
    power: float = 6.0,
    restarts: int = 4,
    seed: int = 0,
) -> tuple[Profile, float]:
    """The profile with fitted cost terms, and the worst relative error over the table."""
    kw = dict(prompt_tokens=prompt_tokens, output_tokens=output_tokens, accept=accept)
    checks = _winner_checks(rows)

    def loss(x: list[float]) -> float:
        prof = _with_cost(profile, params, x)
        total = 0.0
        for r in rows:
            # a high power approaches minimax: the worst row matters more than the average
            if r.spec:
                err = math.log(model.expected_throughput(prof, "spec", r.concurrency, **kw) / r.spec)
                total += abs(err * 10) ** power
            if r.baseline:
                err = math.log(model.expected_throughput(prof, "baseline", r.concurrency, **kw) / r.baseline)
                total += abs(err * 10) ** power
        for c, want in checks:
            # keep the measured winner the winner, by a margin, so crossovers stay between the same rows
            s = model.expected_throughput(prof, "spec", c, **kw)
            b = model.expected_throughput(prof, "baseline", c, **kw)
            gap = want * math.log(s / b)
            if gap < sign_margin:
                total += 1e3 * (sign_margin - gap) ** 2
        return total

    rng = random.Random(seed)
    start = [getattr(profile.cost, k) or 0.5 for k in params]
    best_x, best_v = nelder_mead(loss, start)
    for _ in range(restarts):
        x0 = [abs(v) * rng.uniform(0.3, 3.0) + rng.uniform(0, 0.5) for v in best_x]
        x, v = nelder_mead(loss, x0)
        if v < best_v:
            best_x, best_v = x, v
    best_x, best_v = nelder_mead(loss, best_x, step=0.1)
    fitted = _with_cost(profile, params, [round(abs(v), 5) for v in best_x])
    worst = 0.0
    for r in rows:
        for mode, want in (("spec", r.spec), ("baseline", r.baseline)):
            if want:
                got = model.expected_throughput(fitted, mode, r.concurrency, **kw)
                worst = max(worst, abs(got / want - 1))
    return fitted, worst


def cost_toml(profile: Profile) -> str:
    """The [cost] table of a profile, for pasting into a profile file."""
    lines = ["[cost]"]
    for f in dataclasses.fields(profile.cost):
        lines.append(f"{f.name} = {getattr(profile.cost, f.name)!r}")
    return "\n".join(lines) + "\n"

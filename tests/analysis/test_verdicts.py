"""Verdicts say only what was measured (issue 12): cut ladders, wide ties, flagged stages."""

from __future__ import annotations

import math
import random

from loadgen.analysis.crossover import StageSamples, analyze, recommendation

PLANNED = [1, 4, 16, 64, 256]


def stages(spec: dict[int, tuple[float, float, int]], seed: int = 0) -> tuple[list[StageSamples], list[StageSamples]]:
    """C → (delta, window CV, windows): baseline at 100, speculation at 100·(1 + delta)."""
    r = random.Random(seed)
    bs, ss = [], []
    for c, (d, cv, n) in spec.items():
        bs.append(StageSamples(c, [max(0.0, 100 * (1 + cv * r.gauss(0, 1))) for _ in range(n)], True))
        ss.append(StageSamples(c, [max(0.0, 100 * (1 + d) * (1 + cv * r.gauss(0, 1))) for _ in range(n)], True))
    return bs, ss


# the GPU run: speculation better at C=1, the rest tied with intervals tens of % wide; cut at 64 of 256
GPU_LIKE = {1: (0.3, 0.01, 12), 4: (0.0, 0.5, 6), 16: (0.0, 0.5, 6), 64: (0.0, 0.5, 6)}


def test_a_cut_ladder_never_claims_everywhere_and_names_what_is_missing():
    bs, ss = stages(GPU_LIKE)
    a = analyze("output throughput", bs, ss, ladder=PLANNED)
    text = recommendation(a)
    assert "everywhere is safe" not in text.replace("does not show enabling it everywhere is safe", "")
    assert "never loses" not in text
    assert "speculation is better at C=1" in text
    assert "Measured C=1–64 of the planned C=1–256" in text and "C=256 (not measured)" in text
    from loadgen.analysis.crossover import verdict

    v = verdict(a)
    assert v.kind == "spec-some" and not v.everywhere


def test_the_everywhere_claim_stands_when_every_planned_stage_is_a_measured_tie():
    bs, ss = stages({1: (0.3, 0.01, 12), 4: (0.0, 0.01, 12), 16: (0.0, 0.01, 12), 64: (0.0, 0.01, 12)})
    a = analyze("output throughput", bs, ss, ladder=[1, 4, 16, 64])
    from loadgen.analysis.crossover import Scope, verdict

    v = verdict(a)
    assert v.everywhere and v.caveat == ""
    assert "it never loses, so enabling it everywhere is safe" in v.text
    # ... and not once one planned stage is missing, or a compared one is flagged
    assert not verdict(a, Scope(planned=PLANNED, missing={256: "spec not run"})).everywhere
    flagged = verdict(a, Scope(planned=[1, 4, 16, 64], flagged={4: ["spec client-bound"]}))
    assert not flagged.everywhere and "everywhere is safe:" in flagged.text  # "does not show ... safe: reasons"
    assert "1 of the 4 compared stages is flagged" in flagged.text
    assert flagged.caveat == "Flagged (figures may be distorted): spec client-bound at C=4."


def test_scope_names_missing_cut_and_flagged_stages():
    from loadgen.analysis.crossover import Scope

    bs, ss = stages(GPU_LIKE)
    a = analyze("output throughput", bs, ss, ladder=PLANNED)
    scope = Scope(planned=PLANNED, missing={256: "spec not run"},
                  flagged={c: ["spec client-bound"] for c in (1, 4, 16, 64)},
                  cut="the run was cut by an interrupt with 1 planned stage not run")
    text = recommendation(a, scope)
    assert "enabling it everywhere is safe;" not in text
    assert "C=256 was not compared; every compared stage is flagged" in text
    assert ("Measured C=1–64 of the planned C=1–256; not compared: C=256 (spec not run); "
            "the run was cut by an interrupt with 1 planned stage not run.") in text
    assert "Flagged (figures may be distorted): spec client-bound at C=1, 4, 16, 64." in text


def test_a_wide_tie_is_inconclusive_with_the_width_needed():
    bs, ss = stages(GPU_LIKE)
    a = analyze("output throughput", bs, ss, ladder=[1, 4, 16, 64])
    wide = [c for c in a.comparisons if c.concurrency > 1]
    assert all(c.verdict == "tie" for c in wide)
    assert max(c.ci_high - c.ci_low for c in wide) > 0.4  # tens of %, as on the GPU
    text = recommendation(a)
    assert "tied" not in text and "inconclusive elsewhere in C=1–64" in text
    assert "wider than the ±5 % needed to call a tie" in text
    assert "narrowing them all to ±5 % would take about" in text
    assert "as many windows (longer windows or repeated stages)" in text
    assert "C=4, 16, 64 are inconclusive" in text and "never loses" not in text
    assert all(c.wide for c in wide)


def test_the_more_data_factor_is_what_it_takes(measured):
    """Measured with that many times the windows, the interval is ±5 % wide (median within 30 %)."""
    from loadgen.analysis.crossover import more_data_factor

    halves = []
    for seed in range(8):
        bs, ss = stages({8: (0.0, 0.1, 8)}, seed)
        (c,) = analyze("m", bs, ss).comparisons
        f = more_data_factor(c)
        assert c.wide and f is not None and f > 1
        n = round(8 * f)
        bs2, ss2 = stages({8: (0.0, 0.1, n)}, seed + 100)
        (c2,) = analyze("m", bs2, ss2).comparisons
        halves.append((math.log1p(c2.ci_high) - math.log1p(c2.ci_low)) / 2 / math.log1p(0.05))
    halves.sort()
    measured("more-data factor, 8 stages of 8 windows at CV 10 %: with f× the windows the half-width is "
             + ", ".join(f"{h:.2f}" for h in halves) + " × the ±5 % aimed at")
    assert 0.7 < halves[len(halves) // 2] < 1.3, halves


def test_all_wide_ties_are_inconclusive_not_no_difference():
    bs, ss = stages({1: (0.0, 0.5, 5), 10: (0.0, 0.5, 5)})
    a = analyze("m", bs, ss)
    text = recommendation(a)
    assert text.startswith("m: inconclusive at every measured concurrency (C=1–10)")
    assert "no difference" not in text
    from loadgen.analysis.crossover import verdict

    assert verdict(a).kind == "inconclusive"


def test_no_comparison_is_not_compared():
    from loadgen.analysis.crossover import MetricAnalysis, verdict

    a = MetricAnalysis("m", True, 0.9, 0.01, True, [], [], [])
    v = verdict(a)
    assert v.kind == "not compared" and "not compared" in v.text and "no difference" not in v.text

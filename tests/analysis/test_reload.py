"""A comparison reloaded from crossover.json gives the live analysis' intervals, crossovers and verdicts.

The bootstrap's inputs travel with each comparison (loadgen.analysis.results.Bootstrap) and the
replicates are regenerated from them, so a report or a refinement step reading crossover.json
judges exactly what the live run judged; files without the inputs get the old normal approximation.
"""

from __future__ import annotations

import copy
import dataclasses
import json

import orjson
import pytest

from loadgen.analysis.compare import BY_NAME, RunAnalysis, run_analysis
from loadgen.analysis.crossover import (
    MetricAnalysis,
    StageComparison,
    find_crossovers,
    judge,
    verdict,
)
from tests.analysis import synth
from tests.report.synth import cut_run_doc, run_doc


def _reload(res: RunAnalysis) -> RunAnalysis:
    """Through crossover.json as loadgen crossover writes it."""
    return RunAnalysis.from_dict(orjson.loads(orjson.dumps(res.to_dict(), option=orjson.OPT_INDENT_2)))


@pytest.mark.parametrize("doc", [run_doc(), cut_run_doc()], ids=["run", "cut-run"])
def test_a_run_reloaded_from_crossover_json_judges_the_same(doc):
    live = run_analysis(doc)
    again = _reload(live)
    assert again.to_dict() == live.to_dict()
    n = 0
    for wl, per in live.workloads.items():
        scope = again.coverage[wl].scope()
        for name, m in per.items():
            r = again.workloads[wl][name]
            rejudged = judge(copy.deepcopy(r.analysis), r.analysis.ladder)
            assert rejudged == m.analysis, (wl, name)  # every interval, verdict, region and crossover
            v = verdict(rejudged, scope, advises=name == again.decides,
                        worse_with_spec=BY_NAME[name].spec.worse_with_spec)
            assert (v.sentence.replace(name + ":", m.label + ":", 1), v.kind, v.caveat) == \
                (m.recommendation, m.verdict, m.caveat)
            n += len(m.analysis.comparisons)
    assert n > 20


def test_crossover_intervals_after_a_reload_are_the_live_ones():
    base, spec = synth.table_curves()
    for seed in (0, 1, 2):
        a = synth.run_ladder(base, spec, seed, refine=False)
        assert a.crossovers
        d = json.loads(json.dumps(dataclasses.asdict(a), allow_nan=False))
        b = MetricAnalysis.from_dict(d)
        assert b == a
        assert find_crossovers(b.comparisons, ladder=b.ladder) == a.crossovers
        rebuilt = [StageComparison(**c) for c in d["comparisons"]]  # the way loadgen/cli rebuilds them
        assert find_crossovers(rebuilt, ladder=a.ladder) == a.crossovers
        assert judge(copy.deepcopy(b), b.ladder) == a


def test_a_file_without_bootstrap_inputs_falls_back_to_the_normal_approximation():
    base, spec = synth.table_curves()
    a = synth.run_ladder(base, spec, 1, refine=False)
    d = json.loads(json.dumps(dataclasses.asdict(a)))
    for c in d["comparisons"]:
        del c["bootstrap"]  # crossover.json written before the inputs were kept
    (x,) = find_crossovers(MetricAnalysis.from_dict(d).comparisons)
    (y,) = a.crossovers
    assert (x.low_c, x.high_c, x.direction) == (y.low_c, y.high_c, y.direction)
    assert x.ci_low == pytest.approx(y.ci_low, rel=0.15) and x.ci_high == pytest.approx(y.ci_high, rel=0.15)

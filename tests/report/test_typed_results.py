"""The report reads the analysis typed: no module in loadgen/report indexes an analysis result's JSON form.

Every string key a report module subscripts or ``.get``s is compared with the fields of the analysis's typed
results (RunAnalysis, RateAnalysis and what they hold). The only overlaps allowed are run.json's own keys, the
measurement's JSON edge the report reads stage by stage (a stage's ``target``, ``concurrency``, ``rate``, …).
Before the typed rate and truth models, report/ read crossover.json and rates.json by 194 such subscripts
("crossovers", "simulator_truth", "capacity", "points", …), most in terminal.py and rates.py. A result field
that is also a run.json key ("workloads", "target") is not caught: the check is on names, not on types.
"""

import ast
import dataclasses
from pathlib import Path

from loadgen.analysis import compare, configs, coverage, rates, repeats, results

RESULT_TYPES = (compare.RunAnalysis, compare.MetricResult, results.MetricAnalysis, results.StageComparison,
                results.Crossover, results.Region, results.Checked, configs.ConfigsResult, configs.ConfigsAt,
                configs.Gap, configs.PolicyStep, configs.Switch, configs.PairResult, coverage.WorkloadCoverage,
                repeats.PassSpread, rates.RateAnalysis, rates.RatePoint, rates.Capacity, rates.Saturates,
                rates.MarginAt, rates.RateMetric, rates.LeftOut)

RUN_JSON_KEYS = {
    "baseline", "spec",  # a simulator profile's modes (terminal.expected_table), run.roles
    "concurrency", "rate", "target", "label", "workloads", "cut", "lag_flagged", "output_tokens_per_s",
    "switches",  # a stage's own speculation timeline
    "ladder", "targets",  # run.json's run block
}
"""Keys of run.json (a stage, or its ``run`` block) that are also the name of a result field."""

REPORT = Path(__file__).parents[2] / "loadgen" / "report"


def _keys(tree: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str):
            out.add(n.slice.value)
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get" and n.args
              and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str)):
            out.add(n.args[0].value)
    return out


def test_no_report_module_reads_an_analysis_result_as_a_dict():
    fields = {f.name for t in RESULT_TYPES for f in dataclasses.fields(t)}
    found = {}
    for path in sorted(REPORT.glob("*.py")):
        bad = (_keys(ast.parse(path.read_text(encoding="utf-8"))) & fields) - RUN_JSON_KEYS
        if bad:
            found[path.name] = sorted(bad)
    assert found == {}, found


def test_the_check_sees_a_dict_read():
    """It would catch one: the old terminal's reads of crossover.json."""
    fields = {f.name for t in RESULT_TYPES for f in dataclasses.fields(t)}
    old = ast.parse('a = res["workloads"][wl]["analysis"]["crossovers"]; k = m.get("simulator_truth", [])')
    assert (_keys(old) & fields) - RUN_JSON_KEYS == {"analysis", "crossovers", "simulator_truth"}

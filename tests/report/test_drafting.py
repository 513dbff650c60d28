"""The page's stage table says what the stream showed speculation did (stage/switching.py), where it showed any."""

from loadgen.analysis.compare import run_analysis
from loadgen.report.htmltables import stage_table
from loadgen.report.inputs import slices
from tests.report import synth


def _table(doc) -> str:
    return stage_table(run_analysis(doc), slices(doc)["chat"])


def test_a_thrashing_stage_is_a_badge_in_the_drafting_column():
    doc = synth.run_doc(ladder=(1, 5), workloads=("chat",), flags=False)
    spec5 = next(s for s in doc["stages"] if s["target"] == "spec" and s["concurrency"] == 5)
    spec1 = next(s for s in doc["stages"] if s["target"] == "spec" and s["concurrency"] == 1)
    spec5["switching"] = {"cells": 100, "on": 60, "off": 40, "mixed": 0, "switches": 30, "oscillating": True}
    spec1["switching"] = {"cells": 100, "on": 100, "off": 0, "mixed": 0, "switches": 0, "oscillating": False}
    html = _table(doc)
    assert "<th>drafting</th>" in html and "<td>100 % on</td>" in html
    assert '<span class="b-warn badge">60 % on, 30 switches</span>' in html
    assert "<td>–</td>" in html  # the baseline's stages showed no speculation


def test_no_column_where_no_stage_showed_speculation():
    doc = synth.run_doc(ladder=(1, 5), workloads=("chat",), flags=False)
    assert "switching" in doc["stages"][1]  # the synthetic spec stages' chunks carry drafts: the stream shows it
    for s in doc["stages"]:
        s.pop("switching", None)  # as a server that streams one token an event whatever it decoded
    assert "drafting" not in _table(doc)

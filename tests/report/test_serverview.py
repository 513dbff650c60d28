"""The report's "What the server ran": per-stage server tables, acceptance per position, the measured threshold.

One real ``loadgen crossover`` run on the embedded simulators (vLLM's /metrics names, so acceptance per
position is there; the speculative profile caps running requests at 48, so C=64 runs capped), rendered
as the user gets it; hand-made server blocks (tests/analysis/test_serverview.py's) for the cases a
simulator does not produce.
"""

import copy
import gzip
import html
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from loadgen.analysis.answer import analyse
from loadgen.analysis.compare import RunAnalysis
from loadgen.report.html import render
from loadgen.report.serverview import server_html
from loadgen.report.terminal import summary_text
from loadgen.report.words import fmt_c, threshold_hint
from tests.analysis.test_serverview import block, doc_of, ra_with, stage, view_of


@pytest.fixture(scope="module")
def sim_run(favoured_module, tmp_path_factory):
    """A crossover run on the simulators (~60 s on the 2-core machine): run.json, crossover.json, report.html.
    Ahead of the host's other work (`favoured_module`): the running gauge reads C only while the client keeps
    every user's next request going (beside two busy loops, unfavoured, one stage's read below C)."""
    out = tmp_path_factory.mktemp("sv") / "x"
    p = subprocess.run([sys.executable, "-m", "loadgen", "crossover", "--ladder", "1,4,16,64", "--duration", "2",
                        "--warmup", "0.5", "--sim-metrics-flavour", "vllm", "--out", str(out)],
                       capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = orjson.loads((out / "run.json").read_bytes())
    res = orjson.loads((out / "crossover.json").read_bytes())
    return out, doc, res, (out / "report.html").read_text(encoding="utf-8")


def _text(fragment: str) -> str:
    """An HTML fragment's rows as "a | b | c" lines, its other text as it reads."""
    s = re.sub(r"<tr[^>]*>", "\n", fragment)
    s = re.sub(r"<(td|th)\b[^>]*>", " | ", s)
    s = re.sub(r"<(caption|p)[^>]*>", "\n", s)
    return html.unescape(re.sub(r"<[^>]+>", "", s))


def _spec_stages(doc):
    return {s["concurrency"]: s["server"] for s in doc["stages"] if s["target"] == "spec"}


def test_live_tables_are_the_stages_server_blocks(sim_run):
    out, doc, res, page = sim_run
    assert page.count("<h3>What the server ran</h3>") == 1
    text = _text(page[page.index("What the server ran"):page.index("Every stage figure")])
    for c, b in _spec_stages(doc).items():
        g, t = b["gauges"]["running"], b["checks"]["tokens"]
        # the check's rule (serverview/checks.py, RUNS_C): a median at 0.9 of C, or of the cap of 48 at C=64
        verdict = b["checks"]["running"]["verdict"]
        runs = g["p50"] >= 0.9 * min(c, 48)
        assert verdict == ("capped" if runs and c == 64 else "runs C" if runs else "below C"), b["checks"]
        vs = "capped (48)" if verdict == "capped" else verdict
        row = (f" | {c} | {g['p50']:.3g} | {g['mean']:.3g} | {g['max']:.3g} | {vs} | "
               f"{b['gauges']['queued']['mean']:.3g} | {b['gauges']['kv_usage']['mean'] * 100:.3g} % | {t['client']:.0f} | {t['server']:.0f} | "
               f"{t['diff_pct']:+.2f} % | {t['verdict']}")
        assert row in text, (row, text)
        app = b["acceptance_per_position"]
        assert len(app) == 2 and app[0] >= app[1] > 0  # EAGLE3 num_steps=2 on the simulator
        acc = (f" | {c} | {b['mean_accept_length']:.3f} | {b['accept_rate'] * 100:.3g} % | "
               + " | ".join(f"{x * 100:.3g} %" for x in app))
        assert acc in text, (acc, text)
    assert " | C | accept length | accept rate | position 1 | position 2" in text
    assert "busy slots" not in text  # a llama.cpp figure: no column for vLLM's names


GIVEN = {"estimate": 11.9, "ci_low": 8.0, "ci_high": 15.0, "low_c": 4, "high_c": 16,
         "direction": "baseline_to_spec", "confidence": 0.9, "stage_level": 0.9}
"""The simulator's own crossover (C≈11.9) with an interval: whether 2 s windows confirm one depends on how busy
the host is; what the hint says of a crossover is read through the running batch the run measured either way.
Whole, as crossover.json holds one (the page reads the analysis typed, analysis.results.Crossover)."""


def _given_crossover(sim_run):
    out, doc, res, _ = copy.deepcopy(sim_run)
    res["workloads"]["chat"]["output_tokens_per_s"]["analysis"]["crossovers"] = [dict(GIVEN)]
    return doc, res


def test_live_threshold_is_the_crossover_through_the_measured_batch(sim_run, tmp_path):
    doc, res = _given_crossover(sim_run)
    xs = res["workloads"]["chat"]["output_tokens_per_s"]["analysis"]["crossovers"]
    page = render(tmp_path, doc=doc, res=RunAnalysis.from_dict(res), png=False).read_text(encoding="utf-8")
    spec = _spec_stages(doc)
    pts = sorted((c, b["gauges"]["running"]["mean"]) for c, b in spec.items())

    def interp(c):  # linear in C between the measured stages, by hand
        for (c0, r0), (c1, r1) in zip(pts, pts[1:]):
            if c0 <= c <= c1:
                return r0 + (c - c0) / (c1 - c0) * (r1 - r0)
        return None

    x = xs[0]
    want = [interp(x[k]) for k in ("estimate", "ci_low", "ci_high")]
    assert all(w is not None for w in want)
    rule = (f"chat: speculation off below a running batch of ≈{fmt_c(want[0])} ({fmt_c(want[1])}–{fmt_c(want[2])}), "
            "on above it")
    hint = threshold_hint(doc, RunAnalysis.from_dict(res))
    print("\nthreshold sentence:", hint)
    assert hint.startswith("For vLLM, as an adaptive threshold on the running batch (the mean number of requests spec's server ran")
    assert rule in hint and "≈ C" not in hint
    assert html.escape(hint) in page  # the page's top hint
    assert html.escape(f"Adaptive threshold on spec's measured running batch: {rule.partition(': ')[2]}.") in page
    assert "the running batch is ≈ C" not in page


def test_live_without_metrics_on_the_spec_server_says_so_once_and_invents_nothing(sim_run, tmp_path):
    doc, res = _given_crossover(sim_run)
    reason = "http://127.0.0.1:9/metrics: connection refused"
    for s in doc["stages"]:
        if s["target"] == "spec":
            s["server"] = {"available": False, "reason": reason, "url": "http://127.0.0.1:9/metrics"}
    page = render(tmp_path, doc=doc, res=RunAnalysis.from_dict(res), png=False).read_text(encoding="utf-8")
    part = _text(page[page.index("What the server ran"):page.index("Every stage figure")])
    assert part.count(f"spec: no server figures — {reason}") == 1
    assert "\nspec\n" not in part and "acceptance from its counters" not in part  # no table, no figure
    assert "\nbaseline\n" in part  # the baseline's server still had its figures
    hint = threshold_hint(doc, RunAnalysis.from_dict(res))
    assert hint.startswith("For SGLang: no adaptive threshold in batch-size terms — chat: crossover at C≈")
    assert f"its running batch is not measured: {reason}" in hint and "below a running batch" not in hint


def test_live_interval_beyond_the_measured_stages_is_not_extrapolated(sim_run):
    doc, res = _given_crossover(sim_run)
    x = res["workloads"]["chat"]["output_tokens_per_s"]["analysis"]["crossovers"][0]
    x["ci_high"] = 200.0
    hint = threshold_hint(doc, RunAnalysis.from_dict(res))
    assert re.search(r"below a running batch of ≈[\d.]+ \([\d.]+–\?\)", hint), hint
    assert "the interval's upper end (C≈200) has no running batch: not measured: C=200 lies outside the stages " \
           "with a running batch (C=1–64)" in hint


def test_two_crossovers_become_an_on_off_rule_on_the_measured_batch():
    doc = doc_of(*(stage("spec", c, block(c, r)) for c, r in ((10, 10.0), (20, 18.0), (40, 30.0), (80, 60.0))))
    ra = ra_with((43.0, 31.0, 56.0, "baseline_to_spec"), (23.0, 20.0, 29.0, "spec_to_baseline"))
    hint = threshold_hint(doc, ra)
    # 23 → 18 + 3/20·12 = 19.8; 20 → 18; 29 → 18 + 9/20·12 = 23.4
    # 43 → 30 + 3/40·30 = 32.25; 31 → 24.6; 56 → 42
    assert ("chat: speculation on below a running batch of ≈20 (18–23), off from there to ≈32 (25–42), "
            "on above it.") in hint
    assert "mean running batch at C=20: 18, C=40: 30, C=80: 60" in hint


def test_a_server_below_c_and_one_at_its_cap():
    below = doc_of(stage("spec", 8, block(8, 7.8)), stage("spec", 32, block(32, 9.5, queued=22, verdict="below C")))
    hint = threshold_hint(below, ra_with((32.0, 8.0, 32.0, "spec_to_baseline")))
    assert "speculation on below a running batch of ≈9.5 (7.8–9.5), off above it" in hint  # not ≈32
    capped = doc_of(stage("spec", 16, block(16, 16.0)),
                    *(stage("spec", c, block(c, 48.0, queued=c - 48, verdict="capped", cap=48)) for c in (64, 128)))
    hint = threshold_hint(capped, ra_with((90.0, 70.0, 120.0, "baseline_to_spec")))
    assert hint.startswith("For SGLang: no adaptive threshold in batch-size terms")
    assert "at C≈90 the server ran at its cap of 48 requests (measured) and further requests queued, so that " \
           "crossover is not a batch-size threshold" in hint
    view = view_of(capped, (90.0, 70.0, 120.0, "baseline_to_spec"))
    text = _text(server_html(view, "chat"))
    assert " | 64 | 48 | 48 | 48 | capped (48) | 16 | " in text and "No adaptive threshold in batch-size terms." in text


def test_llamacpp_busy_slots_column_and_a_stage_without_figures():
    off = {"available": False, "reason": "not scraped at the window close"}
    doc = doc_of(stage("spec", 4, block(4, 3.0, engine="llama.cpp", mean_busy_per_step=2.75)), stage("spec", 8, off))
    view = view_of(doc)
    text = _text(server_html(view, "chat"))
    assert "busy slots / decode step" in text and " | 4 | 3 | 3 | 3 | runs C | 0 | 2.75 | 25 % | " in text
    assert " | 8 | no server figures: not scraped at the window close" in text
    assert threshold_hint(doc, ra_with()) is None  # no crossover, no threshold


def test_acceptance_per_position_says_when_drafts_stopped_short_of_k():
    """Per position, the server counts accepted tokens per draft (vLLM's own definition); an n-gram draft is
    only as long as its match's continuation, so where drafts averaged under K the table says so. Real vLLM
    blocks (tests/report/data/vllm-cpu-run.json: K=4 drafts of 4.0 and 3.98 tokens) need no such word; the
    same C=2 block with 140 of 180 drafted tokens (3.1 a draft) does."""
    import gzip
    from pathlib import Path

    real = orjson.loads(gzip.decompress((Path(__file__).parent / "data" / "vllm-cpu-run.json.gz").read_bytes()))
    doc = doc_of(*[s for s in real["stages"] if s["target"] == "spec" and "predictable" in s["workloads"]])
    for s in doc["stages"]:
        s["workloads"] = {"chat": s["workloads"]["predictable"]}
    text = _text(server_html(view_of(doc), "chat"))
    assert "acceptance from its counters" in text and "position 4" in text and "never reached" not in text
    c2 = next(s["server"] for s in doc["stages"] if s["concurrency"] == 2)
    c2["drafts"], c2["draft_tokens"] = 45, 140
    text = _text(server_html(view_of(doc), "chat"))
    assert "drafts proposed 3.1–4.0 of 4 tokens on average" in text and "never reached it" in text, text


def test_the_terminal_hint_follows_the_deciding_metric():
    """With SLOs goodput decides (crossover.json's ``decides``): the hint ``loadgen report`` prints above its
    tables is goodput's crossover through the measured batch, as the page's top hint, not output throughput's.
    A closed run written before issue 28 (tests/cli/data) with goodput given decode rate's crossover (C≈7.8,
    where output throughput's is C≈9.9)."""
    data = Path(__file__).parents[1] / "cli" / "data"
    doc = orjson.loads(gzip.open(data / "before-28-closed.run.json.gz").read())
    res = analyse(doc, truth=False).result.to_dict()  # today's analysis of that run
    chat = res["workloads"]["chat"]
    given = copy.deepcopy(chat["decode_rate"]["analysis"]["crossovers"])
    chat["goodput_requests_per_s"]["analysis"]["crossovers"] = given
    res["decides"] = "goodput_requests_per_s"
    ra = RunAnalysis.from_dict(res)
    hint = threshold_hint(doc, ra, "goodput_requests_per_s")
    assert hint != threshold_hint(doc, ra) and "crossover at C≈7.8" in hint
    assert summary_text(doc, ra).splitlines()[1] == f"  {hint}"

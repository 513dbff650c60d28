"""report.render: what the page says, that it is self-contained, and the pieces it is built from."""

import os
import re
import time
import xml.etree.ElementTree as ET

import orjson
import pytest

from loadgen.analysis.compare import RunAnalysis
from loadgen.report import charts as plots
from loadgen.histograms import Hist
from loadgen.report.figures import mean_interval, percentile_curve
from loadgen.report.html import render
from loadgen.analysis.answer import load as load_answer
from loadgen.report.inputs import slices, usable
from loadgen.report.words import threshold_hint
from tests.report.synth import CROSS_C, run_doc, stage, write_run


def _html(path) -> str:
    return path.read_text(encoding="utf-8")


def test_render_computes_missing_analysis_and_writes_pngs_in_seconds(synth_run, rendered):
    assert not (synth_run / "crossover.json").exists()  # rendered from run.json alone
    out = rendered.dir
    assert (out / "report.html").stat().st_size > 50_000
    assert (out / "crossover.json").exists()  # computed (loadgen.analysis.answer) and kept
    pngs = sorted(p.name for p in (out / "plots").glob("*.png"))
    assert pngs == ["chat-latency.png", "chat-throughput.png", "code-latency.png", "code-throughput.png"]
    for p in (out / "plots").glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000


def test_page_is_self_contained(rendered):
    text = rendered.html
    assert text.startswith("<!DOCTYPE html>")
    assert "<script src" not in text and "<link" not in text and "@import" not in text and "url(" not in text
    for attr in re.findall(r'\b(?:src|href)="([^"]*)"', text):
        assert attr.startswith("#"), attr  # only in-page anchors
    assert text.count("<svg") >= 20  # charts are inline SVG


def test_page_says_the_crossover_and_flags(rendered):
    out, text = rendered.dir, rendered.html
    res = orjson.loads((out / "crossover.json").read_bytes())
    x = res["workloads"]["chat"]["output_tokens_per_s"]["analysis"]["crossovers"][0]
    assert x["ci_low"] <= CROSS_C <= x["ci_high"]
    est = f"C≈{round(x['estimate'])}"
    assert f"chat: enable speculation below {est} (90 % interval" in text  # the top answer
    assert "Speculation wins at every measured concurrency" in text  # the code workload
    # SGLang hint in batch-size terms (spec server: max_running_requests 48)
    assert "max_running_requests (48)" in text and "running batch" in text
    # flags, visibly
    assert "client-bound" in text and "approximate token counts" in text and "http_503" in text
    assert "chat · spec C=100" in text
    # every metric's recommendation, the terminal-style table and run metadata
    for label in ("output throughput", "per-user decode rate", "goodput", "TTFT p50", "ITL p50", "ITL p99"):
        assert f"<b>{label}</b>:" in text
    assert "<th>Δ %</th>" in text and "winner" in text
    for fact in ("1, 5, 30, 100", "chat, code", "EAGLE3", "example/Model-8B", "<dd>0.1.0</dd>"):
        assert fact in text
    # HDR tabs: the stage nearest the crossover (C=30) is shown first
    assert re.search(r'data-panel="wl-chat-hdr-30" class="on"', text)


def test_stale_truncated_or_foreign_analysis_is_recomputed(synth_dir, monkeypatch):
    import loadgen.analysis.compare

    path = synth_dir / "crossover.json"
    good = orjson.loads(path.read_bytes())
    calls = []
    monkeypatch.setattr(loadgen.analysis.compare, "run_analysis",
                        lambda doc, **kw: calls.append(kw) or loadgen.analysis.compare.RunAnalysis.from_dict(good))
    doc = orjson.loads((synth_dir / "run.json").read_bytes())

    def analysis(*a, **kw):
        return load_answer(*a, **kw).result

    assert analysis(synth_dir, doc).to_dict() == {k: v for k, v in good.items() if k != "schema"}
    assert calls == []  # up to date: reused
    path.write_bytes(orjson.dumps({k: v for k, v in good.items() if k != "schema"}))
    analysis(synth_dir, doc)  # written before the file had its schema (the truth's older form): made again
    assert len(calls) == 1
    old = time.time() - 60
    os.utime(path, (old, old))  # older than run.json: stale
    analysis(synth_dir, doc)
    path.write_text("{truncated")
    analysis(synth_dir, doc)
    path.write_bytes(orjson.dumps({**good, "baseline": "other"}))  # analysed with other roles
    analysis(synth_dir, doc)
    analysis(synth_dir, doc, confidence=0.95)  # another level
    assert len(calls) == 5 and calls[-1]["confidence"] == 0.95
    # a stale file is made again at its own level, not the default's
    path.write_bytes(orjson.dumps({**good, "confidence": 0.8}))
    os.utime(path, (old, old))
    analysis(synth_dir, doc)
    assert len(calls) == 6 and calls[-1]["confidence"] == 0.8


def test_truncated_stage_is_left_out_and_flagged(synth_dir):
    doc = orjson.loads((synth_dir / "run.json").read_bytes())
    doc["stages"].append({"target": "spec", "concurrency": 250, "requests": {}})
    (synth_dir / "run.json").write_bytes(orjson.dumps(doc))
    future = time.time() + 10
    os.utime(synth_dir / "crossover.json", (future, future))  # the analysis of the good stages still holds
    clean, dropped = usable(doc)
    assert len(clean["stages"]) == 16 and dropped == ["stage 16 (spec C=250) left out: no 'output_tokens_per_s'"]
    text = _html(render(synth_dir, png=False))
    assert "stage 16 (spec C=250) left out" in text


def test_no_crossover_no_hint_and_no_marks(tmp_path):
    doc = run_doc(ladder=(1, 5), workloads=("code",), flags=False)
    out = write_run(tmp_path / "r", doc)
    text = _html(render(out, png=False))
    res = RunAnalysis.from_dict(orjson.loads((out / "crossover.json").read_bytes()))
    assert threshold_hint(doc, res) is None
    assert "crossover interval" not in text and "running batch" not in text
    assert "No flags" in text
    assert "Speculation wins at every measured concurrency" in text


def test_hint_without_a_measured_running_batch_stays_in_concurrency_terms(synth_dir):
    """The synthetic stages have no server block: the hint must not assume the running batch is C (issue 14)."""
    doc = orjson.loads((synth_dir / "run.json").read_bytes())
    res = RunAnalysis.from_dict(orjson.loads((synth_dir / "crossover.json").read_bytes()))
    hint = threshold_hint(doc, res)
    assert hint.startswith("For SGLang: no adaptive threshold in batch-size terms — chat: crossover at C≈")
    assert "its running batch is not measured" in hint and "max_running_requests (48)" in hint
    assert "≈ C" not in hint and "below a running batch of" not in hint
    doc["run"]["servers"]["spec"]["engine"] = "vllm"
    assert threshold_hint(doc, res).startswith("For vLLM: no adaptive threshold")  # every engine, not only SGLang
    doc["run"]["servers"]["spec"] = {"engine": "sglang", "server_info": {}}
    assert "caps running requests" not in threshold_hint(doc, res)  # no cap known: none named


def test_repeated_stages_pool(tmp_path):
    a = stage("baseline", "chat", 5, 0, seed=1)
    b = stage("baseline", "chat", 5, 1, seed=2)
    s = stage("spec", "chat", 5, 2)
    doc = {"schema": "loadgen.run/1", "run": {"roles": {"baseline": "baseline", "spec": "spec"}}, "stages": [a, b, s]}
    sl = slices(doc)["chat"]["baseline"][5]
    tokens = a["output_tokens"] + b["output_tokens"]
    window = a["window"]["duration_s"] + b["window"]["duration_s"]
    assert sl.get("output_tokens_per_s") == pytest.approx(tokens / window, rel=1e-3)
    assert sl.d["requests"]["completed"] == a["requests"]["completed"] + b["requests"]["completed"]
    assert len(sl.rate_bins) == 40  # both stages' time bins


def test_mean_interval():
    assert mean_interval([1.0, 2.0], 0.9) is None
    xs = [100.0 + (i % 5) for i in range(20)]
    lo, hi = mean_interval(xs, 0.9)
    assert lo < sum(xs) / len(xs) < hi
    lo99, hi99 = mean_interval(xs, 0.99)
    assert lo99 < lo and hi < hi99


def test_percentile_curve_matches_the_histogram():
    h = Hist()
    for v in range(1, 10001):
        h.record(v * 10)  # 10 µs … 100 ms
    xs, ys = percentile_curve(h, 1000.0)
    assert xs[0] == 0.0 and xs[-1] == pytest.approx(4.0)
    assert ys == sorted(ys)
    by_x = dict(zip(xs, ys))
    assert by_x[1.0] == pytest.approx(h.percentile(90) / 1000, rel=0.01)
    assert by_x[2.0] == pytest.approx(h.percentile(99) / 1000, rel=0.01)
    assert percentile_curve(Hist(), 1000.0) == ([], [])


def test_svg_is_well_formed_with_bands_flags_and_marks():
    s = plots.Series("a", [1, 5, 30], [10.0, None, 40.0], plots.BASELINE_COLOUR,
                     band=([8.0, None, 35.0], [12.0, None, 45.0]), flags=["warn", "", "fail"],
                     tips=["one <1>", "", "three & more"])
    chart = plots.Chart("t", [s, plots.Series("b", [1, 5, 30], [12.0, 20.0, 30.0], plots.SPEC_COLOUR, dash=True)],
                        spans=[plots.Span(10, 20, plots.CROSS_COLOUR, "x")],
                        vlines=[plots.VLine(14, plots.CROSS_COLOUR, "C≈14")],
                        ylog=True)
    root = ET.fromstring(plots.svg(chart))
    ns = "{http://www.w3.org/2000/svg}"
    tag = lambda e: e.tag.replace(ns, "")  # noqa: E731
    kinds = [tag(e) for e in root.iter()]
    assert kinds.count("polyline") == 3  # "a" breaks at the missing point; "b" is one line
    assert kinds.count("polygon") == 1
    rings = [e for e in root.iter() if tag(e) == "circle" and e.get("r") == "7"]
    assert {r.get("stroke") for r in rings} == {plots.WARN_COLOUR, plots.FAIL_COLOUR}
    titles = [e.text for e in root.iter() if tag(e) == "title"]
    assert "one <1>" in titles and "three & more" in titles
    empty = ET.fromstring(plots.svg(plots.Chart("e", [], empty="nothing here")))
    assert "nothing here" in "".join(empty.itertext())


def test_render_without_matplotlib_still_writes_html(synth_dir, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_mpl(name, *a, **k):
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    assert render(synth_dir).exists()
    assert not list((synth_dir / "plots").glob("*.png")) if (synth_dir / "plots").exists() else True


def test_marker_labels_do_not_collide():
    assert plots.label_rows([0, 10, 100], [50, 50, 50]) == [0, 1, 0]
    assert plots.label_rows([0, 60, 120], [50, 50, 50]) == [0, 0, 0]


def test_the_run_cards_simulator_is_words_not_a_dict():
    """run.json's ``run.simulator`` as loadgen crossover and run write it; the card printed it raw."""
    from loadgen.report.cards import sim_fact

    crossover = {"profile": "pcie-8gpu-eagle3", "time_scale": 5.0, "seed": 0, "protocol": "sglang", "max_tokens": None,
                 "prompt_tokens": None, "ignore_eos": False, "tokenizer": None,
                 "modes": {"baseline": "baseline", "eagle": "spec"}, "prefix_cache": 0,
                 "sessions": {"turns": 1, "think_s": 0.0, "shared_prefix": 0, "prefix_ratio": 1.0}}
    assert sim_fact(crossover) == ("pcie-8gpu-eagle3 profile: baseline, eagle (spec); runs 5× faster than real time; "
                                   "no prefix cache; seed 0")
    run = {"profile": "pcie-8gpu-eagle3", "mode": "spec", "time_scale": 1.0, "prefix_cache": 4096,
           "faults": "reset=0.02"}
    assert sim_fact(run) == "pcie-8gpu-eagle3 profile: spec; prefix cache 4096 tokens; faults reset=0.02"


def test_a_metric_compared_at_fewer_concurrencies_says_where_not():
    """The terminal's line for a metric that leans against the deciding one says where it was not compared (a
    TTFT at C=1 had too few first tokens: its line read "every measured concurrency (C=10–30)" under a C=1–30
    table)."""
    from types import SimpleNamespace as NS

    from loadgen.report.terminal import _fewer

    def metric(*cs):
        return NS(analysis=NS(comparisons=[NS(concurrency=c) for c in cs]), comparisons=[NS(concurrency=c) for c in cs])

    deciding = metric(1, 10, 30).analysis
    assert _fewer(metric(10, 30), deciding) == " Not compared at C=1: too few samples of this metric there."
    assert _fewer(metric(1, 10, 30), deciding) == ""

"""The page in the terminal's order (issue 27, point 3): the decision, then why, then the detail, collapsed.

Each workload section: (a) the deciding metric's finding (output throughput, or goodput with SLOs), the
simulator's own crossover beside it, the stages not compared and why; (b) that metric's charts and table, then
only the metrics that say speculation costs something where it is enabled (the ITL p99 after a burst of
drafts); (c) every other part inside one closed <details>. A part with nothing to show is absent, heading and
all. The runs are synthetic (tests/report/synth.py), analysed with the real analysis; each case beside its
control, so that a test fails when the page does not do what it says.
"""

from __future__ import annotations

import copy
import re
from html import unescape

import pytest

from loadgen.analysis.compare import BY_NAME, DECIDES, MetricResult, run_analysis
from loadgen.analysis.crossover import analyze
from loadgen.analysis.verdict import verdict
from loadgen.analysis.truth import crossover_checked
from loadgen.report.html import build
from loadgen.sim.known import KnownCrossover
from tests.analysis.test_api import ladder_with
from tests.analysis.test_serverview import block, gauge
from tests.report.synth import run_doc, stage

LADDER = (1, 5, 30, 100)


def _page(doc: dict, ra=None) -> str:
    return build(doc, ra if ra is not None else run_analysis(doc)).html


def _text(html: str) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)))


def _section(page: str, wl: str) -> str:
    i = page.index(f'<section class="card workload" id="wl-{wl}">')
    return page[i:page.index("</section>", i)]


def _parts(section: str) -> tuple[str, str, str]:
    """(decision, why, detail) of a section, in the order they appear (why and detail "" when absent)."""
    d = section.index('<div class="decision">')
    w = section.find('<div class="why">')
    x = section.find('<details class="detail">')
    assert d < w < x or (w == -1 and d < x) or x == -1, (d, w, x)
    end_decision = w if w != -1 else x if x != -1 else len(section)
    return (section[d:end_decision], section[w:x if x != -1 else len(section)] if w != -1 else "",
            section[x:] if x != -1 else "")


def _headings(html: str) -> list[str]:
    return [_text(h).strip() for h in re.findall(r"<h[2-4][^>]*>(.*?)</h[2-4]>", html)]


@pytest.fixture(scope="module")
def code():
    """One workload where speculation wins output throughput everywhere (synth's "code", 8 stages)."""
    doc = run_doc(ladder=LADDER, workloads=("code",), flags=False)
    return doc, run_analysis(doc)


# ------------------------------------------------------------------------------------------ the order


def test_decision_then_why_then_the_detail_collapsed(rendered):
    page = rendered.html
    top = page.index('<section class="card summary decision">')
    assert top < page.index('<section class="card flags">') < page.index('<nav class="wls">')
    assert "<h2>Decision <small>by output throughput, 90 % intervals</small></h2>" in page
    for wl in ("chat", "code"):
        section = _section(page, wl)
        decision, why, detail = _parts(section)
        assert decision and why and detail, wl
        assert '<p class="lead">' in decision and "<table" not in decision and "<figure" not in decision
        # why: the deciding metric's chart and Δ, its table, in that order
        assert _headings(why)[0] == "Why: output throughput at each concurrency"
        assert why.index("<figcaption>Output throughput</figcaption>") < why.index(
            "<figcaption>Δ output throughput, speculation vs baseline</figcaption>") < why.index('<table class="cmp">')
        assert why.count('<table class="cmp">') == 1  # one metric's table, not every metric's
        # the detail: one <details>, closed, holding every other part
        assert detail.startswith('<details class="detail"><summary>') and section.count("<details") == 1
        assert _headings(detail) == ["Every metric's verdict, with what it rests on", "Who wins where",
                                     "Every metric's table", "Latency and acceptance vs concurrency",
                                     "Latency by percentile (HDR)", "Every stage figure"], wl
        for part in ('<table class="matrix">', "<figcaption>TTFT p50 and p99</figcaption>",
                     '<table class="stages">', 'id="wl-%s-hdr-' % wl):
            assert part not in decision + why and part in detail, (wl, part)
    # the chat crossover: in the top card, and as the chat section's lead
    chat = _section(page, "chat")
    lead = re.search(r'<p class="lead">(.*?)</p>', chat).group(1)
    assert lead.startswith("Enable speculation below C≈") and "Flagged" not in lead  # the finding, not its caveat
    assert "Flagged (figures may be distorted)" in _parts(chat)[2]  # what it rests on: in the detail


def test_the_top_card_is_the_deciding_metrics_finding_per_workload(rendered):
    page = rendered.html
    card = page[page.index('<section class="card summary decision">'):page.index('<section class="card flags">')]
    lines = re.findall(r'<li><span class="chip (chip-[a-z]+)">[^<]*</span> <b>([a-z]+)</b>: ([^<]*)</li>', card)
    assert [(chip, wl) for chip, wl, _ in lines] == [("chip-cross", "chat"), ("chip-spec", "code")]
    assert lines[1][2] == "speculation wins at every measured concurrency (C=1–100); no crossover."
    assert "TTFT" not in card and "ITL" not in card and "goodput" not in card  # no rival verdicts at the top


# ------------------------------------------------------------------------------------------ goodput decides


def test_with_slos_goodput_decides_on_the_page(code):
    doc, _ = code
    slo = copy.deepcopy(doc)
    slo["run"]["settings"] = {"slo": {"ttft_ms": 100.0, "itl_ms": None, "tpot_ms": None, "e2e_ms": None}}
    ra = run_analysis(slo)
    assert ra.decides == "goodput_requests_per_s"
    page = _page(slo, ra)
    card = page[page.index('<section class="card summary decision">'):page.index("</section>")]
    assert "<h2>Decision <small>by goodput, 90 % intervals</small></h2>" in card
    want = ra.workloads["code"]["goodput_requests_per_s"].finding.partition(": ")[2]
    want = want[:1].upper() + want[1:]  # the finding, as a sentence of its own
    assert want and want in unescape(card)
    section = _section(page, "code")
    assert re.search(r"<h2>code <span class=\"chip [^\"]+\">[^<]+</span> <small>decided by goodput</small></h2>",
                     section)
    decision, why, _ = _parts(section)
    assert want in unescape(decision)
    assert _headings(why)[0] == "Why: goodput at each concurrency"
    assert "<figcaption>Goodput</figcaption>" in why and "<figcaption>Δ goodput, speculation vs baseline" in why
    assert "goodput in req/s" in why and "output throughput" not in why
    # the control: the same run without SLOs is decided by output throughput
    plain = _section(_page(doc, code[1]), "code")
    assert "<small>decided by output throughput</small>" in plain and "decided by goodput" not in plain


# ------------------------------------------------------------------------------------------ not compared


def test_a_stage_not_compared_is_named_with_why_in_the_decision_and_marked_in_its_table(code):
    doc, ra = code
    bad = copy.deepcopy(doc)
    s = next(s for s in bad["stages"] if s["target"] == "baseline" and s["concurrency"] == 100)
    s["warmup"] = {"users": 100, "not_streaming": 98, "first_done": 2}  # as tests/analysis/test_comparable.py
    why = ("baseline not comparable: 98 of 100 users' first requests were not yet streaming when the window "
           "opened (longer --warmup)")
    decision, table, _ = _parts(_section(_page(bad), "code"))
    assert f'<li data-c="100"><b>C=100</b> not compared: {why}</li>' in unescape(decision)
    row = re.search(r'<tr class="notcompared"><td class="num">100</td>.*?</tr>', table)
    assert row and "not compared" in row.group(0) and why in unescape(row.group(0))
    assert '<td class="num">100</td><td class="num">' not in table.replace(row.group(0), "")  # no measured row
    # the control: compared there, no such line or row
    decision, table, _ = _parts(_section(_page(doc, ra), "code"))
    assert "not compared" not in decision and 'class="notcompared"' not in table
    assert '<tr><td class="num">100</td>' in table


def test_a_workload_never_compared_says_so_and_shows_no_empty_part():
    """Baseline stages at C=1, 5, speculation's at C=30, 100: no concurrency of both. The section says so, names
    every planned stage not compared, and has no why, no verdicts, no tables, no HDR: nothing to show there."""
    doc = run_doc(ladder=LADDER, workloads=("code",), flags=False)
    doc["stages"] = [s for s in doc["stages"] if (s["target"] == "baseline") == (s["concurrency"] < 30)]
    page = _page(doc)
    section = _section(page, "code")
    decision, why, detail = _parts(section)
    assert '<span class="chip chip-none">not compared</span>' in section and why == ""
    assert "Not compared: no concurrency has complete stages of both targets" in _text(decision)
    assert [int(c) for c in re.findall(r'<li data-c="(\d+)">', decision)] == list(LADDER)
    # the detail keeps what was measured (each target's figures against C, every stage), and only that
    assert _headings(detail) == ["Output throughput, latency and acceptance vs concurrency", "Every stage figure"]
    for gone in ("Every metric's verdict", "Who wins where", "Every metric's table", "Latency by percentile",
                 "no stage to show", "no concurrency measured by both targets", "no stage measured by both",
                 '<ul class="recs"></ul>', "<h3></h3>", "Δ output throughput"):
        assert gone not in page, gone
    card = page[page.index('<section class="card summary decision">'):page.index("</section>")]
    assert re.search(r'<p class="answer"><span class="chip chip-none">not compared</span> Not compared: no '
                     r'concurrency has complete stages of both targets', card)


# ------------------------------------------------------------------------------------------ empty parts


def test_acceptance_chart_only_with_drafts(code):
    """A candidate with no drafts (no accept length, one token per chunk): no acceptance chart, the latency
    charts beside it stay."""
    doc, ra = code
    assert "<figcaption>Accept length and tokens per chunk</figcaption>" in _page(doc, ra)  # the control
    flat = copy.deepcopy(doc)
    flat["stages"] = []
    for i, c in enumerate(LADDER):
        for target in ("baseline", "spec"):
            s = stage("baseline", "code", c, len(flat["stages"]), speedup=1.0 + 0.1 * i)
            s["target"] = target  # the speculative label, measured like a baseline: one token a chunk
            flat["stages"].append(s)
    detail = _parts(_section(_page(flat), "code"))[2]
    assert "Accept length" not in detail and "no drafts" not in detail
    assert "<figcaption>TTFT p50 and p99</figcaption>" in detail
    assert "<h3>Latency and acceptance vs concurrency</h3>" in detail


def test_servers_view_only_where_a_stage_had_server_figures(code):
    doc, ra = code
    page = _page(doc, ra)  # synthetic stages carry no server block
    assert "What the server ran" not in page and "no server figures" not in page
    with_server = copy.deepcopy(doc)
    for s in with_server["stages"]:
        s["server"] = block(s["concurrency"], running=gauge(float(s["concurrency"]), p50=s["concurrency"],
                                                            mx=s["concurrency"]))
    detail = _parts(_section(_page(with_server, ra), "code"))[2]
    assert detail.count("<h3>What the server ran</h3>") == 1
    assert detail.index("What the server ran") < detail.index("<h3>Every stage figure</h3>")


def test_truth_line_only_on_a_simulator_run(code):
    doc, ra = code
    assert "simulator" not in _text(_page(doc, ra)).lower().replace("simulator's", "")
    assert 'class="muted truth"' not in _page(doc, ra)
    sim = copy.deepcopy(ra)
    sim.workloads["code"][DECIDES].simulator_truth = [
        crossover_checked(KnownCrossover(reported=12.0, true=11.5, covered=True, searched=(5, 30)))]
    decision = _parts(_section(_page(doc, sim), "code"))[0]
    assert re.search(r'<p class="muted truth">✓ The simulator&#x27;s own crossover for this traffic: C=11.5', decision)


# ------------------------------------------------------------------------------------------ ITL p99


def _with_itl(ra, p99: tuple, p50: tuple):
    """``ra`` with its ITL p99 and p50 results made from Δs per C (tests/analysis/test_comparable.py)."""
    out = copy.deepcopy(ra)
    per = out.workloads["code"]
    for name, label, deltas in (("itl_p99", "ITL p99", p99), ("itl_p50", "ITL p50", p50)):
        bs, ss = ladder_with(dict(zip((1, 5, 30), deltas)), hib=False)
        a = analyze(name, bs, ss)
        v = verdict(a, advises=False, worse_with_spec=BY_NAME[name].spec.worse_with_spec)
        per[name] = MetricResult(label, "ms", a, v.sentence.replace(name, label, 1), v.kind, v.caveat,
                                 v.everywhere, v.text.replace(name, label, 1))
    return out


def test_itl_p99_worse_beside_a_throughput_win_is_why_not_a_rival_verdict(code):
    """The issue's GPU case: throughput favours speculation everywhere, ITL p99 is higher with it (the gap after
    a burst of accepted drafts). The page says the ITL p99 sentence under "why", as what speculation costs, and
    never "do not enable"; ITL p50, which agrees with the decision, stays in the detail."""
    doc, ra = code
    assert ra.workloads["code"][DECIDES].verdict == "spec"
    ra = _with_itl(ra, p99=(0.2, 0.25, 0.3), p50=(-0.2, -0.2, -0.2))
    p99 = ra.workloads["code"]["itl_p99"]
    assert p99.verdict == "baseline"
    page = _page(doc, ra)
    assert "do not enable" not in page.lower()
    decision, why, detail = _parts(_section(page, "code"))
    against = why[why.index("<h4>What speculation costs where it is enabled</h4>"):]
    items = re.findall(r"<li>.*?</li>", against)
    assert len(items) == 1 and "<b>ITL p99</b>" in items[0]
    assert ("the baseline wins at every measured concurrency (C=1–30). Where speculation is worse here: accepted "
            "drafts arrive as bursts, so the gap after a burst is a whole verify step.") in unescape(items[0])
    assert "ITL p99" not in decision and "ITL p50" not in why
    assert "<b>ITL p50</b>" in detail and "<b>ITL p99</b>" in detail  # every verdict stays in the detail
    # the control: where the deciding metric does not enable speculation, nothing is said against it
    base = copy.deepcopy(ra)
    base.workloads["code"][DECIDES].verdict = "baseline"
    assert "What speculation costs" not in _page(doc, base)


def _result(name: str, deltas: tuple, hib: bool) -> MetricResult:
    bs, ss = ladder_with(dict(zip((1, 5, 30), deltas)), hib=hib)
    a = analyze(name, bs, ss)
    v = verdict(a, advises=False)
    return MetricResult(name, "", a, v.sentence, v.kind, v.caveat, v.everywhere, v.text)


def test_leans_against_is_the_baseline_better_where_speculation_is_enabled():
    """The rule that picks what is said under why (the terminal's): the baseline better somewhere beside a
    speculation win or crossover; of two crossovers only one the other way round."""
    from loadgen.report.words import leans_against

    up = _result("output_tokens_per_s", (-0.2, -0.2, 0.2), True)  # speculation better from high C: a crossover
    down = _result("decode_rate", (0.2, 0.2, -0.2), True)  # the other way round
    same = _result("goodput_requests_per_s", (-0.2, -0.2, 0.2), True)
    spec = _result("output_tokens_per_s", (0.2, 0.2, 0.2), True)
    base = _result("itl_p99", (0.2, 0.2, 0.2), False)  # higher ITL with speculation: the baseline better
    assert [r.verdict for r in (up, down, same, spec, base)] == ["cross", "cross", "cross", "spec", "baseline"]
    assert up.analysis.crossovers[0].direction != down.analysis.crossovers[0].direction
    assert leans_against(base, spec) and leans_against(base, up) and leans_against(down, up)
    assert not leans_against(same, up)  # the same crossover says what the decision says
    assert not leans_against(spec, up) and not leans_against(base, base) and not leans_against(base, None)
    assert not leans_against(spec, base)  # favouring speculation where the decision does not: a rival verdict

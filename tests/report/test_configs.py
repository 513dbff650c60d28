"""The report of a run of three or more configurations, from a real run on the embedded simulators.

data/configs4-run.json.gz is the run.json of ``loadgen crossover --sim-modes
baseline,spec,spec-topk4,spec-adaptive --ladder 1,5,10,30,100 --duration 4s`` (pcie-8gpu-eagle3, chat,
20 stages, 3.7 min on two cores). Each test renders it (analysis included: its crossover.json is written
beside it, as ``loadgen report`` does) and reads back what the page says against what crossover.json says.
"""

from __future__ import annotations

import gzip
import html as htmllib
import json
import re
from pathlib import Path

import pytest

from loadgen.analysis.configs import fmt_c
from loadgen.report.charts import BASELINE_COLOUR, SPEC_COLOUR
from loadgen.report.figures import ENVELOPE_COLOUR
from loadgen.report.html import render
from loadgen.report.palette import palette

DATA = Path(__file__).parent / "data" / "configs4-run.json.gz"
PRIMARY = "output_tokens_per_s"
LABELS = ["baseline", "spec", "spec-topk4", "spec-adaptive"]


def _doc() -> dict:
    return json.loads(gzip.decompress(DATA.read_bytes()))


def _render(tmp: Path, doc: dict) -> tuple[str, dict]:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "run.json").write_text(json.dumps(doc))
    page = render(tmp, png=False).read_text(encoding="utf-8")
    return page, json.loads((tmp / "crossover.json").read_text())


@pytest.fixture(scope="module")
def four(tmp_path_factory) -> tuple[str, dict]:
    return _render(tmp_path_factory.mktemp("configs4") / "run", _doc())


def _figure(page: str, caption: str) -> str:
    i = page.index(f"<figcaption>{caption}</figcaption>")
    return page[i: page.index("</figure>", i)]


def _polylines(svg: str) -> list[tuple[str, bool, list[tuple[float, float]]]]:
    """(stroke colour, dashed, points) of every line drawn."""
    out = []
    for m in re.finditer(r'<polyline points="([^"]+)" fill="none" stroke="([^"]+)"[^>]*?/>', svg):
        pts = [tuple(map(float, p.split(","))) for p in m.group(1).split()]
        out.append((m.group(2), "stroke-dasharray" in m.group(0), pts))
    return out


def _named(html: str, label: str) -> bool:
    """``label`` written after a swatch (not as the start of a longer label: spec vs spec-topk4)."""
    return re.search(rf"</span>{re.escape(label)}(?=[<\s])", html) is not None


def test_one_colour_per_configuration_everywhere(four):
    page, res = four
    assert res["targets"] == LABELS and res["adaptive"] == ["spec-adaptive"]
    colours = palette(res["targets"])
    # the two-target colours stay the reference's and the first candidate's; every configuration its own
    assert colours["baseline"] == BASELINE_COLOUR and colours["spec"] == SPEC_COLOUR
    assert len(set(colours.values())) == len(LABELS)
    thr = _figure(page, "Output throughput, every configuration")
    lines = {colour for colour, _, _ in _polylines(thr)}
    for x in LABELS:
        c = colours[x]
        assert c in lines, x  # its line in the throughput chart
        assert f'stroke="{c}" stroke-width="2.4"' in thr and f"</svg>{x}</span>" in thr  # its legend key
        for caption in ("TTFT p50 and p99", "ITL p50 and p99"):
            assert f'stroke="{c}"' in _figure(page, caption), (x, caption)
        # its swatch beside its name in the per-C table, the run card and the stage table
        assert page.count(f'data-colour="{c}"></span>{x}') >= 3, x
    # the adaptive configuration is drawn dashed, the others solid
    for colour, dashed, _ in _polylines(thr):
        if colour in colours.values():
            assert dashed == (colour == colours["spec-adaptive"])


def test_band_names_the_best_per_c(four):
    page, res = four
    r = res["configs"]["chat"][PRIMARY]
    colours = palette(res["targets"])
    cells = re.findall(r'<g class="cell" data-c="(\d+)" data-best="([^"]*)" data-leaders="([^"]*)">'
                       r'<title>[^<]*</title><rect [^>]*fill="([^"]+)"', page)
    assert [int(c) for c, *_ in cells] == [a["concurrency"] for a in r["at"]] == [1, 5, 10, 30, 100]
    for (c, best, leaders, fill), a in zip(cells, r["at"]):
        assert best == (a["best"] or "") and leaders.split(",") == a["leaders"], c
        if a["best"]:
            assert fill == colours[a["best"]], c
        else:  # a tie: hatched, naming every leader
            assert fill.startswith("url(#hatch-") and len(a["leaders"]) >= 2, c
    # the real run's shape (issue 15): the baseline best at low C, topk=1 at C=30, topk=4 never, the adaptive
    # one never chosen
    by_c = {int(c): best for c, best, _, _ in cells}
    assert by_c[1] == by_c[5] == "baseline" and by_c[30] == "spec"
    assert not any("spec-topk4" == b or "spec-adaptive" in ls.split(",") for _, b, ls, _ in cells)


def test_policy_sentence_and_table(four):
    page, res = four
    for name, sentence in res["policy"]["chat"].items():
        assert f"<li>{htmllib.escape(sentence)}</li>" in page, name  # every metric's policy, whole
    r = res["configs"]["chat"][PRIMARY]
    assert len(r["policy"]) >= 2  # the baseline below the switch, spec above it
    tab = page[page.index('id="wl-chat-pol-output_tokens_per_s"'):]
    table = tab[tab.index('<table class="cmp policy">'): tab.index("</table>")]
    rows = re.findall(r"<tr><td class=\"num\">(\d+)</td>(.*?)</tr>", table)
    assert [int(i) for i, _ in rows] == list(range(1, len(r["policy"]) + 1))
    for (_, row), p in zip(rows, r["policy"]):
        for x in p["labels"]:
            assert _named(row, x)
        assert f'{p["measured"][0]}–{p["measured"][1]}' in row
        sw = p.get("switch")
        if sw and sw["confirmed"]:
            assert (f"C≈{fmt_c(sw['estimate'])}, 90 % joint interval {fmt_c(sw['ci_low'])}–{fmt_c(sw['ci_high'])}"
                    in row)
            assert "running batch" not in row and "≈" in row.split("</td>")[-2]  # the batch column is filled
        elif p["c_to"] is not None:
            assert "somewhere between the measured C=" in row
    # the switch baseline → spec in the simulator's running batch: measured on both servers (they run C here)
    first = rows[0][1]
    assert re.search(r"</span>baseline ≈\d", first) and re.search(r"</span>spec ≈\d", first)


def test_envelope_line_lies_on_the_best(four):
    page, res = four
    r = res["configs"]["chat"][PRIMARY]
    colours = palette(res["targets"])
    thr = _figure(page, "Output throughput, every configuration")
    lines = _polylines(thr)
    env = [pts for colour, _, pts in lines if colour == ENVELOPE_COLOUR]
    assert len(env) == 1 and len(env[0]) == len(r["at"])
    own = {x: dict(pts) for colour, _, pts in lines for x in LABELS if colour == colours[x]}
    for (x_px, y_px), a in zip(env[0], r["at"]):
        on = a["envelope_label"]
        assert on != "spec-adaptive"
        assert abs(own[on][x_px] - y_px) < 0.15, a["concurrency"]  # on the best configuration's point
        # and no non-adaptive configuration above it (SVG y grows downwards)
        assert all(own[x][x_px] >= y_px - 0.15 for x in LABELS[:3] if x_px in own[x]), a["concurrency"]


def test_adaptive_configuration_against_the_envelope(four):
    page, res = four
    r = res["configs"]["chat"][PRIMARY]
    tab = page[page.index('id="wl-chat-pol-output_tokens_per_s"'):]
    table = tab[tab.index('<table class="cmp adaptive">'): tab.index("</table>", tab.index('class="cmp adaptive"'))]
    rows = re.findall(r'<tr><td class="num">(\d+)</td>(.*?)</tr>', table)
    assert [int(c) for c, _ in rows] == [a["concurrency"] for a in r["at"]]
    for (_, row), a in zip(rows, r["at"]):
        g = a["shortfall"]["spec-adaptive"]
        assert f"{g['delta'] * 100:+.1f} % [{g['ci_low'] * 100:+.1f}, {g['ci_high'] * 100:+.1f}]" in row
        # a gap the interval tells from zero but under the 1 % margin is a tie, as a stage's verdict is
        word = ("on the envelope (not told apart)" if g["ci_low"] <= 0 <= g["ci_high"]
                else "on the envelope (within 1 %)" if abs(g["delta"]) < 0.01
                else "short of the envelope" if g["ci_high"] < 0 else "better than the envelope")
        assert word in row


@pytest.mark.parametrize("gone", ["spec", "spec-topk4"])
def test_configuration_with_no_complete_stage(tmp_path, gone):
    doc = _doc()
    doc["stages"] = [s for s in doc["stages"] if s["target"] != gone]
    page, res = _render(tmp_path / "run", doc)
    r = res["configs"]["chat"][PRIMARY]
    assert gone in r["excluded"]
    colours = palette(res["targets"])
    # named as not compared, with its colour and the analysis's reason
    assert (f'<li class="excluded" data-label="{gone}"><span class="cfg" style="background:{colours[gone]}" '
            f'data-colour="{colours[gone]}"></span>{gone} is not compared: '
            f'{htmllib.escape(r["excluded"][gone])}.</li>') in page
    # the others compared: their columns in the per-C table, their lines, the band from their means
    others = [x for x in LABELS if x != gone]
    tab = page[page.index('id="wl-chat-pol-output_tokens_per_s"'):]
    head = tab[tab.index('<table class="cmp perc">'): tab.index("</thead>", tab.index('class="cmp perc"'))]
    for x in others:
        assert _named(head, x) and all(x in a["means"] for a in r["at"])
    assert not _named(head, gone)
    cells = re.findall(r'<g class="cell" data-c="(\d+)" data-best="([^"]*)" data-leaders="([^"]*)">', page)
    assert len(cells) == 5 and not any(gone in ls.split(",") for _, _, ls in cells)
    assert [b for _, b, _ in cells] == [a["best"] or "" for a in r["at"]]
    assert htmllib.escape(res["policy"]["chat"][PRIMARY]) in page


def test_decision_then_why_then_the_detail_collapsed(four):
    """The section in the terminal's order: the deciding metric's policy, then why (every configuration's line, the
    band, that metric's tables), then every other metric and the pair behind one closed <details>."""
    page, res = four
    section = page[page.index('<section class="card workload configs" id="wl-chat">'):]
    section = section[:section.index("</section>")]
    d, w, x = (section.index('<div class="decision">'), section.index('<div class="why">'),
               section.index('<details class="detail">'))
    assert d < w < x and "<small>decided by output throughput</small>" in section[:d]
    decision, why, detail = section[d:w], section[w:x], section[x:]
    sentence = res["policy"]["chat"][PRIMARY].partition(": ")[2]
    assert f'<p class="lead">{htmllib.escape(sentence[:1].upper() + sentence[1:])}</p>' in decision
    assert "<figcaption>Output throughput, every configuration</figcaption>" in why
    assert 'id="wl-chat-pol-output_tokens_per_s"' in why and '<p class="policy">' not in why  # said once, above
    others = [name for name in res["configs"]["chat"] if name != PRIMARY]
    assert others and all(f'id="wl-chat-pol-{name}"' in detail for name in others)
    assert 'id="wl-chat-pol-output_tokens_per_s"' not in detail
    assert "The reference against the first candidate: spec vs baseline" in detail

"""The open-loop page (report/rates.py) from a real run: every target's line and row, saturation, capacity,
lag-flagged stages marked, crossovers drawn on the rate axis, no concurrency wording; ``loadgen report DIR``.

The data is a real ``loadgen crossover --rate 4,8,16,24 --duration 8s --warmup 2s --max-dispatch-lag 40
--capacity ttft_p99=300ms,tpot_p50=5ms --capacity-budget 1`` against the embedded simulators (10 stages: two
capacity-search stages, baseline saturated at 24 req/s, one stage lag-flagged), run.json only: the page makes
rates.json itself, with the SLOs of the run's command line.
"""

import copy
import gzip
import os
import re
import shutil
import time
from html import escape, unescape
from pathlib import Path

import orjson
import pytest

from loadgen.cli import main
from loadgen.report.charts import CROSS_COLOUR, WARN_COLOUR
from loadgen.report.html import render
from loadgen.report.palette import palette
from loadgen.analysis.answer import RATE, axis_of
from loadgen.analysis.answer import load as load_answer
from loadgen.analysis.rates import RateAnalysis
from loadgen.report.rates import build
from tests.report.browser import Chrome

DATA = Path(__file__).parent / "data" / "rates-run.json.gz"


def _doc() -> dict:
    return orjson.loads(gzip.decompress(DATA.read_bytes()))


def _folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "run.json").write_bytes(gzip.decompress(DATA.read_bytes()))
    return path


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    out = _folder(tmp_path_factory.mktemp("rates") / "run")
    t = time.perf_counter()
    path = render(out)
    seconds = time.perf_counter() - t
    res = orjson.loads((out / "rates.json").read_bytes())
    return out, path.read_text(encoding="utf-8"), res, seconds


def _figure(html: str, caption: str) -> str:
    figs = [f for f in html.split("<figure")[1:] if f"<figcaption>{escape(caption)}</figcaption>" in f]
    assert len(figs) == 1, caption
    return figs[0].split("</figure>")[0]


def _rows(html: str) -> dict[tuple[str, str], str]:
    return {(m.group(1), m.group(2)): m.group(0)
            for m in re.finditer(r'<tr[^>]*data-target="([^"]+)" data-rate="([^"]+)">.*?</tr>', html)}


def test_rates_json_made_with_the_runs_own_slos(page):
    out, html, res, seconds = page
    assert res["axis"] == "rate" and res["reference"] == "baseline" and res["candidates"] == ["spec"]
    assert [s["text"] for s in res["slos"]] == ["TTFT p99 ≤ 300 ms", "TPOT p50 ≤ 5 ms"]  # from run.argv
    assert not (out / "crossover.json").exists()  # no concurrency analysis of an open loop
    assert (out / "plots" / "chat-rates.png").stat().st_size > 10_000
    assert (out / "plots" / "chat-capacity.png").stat().st_size > 5_000


def test_header_says_what_was_offered(page):
    _, html, _, _ = page
    head = html.split('<nav class="wls">')[0]
    assert "Open loop: what was offered" in head
    assert "<dt>arrival process</dt><dd>poisson</dd>" in head
    assert "<dt>rates offered</dt><dd>4, 8, 16, 24 req/s</dd>" in head
    assert "none: every request is sent at its planned time" in head
    assert "dispatch lag p99 exceeds 40 ms is flagged" in head
    assert "Latencies are from each request&#x27;s planned send" in head


def test_every_target_has_its_line_in_every_chart(page):
    _, html, res, _ = page
    colours = palette(["baseline", "spec"])
    rates = {t: sorted({p["rate"] for p in res["points"]["chat"] if p["target"] == t}) for t in colours}
    assert len(rates["baseline"]) == 5 and len(rates["spec"]) == 5  # 4, 8, 16, 24 and one capacity-search rate
    for caption, per_target in (("TTFT from plan p50 and p99", 2), ("TPOT p50", 1), ("E2E from plan p99", 1),
                                ("Achieved against offered", 1)):
        fig = _figure(html, caption)
        assert "offered rate, requests/s (log scale)" in fig
        for t, col in colours.items():
            lines = re.findall(rf'<polyline points="([^"]+)" fill="none" stroke="{col}"', fig)
            assert len(lines) == per_target, (caption, t)
            assert all(len(pts.split()) == len(rates[t]) for pts in lines), (caption, t)
    assert "achieved = offered" in _figure(html, "Achieved against offered")  # the identity line


def test_every_rate_and_target_has_its_row(page):
    _, html, res, _ = page
    rows = _rows(html)
    stages = {(s["target"], f"{float(s['rate']):g}") for s in _doc()["stages"]}
    assert set(rows) == stages and len(stages) == 10
    p = next(p for p in res["points"]["chat"] if p["target"] == "spec" and p["rate"] == 24)
    row = rows[("spec", "24")]
    assert f"<td>{p['figures']['ttft_planned_p99']:.1f}</td>" in row
    assert f"<td>{p['ended_per_s']:.2f}</td>" in row and f"<td>{p['goodput_per_s']:.2f}</td>" in row


def test_saturation_words_and_the_saturated_stage_marked(page):
    _, html, res, _ = page
    sat = res["saturation"]["chat"]
    assert sat["baseline"]["at"] == 24 and sat["spec"]["at"] is None
    for s in sat.values():
        assert escape(s["words"][0].upper() + s["words"][1:]) in html
    assert "Baseline saturates between 16 and 24 req/s" in html
    saturated = [k for k, row in _rows(html).items() if 'data-flag="saturated"' in row]
    assert saturated == [("baseline", "24")]
    why = escape(sat["baseline"]["why"])
    assert f'title="{why}">saturated</span>' in _rows(html)[("baseline", "24")]
    assert 'class="rowfail"' in _rows(html)[("baseline", "24")]


def test_lag_flagged_stages_marked_with_their_reason(page):
    _, html, res, _ = page
    flagged = {(s["target"], f"{float(s['rate']):g}") for s in _doc()["stages"] if s["open_loop"]["lag_flagged"]}
    assert flagged  # the data has one: a capacity-search stage the 2-core machine could not send on time
    rows = _rows(html)
    for key, row in rows.items():
        if key in flagged:
            tip = unescape(re.search(r'title="([^"]+)">lag flagged', row).group(1))
            assert tip.startswith("dispatch lag p99 ") and "> 40 ms" in tip, tip
        else:
            assert 'data-flag="lag"' not in row and "<td>kept</td>" in row
    # ringed amber in the latency charts (a saturated stage is ringed red instead)
    lagged = [p for p in res["points"]["chat"] if p["lag_flagged"] and not p["saturated"]]
    tpot = _figure(html, "TPOT p50")
    assert tpot.count(f'r="7" fill="none" stroke="{WARN_COLOUR}"') == len(lagged)
    assert "dispatch lag flagged" in tpot
    assert "Flags" in html and "left out of the comparisons and the capacity" in html


def test_every_metric_sentence_and_where_it_was_compared(page):
    _, html, res, _ = page
    per = res["metrics"]["chat"]["spec"]
    assert per
    for m in per.values():
        rest = m["sentence"].partition(": ")[2]
        assert escape(rest[0].upper() + rest[1:]) in html, m["sentence"]
    ladder = sorted({float(r) for m in per.values() for r in m["analysis"]["ladder"]})
    measured = sorted({p["rate"] for p in res["points"]["chat"]})
    assert set(ladder) < set(measured)  # the capacity search's one-target rates have no partner
    assert f"Compared at {', '.join(f'{r:.3g}' for r in ladder)} req/s; not at " in html


def test_capacity_sentence_per_target_and_margin_chart(page):
    _, html, res, _ = page
    assert escape(res["capacity_sentence"]["chat"][0].upper() + res["capacity_sentence"]["chat"][1:]) in html
    fig = _figure(html, "Worst SLO margin against the rate")
    assert 'class="zero"' in fig  # the zero line
    colours = palette(["baseline", "spec"])
    for t, c in res["capacity"]["chat"].items():
        assert c["estimate"] is not None and c["ci_low"] < c["estimate"] < c["ci_high"]
        row = re.search(rf'<tr data-target="{t}">.*?</tr>', html.split("Capacity under the SLOs")[1]).group(0)
        assert f"<td>{c['estimate']:.3g} req/s</td>" in row and f"{c['ci_low']:.3g}–{c['ci_high']:.3g}" in row
        assert f"{t} ≈{c['estimate']:.3g}/s" in fig  # its capacity line, in its colour, interval shaded
        assert f'stroke="{colours[t]}" stroke-width="1.6" stroke-dasharray="5 3"' in fig
        assert f'fill="{colours[t]}" fill-opacity="0.13"' in fig
        assert f'<polygon points="' in fig and f'fill="{colours[t]}" fill-opacity="0.16"' in fig  # its band


def test_no_concurrency_wording(page):
    _, html, _, _ = page
    text = re.sub(r"<style>.*?</style>|<script>.*?</script>", "", html, flags=re.S)
    assert "C=" not in text and "C≈" not in text
    assert "concurrency" not in text.lower()


def test_crossovers_drawn_as_lines_with_their_intervals(page):
    out, _, res, _ = page
    res = copy.deepcopy(res)
    a = res["metrics"]["chat"]["spec"]["tpot_p50"]["analysis"]
    a["crossovers"] = [{"estimate": 10.0, "ci_low": 8.5, "ci_high": 12.0, "low_c": 8.0, "high_c": 16.0,
                        "direction": "spec_to_baseline", "confidence": 0.9, "stage_level": 0.9}]
    html = build(_doc(), RateAnalysis.from_dict(res)).html
    fig = _figure(html, "TPOT p50")
    assert "p50 ≈10/s" in fig and f'stroke="{CROSS_COLOUR}"' in fig
    assert f'fill="{CROSS_COLOUR}" fill-opacity="0.13"><title>TPOT p50: crossover at 10 req/s, 90 % interval ' \
           "8.5–12</title>" in fig
    assert "crossover interval" in fig
    assert "p50 ≈10/s" not in _figure(html, "E2E from plan p99")  # on its own metric's chart only


def test_a_fresh_rates_json_is_used_a_stale_one_remade(tmp_path):
    out = _folder(tmp_path / "run")
    doc = _doc()
    first = load_answer(out, doc).to_dict()
    mine = {**first, "capacity_sentence": {"chat": "a sentence only the file on disk has"}}
    (out / "rates.json").write_bytes(orjson.dumps(mine))
    assert "A sentence only the file on disk has" in render(out, png=False).read_text(encoding="utf-8")
    old = time.time() - 60
    os.utime(out / "rates.json", (old, old))  # older than run.json: made again
    html = render(out, png=False).read_text(encoding="utf-8")
    assert "sentence only the file on disk has" not in html
    assert escape(first["capacity_sentence"]["chat"][1:]) in html


def test_stages_decide_not_a_leftover_rates_json(tmp_path):
    (tmp_path / "rates.json").write_text("{}")
    closed = {"stages": [{"target": "baseline", "concurrency": 4}]}
    assert axis_of(closed, tmp_path) != RATE
    assert axis_of(_doc(), tmp_path) == RATE
    assert axis_of({"stages": []}, tmp_path) == RATE  # no stage: the file says it


def test_loadgen_report_on_an_open_loop_folder(tmp_path, capsys):
    out = _folder(tmp_path / "run")
    rc = main(["report", str(out), "--no-png"])
    stdout, err = capsys.readouterr()
    assert rc == 0, err
    assert "== chat: open loop ==" in stdout and "capacity: with spec" in stdout
    assert "Traceback" not in err and "report.html" in err
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "Open loop: what was offered" in html and "Worst SLO margin against the rate" in html
    assert not (out / "crossover.json").exists() and not (out / "plots").exists()
    # --out elsewhere: run.json and rates.json go along, the page is the open loop's
    rc = main(["report", str(out), "--out", str(tmp_path / "copy"), "--no-html"])
    stdout, err = capsys.readouterr()
    assert rc == 0, err
    assert orjson.loads((tmp_path / "copy" / "rates.json").read_bytes())["axis"] == "rate"
    assert not (tmp_path / "copy" / "report.html").exists()


def test_rate_page_opens_clean_in_headless_chromium(chromium, page, tmp_path):
    out, _, _, _ = page
    drawn = """Array.from(document.querySelectorAll('svg.chart'))
      .filter(e => e.getBoundingClientRect().width > 300 && e.querySelector('polyline')).length"""
    with Chrome(chromium) as ch:
        s, run = ch.open((out / "report.html").resolve().as_uri())
        assert run.errors() == [] and run.requests == []
        assert ch.evaluate(s, "document.title").endswith("(open loop)")
        assert ch.evaluate(s, drawn) == 5  # TTFT, TPOT, E2E, achieved, margin: all laid out and drawn
        width, height = ch.screenshot(s, str(tmp_path / "rates.png"))
        assert ch.collect(s, run).errors() == []
    assert width == 1400 and 2500 < height < 8000
    keep = os.environ.get("LOADGEN_SCREENSHOT_DIR")
    if keep:
        os.makedirs(keep, exist_ok=True)
        shutil.copy(tmp_path / "rates.png", os.path.join(keep, "rates.png"))

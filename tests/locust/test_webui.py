"""The "LLM stages" tab in Locust's web UI, loaded in headless Chromium during a run of three targets;
the tab's colours and per-C comparison as status.json serves them."""

import html
import re
import subprocess

from helpers import FAST, free_port, get_json, start_locust, stop, wait_for

from loadgen.locust.conductor import speculation_words
from loadgen.locust.webui import by_concurrency
from loadgen.report.charts import BASELINE_COLOUR, SPEC_COLOUR
from loadgen.report.palette import palette

MODES = ["baseline", "spec", "spec-topk4"]

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def dump_dom(browser: str, url: str, profile) -> str:
    p = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=8000",
                        "--dump-dom", url], capture_output=True, text=True, timeout=90)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def cells(dom: str) -> list[str]:
    return [html.unescape(c) for c in re.findall(r"<td[^>]*>([^<]*)</td>", dom)]


def test_tab_shows_live_stage_figures_and_charts_for_three_targets(chromium, tmp_path):
    browser = chromium
    port = free_port()
    proc = start_locust("--autostart", "--web-host", "127.0.0.1", "--web-port", str(port), "--ladder", "1,2,5,10",
                        "--sim-modes", ",".join(MODES), *FAST, "--out", str(tmp_path / "out"), cwd=tmp_path,
                        log=tmp_path / "locust.log")
    base = f"http://127.0.0.1:{port}"
    try:
        st = wait_for(lambda: len((s := get_json(base + "/loadgen/status.json"))["stages"]) >= 3 and s, 90,
                      "every target's stage at C=1 to be written")
        dom = dump_dom(browser, base + "/?tab=loadgen", tmp_path / "chrome")
        live = get_json(base + "/loadgen/status.json")
        page = dump_dom(browser, base + "/loadgen/", tmp_path / "chrome2")
    finally:
        stop(proc)
    assert not live["finished"], "the run ended before the page was read: not a live view"
    # Locust's own page, our tab, its table with the first stage's figures as written.
    assert "LLM stages" in dom
    first = st["stages"][0]
    row = cells(dom)
    i = row.index("1/12")
    assert row[i:i + 8] == ["1/12", "baseline", "1", f"{first['ttft_p50']:.2f}", f"{first['ttft_p99']:.2f}",
                            f"{first['itl_p50']:.2f}", f"{first['itl_p99']:.2f}", f"{first['tokens_per_s']:.1f}"]
    assert any(c.startswith("running: ") for c in row)  # the stage in progress has its own row
    # what the stream says speculation did: nothing for the plain baseline, steadily on for spec
    assert row[i + 10] == "-"
    j = row.index("2/12")
    assert row[j + 1] == "spec" and row[j + 10].startswith("on ") and "thrashing" not in row[j + 10]
    # The charts against concurrency, under the tab's table.
    for metric in ("tokens_per_s", "ttft", "itl", "tokens_per_chunk", "accept_length"):
        assert f'data-metric="{metric}"' in dom, metric
    # Every target's series, each in its colour: the reference and the first candidate as the tab always
    # drew them, the third the report's third.
    assert st["colours"] == {"baseline": "#3a68c4", "spec": "#e0641a", "spec-topk4": "#2a9d5c"}
    for t, colour in st["colours"].items():
        assert re.search(rf'<circle[^>]*data-colour="{colour}"[^>]*data-target="{t}"[^>]*data-c="1"', dom), t
        assert f'data-legend="{t}"' in dom
    # The per-C comparison: at C=1 all three measured, the highest of them named.
    c1 = st["by_c"][0]
    assert c1["concurrency"] == 1 and c1["complete"] and set(c1["tokens_per_s"]) == set(MODES)
    assert c1["best"] == max(MODES, key=lambda t: c1["tokens_per_s"][t])
    assert re.search(rf'<tr data-c="1">.*?data-best="{c1["best"]}"', dom)
    assert "stages written" in dom
    # The standalone page: same figures in its own table, and the charts.
    assert "loadgen — per stage and target" in page and 'data-metric="itl"' in page
    assert f"{first['ttft_p50']:.2f}" in cells(page)
    assert 'class="loadgen-best"' in page and 'data-colour="#2a9d5c"' in page


def _stage(target, c, toks, completed=3, incomplete=False):
    return {"target": target, "concurrency": c, "tokens_per_s": toks, "completed": completed,
            "incomplete": incomplete}


def test_the_tab_s_palette_is_the_report_s_and_follows_the_run_order():
    assert palette(["baseline", "spec"]) == {"baseline": BASELINE_COLOUR, "spec": SPEC_COLOUR}
    three = palette(["ref", "b", "c"])
    assert list(three) == ["ref", "b", "c"] and three["c"] == "#2a9d5c"
    many = palette([f"t{i}" for i in range(12)])
    assert len(set(list(many.values())[:10])) == 10  # ten distinct before the list repeats
    assert many["t10"] == many["t2"] and BASELINE_COLOUR not in list(many.values())[2:]


def test_by_concurrency_names_the_highest_of_the_written_stages():
    st = {"targets": ["a", "b", "c"], "stages": [
        _stage("a", 1, 90.0), _stage("b", 1, 80.0), _stage("c", 1, 95.0),
        _stage("b", 4, 300.0), _stage("c", 4, 0.0, completed=0), _stage("a", 4, 310.0, incomplete=True),
        _stage("c", 8, 500.0)]}
    rows = by_concurrency(st)
    assert [r["concurrency"] for r in rows] == [1, 4, 8]
    assert rows[0] == {"concurrency": 1, "tokens_per_s": {"a": 90.0, "b": 80.0, "c": 95.0}, "best": "c",
                       "complete": True}
    # nothing completed, or a stage missing a worker's share: not a reading to rank
    assert rows[1]["tokens_per_s"] == {"a": None, "b": 300.0, "c": None} and rows[1]["best"] is None
    assert rows[1]["complete"] and rows[2]["best"] is None and not rows[2]["complete"]


def test_the_speculation_cell_says_what_the_stream_showed():
    sw = {"on": 30, "off": 10, "switches": 1, "per_s": 0.2, "oscillating": False}
    assert speculation_words({"switching": sw}) == "on 75 %, 1 switch"
    assert speculation_words({"switching": {**sw, "switches": 0}}) == "on 75 %"
    assert speculation_words({"switching": {**sw, "switches": 52, "per_s": 17.3, "oscillating": True}}) == \
        "thrashing: 52 switches (17/s), on 75 %"
    assert speculation_words({}) == "-" and speculation_words({"switching": {"chunks": [1]}}) == "-"

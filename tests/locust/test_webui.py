"""The "LLM stages" tab in Locust's web UI, loaded in headless Chromium during a run."""

import html
import re
import shutil
import subprocess

import pytest

from helpers import FAST, free_port, get_json, start_locust, stop, wait_for

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def dump_dom(browser: str, url: str, profile) -> str:
    p = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=8000",
                        "--dump-dom", url], capture_output=True, text=True, timeout=90)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def cells(dom: str) -> list[str]:
    return [html.unescape(c) for c in re.findall(r"<td[^>]*>([^<]*)</td>", dom)]


def test_tab_shows_live_stage_figures_and_charts(tmp_path):
    browser = chromium()
    if browser is None:
        pytest.skip("no chromium/chrome executable on PATH (tests/run.sh installs Debian's chromium)")
    port = free_port()
    proc = start_locust("--autostart", "--web-host", "127.0.0.1", "--web-port", str(port), "--ladder", "1,2,5",
                        *FAST, "--out", str(tmp_path / "out"), cwd=tmp_path, log=tmp_path / "locust.log")
    base = f"http://127.0.0.1:{port}"
    try:
        st = wait_for(lambda: (s := get_json(base + "/loadgen/status.json"))["stages"] and s, 90,
                      "the first stage to be written")
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
    i = row.index("1/6")
    assert row[i:i + 8] == ["1/6", "baseline", "1", f"{first['ttft_p50']:.2f}", f"{first['ttft_p99']:.2f}",
                            f"{first['itl_p50']:.2f}", f"{first['itl_p99']:.2f}", f"{first['tokens_per_s']:.1f}"]
    assert any(c.startswith("running: ") for c in row)  # the stage in progress has its own row
    # The charts against concurrency, under the tab's table.
    for metric in ("tokens_per_s", "ttft", "itl", "tokens_per_chunk", "accept_length"):
        assert f'data-metric="{metric}"' in dom, metric
    assert re.search(r'<circle[^>]*data-target="baseline"[^>]*data-c="1"', dom)
    assert "stages written" in dom
    # The standalone page: same figures in its own table, and the charts.
    assert "loadgen — per stage and target" in page and 'data-metric="itl"' in page
    assert f"{first['ttft_p50']:.2f}" in cells(page)

"""report.html in headless Chromium: no console errors, no network, tabs work, a full-page screenshot.

Set LOADGEN_SCREENSHOT_DIR to keep the screenshot (CI artifact); tests/run.sh installs Chromium.
"""

import os
import shutil

from tests.report.browser import Chrome

TABS = """(() => {
  const b = document.querySelector('button[data-panel="wl-chat-hdr-1"]');
  b.click();
  return [document.getElementById('wl-chat-hdr-1').hidden, document.getElementById('wl-chat-hdr-30').hidden,
          b.classList.contains('on')];
})()"""

DRAWN = """Array.from(document.querySelectorAll('svg.chart'))
  .filter(e => e.checkVisibility() && e.getBoundingClientRect().width > 300 && e.querySelector('polyline')).length"""
"""Charts a reader sees: laid out wide, with lines, and not inside a closed <details> (whose content Chromium
lays out but does not show: checkVisibility)."""


def test_report_opens_clean_in_headless_chromium(chromium, rendered, tmp_path):
    with Chrome(chromium) as ch:
        s, run = ch.open((rendered.dir / "report.html").resolve().as_uri())
        assert run.errors() == []
        assert run.requests == []  # nothing fetched: the page is self-contained
        assert ch.evaluate(s, "document.title").startswith("loadgen report")
        # the page opens on the decisions: each workload's detail closed, its why (throughput and Δ) shown
        assert ch.evaluate(s, "Array.from(document.querySelectorAll('details.detail')).map(d => d.open)") == [
            False, False]
        assert ch.evaluate(s, DRAWN) == 4
        ch.evaluate(s, "document.querySelectorAll('details').forEach(d => { d.open = true; })")
        # opened, visible charts with lines: throughput, Δ, TTFT, ITL, acceptance per workload + one HDR pair each
        assert ch.evaluate(s, DRAWN) >= 14
        assert ch.evaluate(s, TABS) == [False, True, True]
        shot = tmp_path / "report.png"
        width, height = ch.screenshot(s, str(shot))
        assert ch.collect(s, run).errors() == []
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 100_000
    assert width == 1400 and 3000 < height < 16000
    keep = os.environ.get("LOADGEN_SCREENSHOT_DIR")
    if keep:
        os.makedirs(keep, exist_ok=True)
        shutil.copy(shot, os.path.join(keep, "report.png"))


def test_the_check_sees_console_errors(chromium, tmp_path):
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><p>x</p><script>console.error("boom"); undefined_call();</script>')
    with Chrome(chromium) as ch:
        _, run = ch.open(page.as_uri())
    errors = run.errors()
    assert any("boom" in e for e in errors) and any("undefined_call" in e for e in errors)

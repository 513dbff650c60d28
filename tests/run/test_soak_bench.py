"""The soak (``loadgen bench soak``) in short, as a real process: one row per stage as it ends, the RSS of the
client and the simulator in each, the verdict's lines; and ``--max-run-time`` stops it in time with the stages
run so far kept in its run.json."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from loadgen.bench import soak_bench

ROW = re.compile(r"^\s*(\d+)\s+(\d+:\d\d)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s")


def _soak(tmp_path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    """Four stages of a 2 s window after a 0.5 s least warm-up (the default 5 s is for long soaks)."""
    out = tmp_path / "run.json"
    p = subprocess.run([sys.executable, "-m", "loadgen", "bench", "soak", "--duration", "8s", "--stage", "2s",
                        "--warmup", "0.5s", "--concurrency", "20", "--out", str(out.parent), *extra],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode in (0, 1), p.stderr[-2000:]  # 1: a verdict line failed (a short soak's RSS still grows)
    return p, json.loads(out.read_text())


def _rows(stdout: str) -> list[re.Match]:
    return [m for line in stdout.splitlines() if (m := ROW.match(line))]


def test_a_short_soak_prints_a_row_per_stage_with_rss_and_the_verdict(live, tmp_path):
    p, doc = _soak(tmp_path)
    rows = _rows(p.stdout)
    assert [int(m.group(1)) for m in rows] == [0, 1, 2, 3], p.stdout
    for m in rows:
        assert float(m.group(3)) > 0 and float(m.group(5)) > 0, m.group(0)  # client and simulator RSS, MiB
        assert int(m.group(4)) >= 1
        assert float(m.group(6)) > 0  # tok/s
    assert len(doc["stages"]) == 4 and all(s["soak"]["client_rss_mib"] > 0 for s in doc["stages"])
    assert "verdict over 4 stage(s)" in p.stdout
    for what in ("client RSS slope", "simulator RSS slope", "output tok/s drift", "TTFT p50 drift"):
        assert re.search(rf"^  [✓✗] {what} .*bound", p.stdout, re.M), (what, p.stdout)
    assert "--max-run-time: none given" in p.stdout


def test_max_run_time_stops_the_soak_in_time_and_keeps_its_stages(live, tmp_path):
    p, doc = _soak(tmp_path, "--max-run-time", "6s")
    rows = _rows(p.stdout)
    assert 1 <= len(rows) < 4, p.stdout
    assert len(doc["stages"]) == len(rows)  # every printed stage is in run.json
    assert doc["run"]["cut"]["by"] == "max-run-time"
    # the soak's own check of its wall time, its mark what the figures say (a loaded host's ramp can overrun
    # the budget and a stage's cool-down by a fraction of a second: 6.6 s against 6.5, seen)
    m = re.search(r"^  ([✓✗]) --max-run-time 6 s: the ramp took ([\d.]+) s; bound: .* = ([\d.]+) s", p.stdout, re.M)
    assert m and (m.group(1) == "✓") == (float(m.group(2)) <= float(m.group(3))), p.stdout


def test_the_verdict_reads_a_steady_run_and_a_leak():
    def rows(rss, tok):
        return [{"stage": i, "elapsed_s": 60.0 * (i + 1), "client_rss_mib": r, "sim_rss_mib": 50.0, "tok_s": t,
                 "ttft_p50_ms": 10.0 + (i % 2) * 0.1, "failed": 0, "client_bound": False, "incomplete": False,
                 "cooldown_s": 1.0} for i, (r, t) in enumerate(zip(rss, tok))]

    steady = rows([100.0] * 9, [1000 + (i % 2) * 5 for i in range(9)])
    lines, ok = soak_bench.verdict(steady, wall_s=600, max_run_s=600, rss_bound=5.0)
    assert ok, lines
    leak = rows([100.0 + i for i in range(9)], [1000 - 20 * i for i in range(9)])  # +1 MiB/min, tok/s falls
    lines, ok = soak_bench.verdict(leak, wall_s=700, max_run_s=600, rss_bound=5.0)
    assert not ok
    text = "\n".join(lines)
    assert "✗ client RSS slope +60.0 MiB/h" in text and "✗ output tok/s drift" in text
    assert "✗ --max-run-time 600 s" in text

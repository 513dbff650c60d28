"""Multi-turn sessions through `loadgen run --turns`: each stage's per-turn table printed and its sessions block
written (the Locust ramp's: tests/locust/test_sessions_locust.py)."""

import json

from loadgen.report.sessions import NO_SIM_CACHE
from loadgen.stage.result import StageResult


def check_block(stage: dict, turns: int) -> None:
    s = stage["sessions"]
    assert s["planned_turns"] == turns and len(s["per_turn"]) == turns
    per = s["per_turn"]
    # every request of the window is some session's turn: the per-turn counts add up to the stage's
    assert sum(t["started"] for t in per) == stage["requests"]["started"]
    assert sum(t["completed"] for t in per) == stage["requests"]["completed"]
    assert sum(t["failed"] for t in per) == stage["requests"]["failed"]
    means = [t["prompt_tokens_mean"] for t in per]
    assert None not in means and means == sorted(means) and means[0] < means[-1]  # the history grows
    sess = s["sessions"]
    assert sess["completed"] + sess["failed"] + sess["cut"] == sess["started"] > 0
    assert StageResult.from_dict(stage).to_dict()["sessions"]["per_turn"] == per  # reloads whole


def test_run_prints_and_writes_the_turns(cli, tmp_path):
    out = tmp_path / "run.json"
    p = cli("run", "--workload", "chat", "--ladder", "2", "--turns", "3", "--shared-prefix", "20", "--max-tokens",
            "16", "--requests", "18", "--warmup", "0.2s", "--sim-time-scale", "10", "--out", str(out.parent))
    assert p.returncode == 0, p.stderr
    [stage] = json.loads(out.read_text())["stages"]
    check_block(stage, 3)
    head = next(i for i, line in enumerate(p.stdout.splitlines()) if line.startswith("sessions, baseline C=2: "))
    table = p.stdout.splitlines()[head + 1:head + 6]
    assert table[0].split()[:3] == ["turn", "requests", "ok"] and [r.split()[0] for r in table[2:5]] == ["1", "2", "3"]
    # the embedded simulator ran without a prefix cache: its 0 % cache hits are said to be its own
    assert p.stdout.rstrip().splitlines()[-1] == NO_SIM_CACHE and " 0.0 %" in p.stdout


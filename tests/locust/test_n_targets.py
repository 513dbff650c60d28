"""Three or more targets on the Locust ramp: a real headless run with three embedded simulators whose
ramp.json `loadgen crossover --from` analyses as three configurations; the stage order and the shared
prompts of the plans; the configurations block; a bad mode or a duplicated target is one line."""

import json
import subprocess
import sys

import pytest

from helpers import results, run_locust

from loadgen.errors import LoadgenError
from loadgen.locust.conductor import build_plans, configurations
from loadgen.locust.hooks import check_modes
from loadgen.run.order import stage_order
from loadgen.settings import config as cfgmod

MODES = ["baseline", "spec", "spec-topk4"]
SHORT = ["--warmup", "0.5s", "--duration", "1.5s", "--sim-time-scale", "5"]


def parse(text: str):
    import tomllib

    return cfgmod.parse(tomllib.loads(text), "x.toml")


def test_three_simulators_rotate_and_crossover_from_compares_three_configurations(live, tmp_path):
    p = run_locust("--headless", "--ladder", "1,4", "--sim-modes", ",".join(MODES), *SHORT, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    folder = tmp_path / "results" / "ramp"
    doc = results(folder)
    run, stages = doc["run"], doc["stages"]
    # The rotated order of run/order.stage_order: at C=4 the second row of the Williams design starts.
    expected = [f"{s.target}@{s.value}" for s in stage_order(MODES, [1, 4], ["chat"])]
    assert expected == ["baseline@1", "spec@1", "spec-topk4@1", "spec@4", "spec-topk4@4", "baseline@4"]
    assert run["order"] == expected
    assert [f"{s['target']}@{s['concurrency']}" for s in stages] == expected
    assert [s["stage_index"] for s in stages] == list(range(6))
    for s in stages:
        assert s["requests"]["completed"] > 0 and s["requests"]["failed"] == 0, s["requests"]
        assert not s["incomplete"], s["notes"]
    # Each simulator runs its own mode: topk=4 sends more tokens per chunk than topk=1, the baseline one.
    tpc = {m: [s["tokens_per_chunk"]["mean"] for s in stages if s["target"] == m] for m in MODES}
    assert tpc["baseline"] == [1.0, 1.0]
    assert min(tpc["spec-topk4"]) > max(tpc["spec"]) > 1.2, tpc
    # Which configurations it compares, as `loadgen crossover` writes them.
    assert run["roles"] == {"baseline": "baseline", "spec": "spec"}
    assert run["configurations"] == {"reference": "baseline", "candidates": ["spec", "spec-topk4"], "adaptive": []}
    assert run["simulator"]["modes"] == {m: m for m in MODES}
    # `loadgen crossover --from` the ramp's file: the N-configuration analysis and its table.
    out = tmp_path / "analysis"
    a = subprocess.run([sys.executable, "-m", "loadgen", "crossover", "--from", str(folder / "ramp.json"),
                        "--out", str(out), "--no-report"], capture_output=True, text=True, timeout=120)
    assert a.returncode == 0, a.stderr[-3000:]
    assert "3 configurations" in a.stdout, a.stdout
    head = next(line for line in a.stdout.splitlines() if line.strip().startswith("C "))
    assert head.split()[:4] == ["C", "baseline", "spec", "spec-topk4"], head
    res = json.loads((out / "crossover.json").read_text())
    assert res["configs"] and "chat" in res["configs"], res.keys()
    assert res["baseline"] == "baseline" and res["spec"] == "spec"


def test_plans_of_three_targets_follow_stage_order_and_share_each_steps_prompts():
    cfg = parse("[run]\nladder = [1, 2, 5, 10]\nseed = 3\n"
                + "".join(f"[targets.{x}]\nurl = \"http://{x}:1\"\n" for x in ("a", "b", "c")))
    plans = build_plans(cfg, cfg.targets, "r")
    order = stage_order(cfg.targets, cfg.ladder, [cfg.workload])
    assert [(p.label, p.concurrency, p.step, p.index) for p in plans] == [
        (s.target.label, s.value, s.step, s.index) for s in order]
    assert [p.label for p in plans[:6]] == ["a", "b", "c", "b", "c", "a"]  # rotated, not a, b, c at every C
    firsts = {p.label for p in plans if p.index % 3 == 0}
    assert firsts == {"a", "b", "c"}  # every target runs first at some C
    by_step: dict[int, list] = {}
    for p in plans:
        by_step.setdefault(p.step, []).append([repr(r) for _, r in zip(range(4), p.requests_iter())])
    for step, seqs in by_step.items():
        assert len(seqs) == 3 and seqs[0] == seqs[1] == seqs[2], step  # every target the same prompts
    assert by_step[0][0] != by_step[1][0]


def test_configurations_name_the_reference_candidates_and_adaptive_ones():
    cfg = parse('[targets.base]\nurl = "http://a:1"\n[targets.eagle]\nurl = "http://b:1"\n'
                '[targets.auto]\nurl = "http://c:1"\nadaptive = true\n')
    assert configurations(cfg.targets) == {
        "roles": {"baseline": "base", "spec": "eagle"},
        "configurations": {"reference": "base", "candidates": ["eagle", "auto"], "adaptive": ["auto"]}}
    assert configurations(cfg.targets[:1]) == {}  # one target compares nothing
    two = configurations(cfg.targets[:2])
    assert two["roles"] == {"baseline": "base", "spec": "eagle"} and two["configurations"]["adaptive"] == []


def test_simulator_modes_are_checked_against_the_profile():
    cfg = cfgmod.with_overrides(cfgmod.RampConfig(), sim_modes="baseline,spec-adaptive")
    prof = check_modes(cfg)
    assert [prof.is_adaptive(m) for m in cfg.simulator.modes] == [False, True]  # spec-adaptive: an adaptive target
    bad = cfgmod.with_overrides(cfgmod.RampConfig(), sim_modes="baseline,spec-topk9")
    with pytest.raises(LoadgenError) as e:
        check_modes(bad)
    assert str(e.value) == ("--sim-modes: profile pcie-8gpu-eagle3 has no mode 'spec-topk9' (it has: baseline, "
                            "spec, spec-topk4, spec-adaptive, spec-adaptive-hysteresis)")


@pytest.mark.parametrize("toml,args,message", [
    ("", ("--sim-modes", "baseline,spec,spec-topk9"),
     "loadgen: error: --sim-modes: profile pcie-8gpu-eagle3 has no mode 'spec-topk9' (it has: baseline, spec, "),
    ('[simulator]\nmodes = ["baseline", "nope"]\n', (),
     "loadgen: error: bad.toml: simulator.modes: profile pcie-8gpu-eagle3 has no mode 'nope'"),
    ("", ("--sim-modes", "baseline,spec,spec"),
     "loadgen: error: --sim-modes: ['baseline', 'spec', 'spec'] names a mode twice"),
    # Locust reads the file first (its [tool.locust]): the TOML error is its one line
    ('[targets.a]\nurl = "http://127.0.0.1:1"\n[targets.a]\nurl = "http://127.0.0.1:2"\n', (),
     "Cannot declare ('targets', 'a') twice"),
])
def test_bad_modes_or_targets_are_one_line_before_any_simulator(live, tmp_path, toml, args, message):
    (tmp_path / "bad.toml").write_text(toml)
    p = run_locust("--headless", "--config", str(tmp_path / "bad.toml"), *args, cwd=tmp_path, timeout=60)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], p.stderr
    assert lines[0].startswith(message) or not message.startswith("loadgen:"), lines[0]
    assert not (tmp_path / "results").exists()  # no simulator, no stage, no file

"""`loadgen crossover` on a phase-shifting workload over three simulator configurations, one an adaptive mode: every
request is drawn in the phase its send instant falls in, each phase is its own slice in crossover.json with the
adaptive mode's gap to the envelope and its joint interval, and the simulator's own gap beside it.

Whether an interval covers the simulator's gap is a figure of the measurement (docs/guide.md), not asserted here.
The command line's --workload keeps a phases: spec whole beside another workload (cli/crossover.split_workloads)."""

import json

import pytest


MODES = ["baseline", "spec", "spec-adaptive"]
SPEC = "phases:predictable@2s,freetext@2s"
NAMES = ["predictable", "freetext"]


@pytest.fixture(scope="module")
def run(cli, tmp_path_factory):
    d = tmp_path_factory.mktemp("phases")
    # 32-token replies keep a request well under a phase (E2E p99 < 1 s at C=8), so each phase has bins past its
    # transition margin; time-scale 5 as tests/cli/test_configs_cli.py keeps the simulators on their clock
    p = cli("crossover", "--workload", SPEC, "--sim-modes", ",".join(MODES), "--ladder", "8",
            "--duration", "8s", "--warmup", "1s", "--max-tokens", "32", "--sim-time-scale", "5",
            "--out", str(d / "out"), "--no-report")
    assert p.returncode == 0, p.stderr
    return p, json.loads((d / "out" / "run.json").read_text()), json.loads((d / "out" / "crossover.json").read_text())


def test_every_request_is_in_the_phase_of_its_send_instant(run):
    """Requests are binned by their start; the schedule runs from the window's start in 2 s phases, five 0.4 s bins
    each: in a bin of one phase no request of the other phase's workload started. A request drawn in the last
    microseconds of a phase is stamped just after it (the draw comes first): at most one per phase edge."""
    _, doc, _ = run
    for s in doc["stages"]:
        assert set(s["workloads"]) == set(NAMES), s["target"]
        tl = {wl: m["timeline"] for wl, m in s["workloads"].items()}
        b = tl["predictable"]["bin_s"]
        n = len(tl["predictable"]["completed"])
        assert abs(b * 5 - 2.0) < 1e-6
        for i in range(n):
            phase = NAMES[(i // 5) % 2]
            other = NAMES[1 - NAMES.index(phase)]
            started_other = tl[other]["completed"][i]
            assert started_other <= (1 if i % 5 == 0 else 0), (s["target"], i, phase, started_other)
        # each phase's workload did run in its own phases
        for k, wl in enumerate(NAMES):
            assert sum(tl[wl]["completed"][i] for i in range(n) if (i // 5) % 2 == k) > 0, (s["target"], wl)


def test_each_phase_has_the_adaptive_gap_and_the_simulators_own(run):
    p, _, res = run
    for wl in NAMES:
        r = res["configs"][wl]["output_tokens_per_s"]
        assert r["adaptive"] == ["spec-adaptive"]
        at = [a for a in r["at"] if "spec-adaptive" in a["shortfall"]]
        assert [a["concurrency"] for a in at] == [8], wl
        g = at[0]["shortfall"]["spec-adaptive"]
        assert g["delta"] is not None and g["ci_low"] <= g["delta"] <= g["ci_high"], g
        (k,) = r["gap_truth"]
        assert (k["label"], k["at"]) == ("spec-adaptive", 8)
        # checked against the reported gap's own interval
        assert k["covered"] == (g["ci_low"] <= k["true"] <= g["ci_high"]) and k["mark"] == "✓✗"[not k["covered"]]
        assert k["envelope"] in ("baseline", "spec")
        assert f"      {k['mark']} {k['words']}" in p.stdout
    # the alternating load as a whole is compared too, without a steady state to check it against
    assert "gap_truth" not in res["configs"]["all"]["output_tokens_per_s"] or \
        res["configs"]["all"]["output_tokens_per_s"]["gap_truth"] == []

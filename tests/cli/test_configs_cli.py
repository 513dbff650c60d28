"""`loadgen crossover` over three configurations of the embedded simulator (issue 15): the rotated stage order,
the joint analysis of every configuration and its policy, each confirmed switch beside the simulator's own; a
dead candidate is refused before any stage, and a reference that dies is named and the rest compared.

How often a reported switch's interval holds the simulator's own is a property of the measurement, not
asserted here: the two-configuration crossover's coverage is `loadgen bench crossover`'s."""

import json
import time

from loadgen.sim.process import SimProcess

from tests.cli.runner import free_port

MODES = ["baseline", "spec", "spec-topk4"]


def test_three_simulated_configurations_are_compared_jointly(cli, tmp_path):
    out = tmp_path / "x3"
    # C=1 and 30 bracket the model's baseline → spec switch (C≈12.7); at time-scale 5 the simulators keep
    # their model's clock on a busy 2-core host (at 10 one ran 143 forwards behind it at C=30)
    p = cli("crossover", "--sim-modes", ",".join(MODES), "--ladder", "1,30", "--duration", "4s", "--warmup", "1s",
            "--sim-time-scale", "5", "--out", str(out), "--no-report")
    assert p.returncode == 0, p.stderr
    doc = json.loads((out / "run.json").read_text())
    # every configuration once at each C, in the Williams rows' order (no one always first or last)
    assert [(s["target"], s["concurrency"]) for s in doc["stages"]] == [
        ("baseline", 1), ("spec", 1), ("spec-topk4", 1), ("spec", 30), ("spec-topk4", 30), ("baseline", 30)]
    assert doc["run"]["configurations"] == {"reference": "baseline", "candidates": ["spec", "spec-topk4"],
                                            "adaptive": []}
    res = json.loads((out / "crossover.json").read_text())
    r = res["configs"]["chat"]["output_tokens_per_s"]
    assert r["labels"] == MODES and len(r["pairs"]) == 3
    # each C compares the configurations whose stage the analysis kept (a starved simulator's is left out)
    kept = {}
    for s in doc["stages"]:
        if not (s.get("simulator") or {}).get("starved"):
            kept.setdefault(s["concurrency"], set()).add(s["target"])
    assert {a["concurrency"]: set(a["means"]) for a in r["at"]} == kept
    for a in r["at"]:
        # topk=4 trails the others by 12 % at C=1 and 55 % at C=30 in the model: never named the best of several.
        # At C=30 it is never even tied with the best; at C=1 a 4 s window on a busy host can tie all three (seen
        # once in CI's whole suite, beside the vLLM servers): a tie claims nothing, naming it best would be wrong
        if len(a["means"]) > 1:
            assert a["best"] != "spec-topk4", a
            if a["concurrency"] == 30:
                assert "spec-topk4" not in a["leaders"], a
    assert "3 configurations, 90 % joint intervals" in p.stdout
    head = next(line for line in p.stdout.splitlines() if line.strip().startswith("C "))
    assert head.split()[:4] == ["C", *MODES], head
    for text in res["policy"]["chat"].values():
        assert f"  • {text}" in p.stdout
    # beside every confirmed switch, the simulator's own in virtual time for this traffic (the model's
    # baseline → spec switch: C≈12.7), and the line that says whether the reported interval holds it
    confirmed = [w for w in r["switches"] if w["confirmed"] and w["estimate"] is not None]
    assert len(r.get("simulator_truth", [])) == len(confirmed), (confirmed, r.get("simulator_truth"))
    for k in r.get("simulator_truth", []):
        if "baseline → spec" in k["words"]:
            assert k["true"] is not None and 8 < k["true"] < 18, k
        assert f"  {k['mark']} {k['words']}" in p.stdout


def test_a_dead_candidate_is_refused_before_any_stage_and_a_reference_that_dies_is_named_and_the_rest_compared(
        cli, tmp_path):
    """Two real simulators and a URL nobody answers: the run is refused before any stage, in one line naming the
    dead one's label and URL (issue 43: it ran every stage, the dead one's as counted failures, and named it not
    compared). Then three real simulators, the reference's last stage failed as if its server died there: the rest
    of the run is kept."""
    dead = free_port()
    out = tmp_path / "dead"
    with SimProcess(mode="baseline", time_scale=10) as base, SimProcess(mode="spec", time_scale=10) as spec:
        t0 = time.monotonic()
        p = cli("crossover", "--target", f"base={base.url}", "--target", f"eagle={spec.url}",
                "--target", f"gone=http://127.0.0.1:{dead}", "--ladder", "1,4", "--duration", "1s", "--warmup",
                "0.3s", "--max-tokens", "32", "--out", str(out), "--no-report")
        print(f"refused after {time.monotonic() - t0:.1f} s")
        assert p.returncode == 2, p.stderr
        assert p.stderr.splitlines() == [f"loadgen: error: gone at http://127.0.0.1:{dead} does not answer (connection "
                                         "refused): start it first, or give --wait-for-server T to wait for a server "
                                         "still loading"], p.stderr
        assert not (out / "run.json").exists() and p.stdout == ""  # no stage ran, nothing written
        with SimProcess(mode="spec", time_scale=10) as spec2:
            p = cli("crossover", "--target", f"base={base.url}", "--target", f"eagle={spec.url}",
                    "--target", f"eagle2={spec2.url}", "--ladder", "1,4", "--duration", "1s", "--warmup", "0.3s",
                    "--max-tokens", "32", "--out", str(out), "--no-report")
    assert p.returncode == 0, p.stderr
    doc = json.loads((out / "run.json").read_text())
    assert {(s["target"], s["concurrency"]) for s in doc["stages"]} == {(t, c) for t in ("base", "eagle", "eagle2")
                                                                       for c in (1, 4)}

    # the reference's server dies during its C=4 stage: every request there failed
    from loadgen.analysis.compare import run_analysis

    for s in doc["stages"]:
        if s["target"] == "base" and s["concurrency"] == 4:
            s["requests"].update(completed=0, failed=7, failures={"reset": {"count": 7, "first_message": "reset"}})
    res = run_analysis(doc).to_dict()
    r = res["configs"]["chat"]["output_tokens_per_s"]
    assert r["unmeasured"] == {"base": "every request failed at C=4 (reset: reset)"}
    at = {a["concurrency"]: a for a in r["at"]}
    assert set(at[1]["means"]) == {"base", "eagle", "eagle2"} and set(at[4]["means"]) == {"eagle", "eagle2"}
    assert "base is compared only where it was measured" in res["policy"]["chat"]["output_tokens_per_s"]

"""An adaptive configuration in an open loop, against the embedded simulators: with three configurations the rate
analysis holds all of them at once (analysis/rates.py ``configs``), the adaptive one against the envelope of the
fixed ones at each rate with a joint interval, and the simulator's own gap on the very schedule the run sent
beside it (analysis/truth.py)."""

import json
import math

import pytest

from loadgen.analysis.rates import ENVELOPE_METRICS

FIXED = ("baseline", "spec")


@pytest.fixture(scope="module")
def bursty(cli, tmp_path_factory):
    out = tmp_path_factory.mktemp("ao") / "xo"
    p = cli("crossover", "--sim-modes", "baseline,spec,spec-adaptive", "--rate", "6,14", "--arrival", "gamma:2",
            "--workload", "chat", "--duration", "4s", "--warmup", "1s", "--out", str(out))
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads((out / "rates.json").read_text()), p, (out / "report.html").read_text()


def _compared(r: dict) -> list[float]:
    """The rates every configuration's stage is used at: a stage left out (its dispatch lag flagged on a host
    busy with a Locust run at 80 req/s beside it) takes its rate out of the all-at-once comparison."""
    out = [rate for rate in (6.0, 14.0) if not any(x["rate"] == rate for x in r["left_out"].get("chat", []))]
    assert out, r["left_out"]  # nothing compared: this host kept no schedule, the test has nothing to check
    return out


def test_every_rate_holds_the_adaptive_mode_against_the_envelope_of_the_fixed_ones(bursty):
    r, p, _ = bursty
    for name in ENVELOPE_METRICS:
        res = r["configs"]["chat"][name]
        assert res["adaptive"] == ["spec-adaptive"] and not res["higher_is_better"]
        assert [a["concurrency"] for a in res["at"]] == _compared(r)
        for a in res["at"]:
            # the envelope is the best fixed configuration by its mean there (lower is better), never the adaptive
            assert a["envelope_label"] == min(FIXED, key=lambda x: a["means"][x])
            assert a["envelope"] == a["means"][a["envelope_label"]]
            g = a["shortfall"]["spec-adaptive"]
            assert g["against"] == a["envelope_label"]
            assert math.isclose(g["delta"], a["means"]["spec-adaptive"] / a["envelope"] - 1, rel_tol=1e-9)
            assert g["ci_low"] <= g["delta"] <= g["ci_high"]
        # one statement per metric, printed and on the page
        sentence = r["adaptive_sentences"]["chat"]["spec-adaptive"][name]
        assert sentence in p.stdout
        for a in res["at"]:
            assert f"at {a['concurrency']:.3g} req/s {a['shortfall']['spec-adaptive']['delta'] * 100:+.1f} %" in sentence


def test_the_simulators_own_gap_on_this_schedule_lies_in_the_reported_interval(bursty):
    r, p, html = bursty
    assert "candidate, adapts on its own" in html  # the page's run card knows the adaptive configuration
    assert "What speculation did, second by second" in html  # the adaptive stages' seconds, as on a C ladder's page
    for name in ("e2e_planned_mean", "tpot_p50"):
        truth = r["configs"]["chat"][name]["simulator_truth"]
        assert [t["at"] for t in truth] == _compared(r)
        for t in truth:
            # below the adaptive threshold (batch 48; these rates run ~5 and ~12) the adaptive mode is spec, so
            # its true gap to an envelope that spec is on is nil
            assert t["label"] == "spec-adaptive" and t["envelope"] in FIXED
            assert t["covered"], t
            assert t["words"] in p.stdout and t["words"].replace("'", "&#x27;") in html

"""The policy in the engines' own terms (loadgen.analysis.engineterms).

The servers are what loadgen's probe finds: three embedded SGLang simulators (baseline, EAGLE-3 topk=1,
EAGLE-3 topk=4) probed for real, and vLLM / llama.cpp probe dicts of the shape run/probe.py writes. Each
produced setting is read back by the rule its engine applies (SGLang: the largest tier key ≤ the batch
padded up to a captured CUDA-graph size, adaptive_step_router.py; vLLM: inclusive [lo, hi, K] ranges from
1, the previous K in gaps and above, vllm/v1/spec_decode/dynamic/utils.py), so a wrong threshold fails.
"""

from __future__ import annotations

import bisect
import copy
import json

import pytest

from loadgen.analysis.engineterms import Translation, engine_terms, translate
from loadgen.run.probe import probe_sync
from loadgen.sim.process import SimProcess


@pytest.fixture(scope="module")
def sims(live) -> dict[str, dict]:
    """run.json's ``servers`` for the issue's three configurations, from the simulators' own /server_info."""
    out = {}
    for label, mode in (("base", "baseline"), ("eagle_topk1", "spec"), ("eagle_topk4", "spec-topk4")):
        with SimProcess(profile="pcie-8gpu-eagle3", mode=mode, time_scale=50) as sim:
            out[label] = probe_sync(sim.url).to_dict()
    return out


def _steps(*parts):
    """(labels, batch at the step's upper edge) per step, in C order, as the lead's policy dicts."""
    out, prev = [], None
    for i, (labels, batch_to) in enumerate(parts):
        out.append({"labels": list(labels), "batch_from": prev, "batch_to": batch_to,
                    "c_from": None if i == 0 else float(10 * i),
                    "c_to": None if batch_to is None else float(10 * i + 10)})
        prev = batch_to
    return out


def sglang_steps_at(config: str, batch: int, graphs: list[int] | None = None) -> int:
    """SGLang's rule: pad to the next captured CUDA-graph size (when the batch is within them), then the
    largest integer key ≤ it."""
    tiers = {int(k): v["candidate_steps"] for k, v in json.loads(config).items()}
    if graphs and batch <= max(graphs):
        batch = graphs[bisect.bisect_left(graphs, batch)]
    keys = sorted(tiers)
    (steps,) = tiers[keys[max(0, bisect.bisect_right(keys, batch) - 1)]]
    return steps


def vllm_k_at(config: str, batch: int) -> int:
    cfg = json.loads(config)
    rows = cfg["num_speculative_tokens_per_batch_size"]
    assert rows[0][0] == 1 and all(a[1] < b[0] for a, b in zip(rows, rows[1:])), rows  # vLLM's own checks
    assert all(lo <= hi and k >= 0 for lo, hi, k in rows) and cfg["num_speculative_tokens"] > 0
    k = rows[0][2]
    for lo, _hi, kk in rows:
        if lo <= batch:
            k = kk
    return min(k, cfg["num_speculative_tokens"])


def test_sglang_speculation_off_above_the_switch(sims):
    (t,) = engine_terms(_steps((["eagle_topk1"], 37.4), (["base"], None)), sims, "base")
    assert t.engine == "sglang"
    assert json.loads(t.config) == {"1": {"candidate_steps": [2]}, "38": {"candidate_steps": [0]}}
    # the simulator's spec mode is EAGLE-3, 2 steps, topk 1, 3 draft tokens: the launch flags say so
    assert "--speculative-algorithm EAGLE3 --speculative-eagle-topk 1 --speculative-num-steps 2 " \
           "--speculative-num-draft-tokens 3 --speculative-adaptive --speculative-adaptive-config" in t.flags
    assert [sglang_steps_at(t.config, b) for b in (1, 37, 38, 200)] == [2, 2, 0, 0]
    # the simulator caps speculative running requests at 48 (SGLang's default) and the baseline at 512
    assert "caps at 48" in t.caveat and "--adaptive" in t.caveat


def test_sglang_the_tables_direction_baseline_low_spec_high(sims):
    """The issue's table: baseline best below the crossover, topk=1 with overlap above it."""
    tr = translate(_steps((["base"], 19.6), (["eagle_topk1"], None)), sims, "base")
    (t,) = tr.terms
    assert json.loads(t.config) == {"1": {"candidate_steps": [0]}, "20": {"candidate_steps": [2]}}
    assert [sglang_steps_at(t.config, b) for b in (1, 19, 20, 48)] == [0, 0, 2, 2]
    assert tr.cannot == []


def test_sglang_tier_lands_just_above_a_captured_graph_size(sims):
    servers = copy.deepcopy(sims)
    graphs = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48]
    servers["eagle_topk1"]["server_info"]["cuda_graph_bs"] = graphs
    (t,) = engine_terms(_steps((["eagle_topk1"], 37.4), (["base"], None)), servers, "base")
    # 38 cannot be a tier edge: a batch of 33..40 pads to 40; the nearest achievable edge is 41 (after 40)
    assert json.loads(t.config) == {"1": {"candidate_steps": [2]}, "41": {"candidate_steps": [0]}}
    assert [sglang_steps_at(t.config, b, graphs) for b in (32, 33, 40, 41, 48)] == [2, 2, 2, 0, 0]
    assert "41 is the nearest to the measured 38" in t.caveat


def test_sglang_cannot_play_topk4(sims):
    tr = translate(_steps((["eagle_topk4"], 12.0), (["base"], None)), sims, "base")
    assert tr.terms == [] and len(tr.cannot) == 1
    assert "topk=4" in tr.cannot[0] and "only topk=1" in tr.cannot[0]


def test_sglang_three_tiers_of_one_draft_model(sims):
    servers = copy.deepcopy(sims)
    deep = copy.deepcopy(servers["eagle_topk1"])
    deep["server_info"].update(speculative_num_steps=5, speculative_num_draft_tokens=6)
    servers["eagle_deep"] = deep
    (t,) = engine_terms(_steps((["eagle_deep"], 6.5), (["eagle_topk1"], 30.2), (["base"], None)), servers, "base")
    assert json.loads(t.config) == {"1": {"candidate_steps": [5]}, "7": {"candidate_steps": [2]},
                                    "31": {"candidate_steps": [0]}}
    assert "--speculative-num-steps 5 --speculative-num-draft-tokens 6" in t.flags  # the deepest tier sizes it
    assert [sglang_steps_at(t.config, b) for b in (1, 6, 7, 30, 31)] == [5, 5, 2, 2, 0]


def test_sglang_different_draft_models_or_overlap_cannot_share_a_server(sims):
    servers = copy.deepcopy(sims)
    other = copy.deepcopy(servers["eagle_topk1"])
    other["server_info"].update(speculative_num_steps=4, speculative_num_draft_tokens=5,
                                disable_overlap_schedule=True)
    servers["eagle_v1"] = other
    tr = translate(_steps((["eagle_v1"], 6.0), (["eagle_topk1"], 30.0), (["base"], None)), servers, "base")
    assert tr.terms == [] and "differ in overlap" in tr.cannot[0]


def test_a_tie_takes_the_neighbour_and_says_so(sims):
    steps = _steps((["eagle_topk1"], 20.0), (["eagle_topk1", "base"], 30.0), (["base"], None))
    (t,) = engine_terms(steps, sims, "base")
    # the tie continues the speculative region: no switch on a tie, the switch where base alone is best
    assert json.loads(t.config) == {"1": {"candidate_steps": [2]}, "31": {"candidate_steps": [0]}}
    assert "where base tie(s)" in t.caveat
    # a tie after a switch does not switch back (the table: spec and baseline tie again at C=100)
    steps = _steps((["base"], 10.6), (["eagle_topk1"], 36.4), (["eagle_topk1", "base"], None))
    (t,) = engine_terms(steps, sims, "base")
    assert json.loads(t.config) == {"1": {"candidate_steps": [0]}, "11": {"candidate_steps": [2]}}


def test_no_switch_no_running_batch_other_engines(sims):
    one = translate(_steps((["base"], None)), sims, "base")
    assert one.terms == [] and "at every measured C" in one.cannot[0]
    unmeasured = _steps((["eagle_topk1"], 20.0), (["base"], None))
    unmeasured[1]["batch_from"] = unmeasured[0]["batch_to"] = None
    tr = translate(unmeasured, sims, "base")
    assert tr.terms == [] and "not measured" in tr.cannot[0] and "not concurrency" in tr.cannot[0]
    llama = {"base": {"engine": "llama.cpp", "speculative": False, "server_info": {"total_slots": 4}},
             "ngram": {"engine": "llama.cpp", "speculative": True,
                       "server_info": {"speculative": True, "speculative_types": "ngram-simple"}}}
    tr = translate(_steps((["ngram"], 2.0), (["base"], None)), llama, "base")
    assert tr.terms == [] and "llama.cpp" in tr.cannot[0] and "route by load" in tr.cannot[0]
    mixed = {"base": llama["base"], "eagle_topk1": sims["eagle_topk1"]}
    tr = translate(_steps((["eagle_topk1"], 20.0), (["base"], None)), mixed, "base")
    assert tr.terms == [] and "between engines" in tr.cannot[0]


VLLM = {"base": {"engine": "vllm", "speculative": None, "models": ["Qwen/Qwen3-8B"], "server_info": {}},
        "eagle3": {"engine": "vllm", "speculative": None, "models": ["Qwen/Qwen3-8B"], "server_info": {
            "max_num_seqs": 256, "speculative_config": {
                "method": "eagle3", "model": "AngelSlim/Qwen3-8B_eagle3", "num_speculative_tokens": 3}}}}


def test_vllm_draft_tokens_per_batch_size():
    (t,) = engine_terms(_steps((["eagle3"], 37.4), (["base"], None)), VLLM, "base")
    cfg = json.loads(t.config)
    assert cfg == {"method": "eagle3", "model": "AngelSlim/Qwen3-8B_eagle3", "num_speculative_tokens": 3,
                   "num_speculative_tokens_per_batch_size": [[1, 37, 3], [38, 256, 0]]}
    assert [vllm_k_at(t.config, b) for b in (1, 37, 38, 256, 300)] == [3, 3, 0, 0, 0]
    assert t.flags == f"--speculative-config '{t.config}'" and "PIECEWISE" in t.caveat


def test_vllm_without_a_reported_k_leaves_a_marked_placeholder():
    servers = copy.deepcopy(VLLM)
    servers["eagle3"]["server_info"] = {}
    servers["eagle3"]["speculative"] = True
    (t,) = engine_terms(_steps((["eagle3"], 10.0), (["base"], None)), servers, "base")
    assert '"num_speculative_tokens": <K>' in t.config and "[[1, 10, <K>], [11, 1024, 0]]" in t.config
    assert "<K> is the value" in t.caveat


def test_round_trip_and_lines(sims):
    tr = translate(_steps((["eagle_topk1"], 37.4), (["base"], None)), sims, "base")
    again = Translation.from_dict(json.loads(json.dumps(tr.to_dict())))
    assert again == tr
    lines = tr.lines()
    assert lines[0].startswith("sglang: --speculative-adaptive with 2 steps (eagle_topk1) from batch 1; "
                               "speculation off (base) running batch ≥ 38")
    assert any(x.startswith("  config: {\"1\"") for x in lines)
    no = translate(_steps((["eagle_topk4"], 12.0), (["base"], None)), sims, "base")
    assert no.lines() == [f"not in engine terms: {no.cannot[0]}"]


def _at(c, running, cap, at_cap=False, why=""):
    """analysis.serverview's BatchAt as crossover.json holds it (configs.add_batches)."""
    return {"c": c, "running": running, "below": 10, "above": 30, "at_cap": at_cap, "cap": cap, "why": why}


# The policy of a real three-configuration simulator run (loadgen crossover --sim-modes
# baseline,spec,spec-topk4 --ladder 1,5,10,30,100 --duration 4s), as configs.py writes it.
SIM_POLICY = [
    {"labels": ["base"], "c_from": None, "c_to": 10.78, "measured": [1, 5],
     "switch": {"from_label": "base", "to_label": "eagle_topk1", "estimate": 10.78, "ci_low": 8.02,
                "ci_high": 13.24, "low_c": 5, "high_c": 30, "confirmed": True},
     "batch_from": None, "batch_to": _at(10.78, 10.77, 512)},
    {"labels": ["eagle_topk1"], "c_from": 10.78, "c_to": 54.77, "measured": [30, 30], "switch": None,
     "batch_from": _at(10.78, 10.43, 48), "batch_to": _at(54.77, 35.88, 48)},
    {"labels": ["eagle_topk1", "base"], "c_from": 54.77, "c_to": None, "measured": [100, 100], "switch": None,
     "batch_from": _at(54.77, 35.88, 48), "batch_to": None}]


def test_the_policy_as_configs_writes_it(sims):
    (t,) = engine_terms(SIM_POLICY, sims, "base")
    # the speculative side's batch at the switch (10.43 on the server that caps at 48), not the baseline's
    assert json.loads(t.config) == {"1": {"candidate_steps": [0]}, "11": {"candidate_steps": [2]}}
    assert "running batch ≥ 11 (switch measured at a mean running batch of 10.4, at C≈10.8, joint interval " \
           "C=8–13.2)" in t.text
    capped = copy.deepcopy(SIM_POLICY)
    capped[1]["batch_from"] = _at(10.78, 48.0, 48, at_cap=True)
    tr = translate(capped, sims, "base")
    assert tr.terms == [] and "ran at its cap of 48" in tr.cannot[0] and "not a batch-size threshold" in tr.cannot[0]
    gone = copy.deepcopy(SIM_POLICY)
    gone[1]["batch_from"] = _at(10.78, None, 48, why="eagle_topk1's server has no /metrics")
    gone[0]["batch_to"] = _at(10.78, None, 512, why="")
    tr = translate(gone, sims, "base")
    assert tr.terms == [] and "(eagle_topk1's server has no /metrics)" in tr.cannot[0]

"""A profile's modes: pcie-8gpu-eagle3's three measured columns, the adaptive mode, bad modes, and
the simulator's own answer for N configurations (known_best, known_switches)."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys

import pytest

from loadgen.analysis.truth import switch_checked
from loadgen.errors import LoadgenError
from loadgen.sim import known, model, profiles, virtual
from loadgen.sim.process import SimProcess
from tests.sim.helpers import request

PROFILE = "pcie-8gpu-eagle3"
# the issue-15 table: C -> (EAGLE-3 topk=1 overlap, topk=4 no overlap, baseline), output tok/s
TABLE = {1: (86.8, 80.9, 92.7), 2: (145.5, 128.3, 157.7), 5: (279.0, 189.2, 290.8), 10: (428.0, 246.3, 453.2),
         30: (759.3, 313.3, 689.4), 70: (768.6, 349.3, 752.8), 100: (775.0, 353.1, 773.1),
         250: (754.4, 353.8, 718.1)}  # fmt: skip
MODES = ("spec", "spec-topk4", "baseline")


def _columns(fn) -> dict[int, dict[str, float]]:
    return {c: {m: fn(m, c) for m in MODES} for c in TABLE}


def _check_shape(got: dict[int, dict[str, float]]) -> None:
    for c, row in got.items():
        for m, want in zip(MODES, TABLE[c]):
            assert abs(row[m] / want - 1) < 0.15, (c, m, row[m], want)
        assert max(row, key=row.get) != "spec-topk4", (c, row)  # topk=4 is never best
        # baseline best below the crossover (between C=10 and 30), topk=1 spec above it
        assert max(row, key=row.get) == ("baseline" if c <= 10 else "spec"), (c, row)
    for c in (70, 100, 250):  # topk=4 has flattened: about 350 tok/s from C=70 on
        assert abs(got[c]["spec-topk4"] / 350 - 1) < 0.15, (c, got[c])
    assert got[250]["spec-topk4"] < 1.02 * got[70]["spec-topk4"]


def test_three_columns_analytic():
    prof = profiles.load(PROFILE)
    _check_shape(_columns(lambda m, c: model.expected_throughput(prof, m, c)))


def test_three_columns_virtual_time():
    prof = profiles.load(PROFILE)
    _check_shape(_columns(lambda m, c: virtual.simulated_throughput(prof, m, c, prompt_tokens=30, forwards=4000,
                                                                    warmup_forwards=800)))


def test_profile_modes_and_overrides(tmp_path):
    prof = profiles.load(PROFILE)
    assert prof.modes() == ["baseline", "spec", "spec-topk4", "spec-adaptive", "spec-adaptive-hysteresis"]
    assert [prof.is_speculative(m) for m in prof.modes()] == [False, True, True, True, True]
    t4 = prof.for_mode("spec-topk4")
    assert (t4.spec.num_steps, t4.spec.eagle_topk, t4.spec.num_draft_tokens, t4.spec.overlap) == (3, 4, 4, False)
    assert t4.for_mode("spec-topk4") is t4 and t4.cost.cpu_per_request_ms > 0
    assert prof.spec.overlap and prof.cost.cpu_per_request_ms == 0  # the profile's own spec is untouched
    # without overlap the host's work is paid per step: the same tree costs more
    assert model.spec_step_ms(t4.cost, t4.spec, 48) > model.spec_step_ms(
        t4.cost, dataclasses.replace(t4.spec, overlap=True), 48) + 100
    ad = prof.for_mode("spec-adaptive")
    assert prof.is_adaptive("spec-adaptive") and not prof.is_adaptive("spec")
    assert prof.max_running("spec-adaptive") == 512 and prof.max_running("spec") == 48
    assert ad.spec.adaptive_off_batch == 48 and ad.spec.num_steps == prof.spec.num_steps
    assert ad.spec.adaptive_band == 0  # the naive threshold; its hysteresis twin comes back on below 48 - 16
    hy = prof.for_mode("spec-adaptive-hysteresis").spec
    assert (hy.adaptive_off_batch, hy.adaptive_band) == (48, 16) and prof.is_adaptive("spec-adaptive-hysteresis")
    # any profile can carry extra modes; a non-speculative one too
    src = profiles.PROFILE_DIR.joinpath("fast.toml").read_text()
    mine = tmp_path / "mine.toml"
    mine.write_text(src + '\n[modes.wide]\n[modes.wide.spec]\neagle_topk = 4\nnum_draft_tokens = 8\n'
                    '[modes.slow-base]\nspeculative = false\n[modes.slow-base.cost]\nfloor_ms = 9.0\n')
    p = profiles.load(str(mine))
    assert p.modes() == ["baseline", "spec", "wide", "slow-base"]
    assert model.expected_throughput(p, "slow-base", 8) < model.expected_throughput(p, "baseline", 8)
    assert model.expected_throughput(p, "wide", 1) != model.expected_throughput(p, "spec", 1)


@pytest.mark.parametrize("extra, needle", [
    ("[modes.spec]\n", "not baseline or spec"),
    ("[modes.x]\n[modes.x.spec]\nnum_stepz = 3\n", "[modes.x].spec: unknown key(s) num_stepz"),
    ("[modes.x]\n[modes.x.spec]\nnum_draft_tokens = 1\n", "num_draft_tokens >= 2"),
    ("[modes.x]\nadaptive = 1\n", "adaptive must be true or false"),
    ("[modes.x]\n[modes.x.cost]\nfloor_ms = -1.0\n", "non-negative"),
])  # fmt: skip
def test_bad_mode_tables(tmp_path, extra, needle):
    bad = tmp_path / "bad.toml"
    bad.write_text(profiles.PROFILE_DIR.joinpath("fast.toml").read_text() + "\n" + extra)
    with pytest.raises(LoadgenError, match="bad.toml") as err:
        profiles.load(str(bad))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_unknown_mode_is_a_one_line_error(live):
    p = subprocess.run([sys.executable, "-m", "loadgen", "sim", "--profile", "fast", "--mode", "spec-topk4",
                        "--port", "0"], capture_output=True, text=True, timeout=30)  # fmt: skip
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip() == ("loadgen: error: --mode: profile fast has no mode 'spec-topk4' (its modes: baseline, "
                                "spec)")
    with pytest.raises(LoadgenError, match="has no mode 'nope'"):
        SimProcess(profile=PROFILE, mode="nope").start()
    with pytest.raises(LoadgenError, match=r"its modes: baseline, spec, spec-topk4, spec-adaptive"):
        profiles.load(PROFILE).mode("spec-topk8")


def test_expect_prints_a_column_per_mode(live):
    p = subprocess.run([sys.executable, "-m", "loadgen", "sim", "--profile", PROFILE, "--expect", "1,250"],
                       capture_output=True, text=True, timeout=30)  # fmt: skip
    assert p.returncode == 0, p.stderr
    head = next(line for line in p.stdout.splitlines() if line.split()[:1] == ["C"]).split()
    assert head == ["C", "baseline", "spec", "spec-topk4", "spec-adaptive", "spec-adaptive-hysteresis", "spec/base"]
    row = next(line for line in p.stdout.splitlines() if line.split()[:1] == ["250"]).split()
    assert abs(float(row[3]) / 350 - 1) < 0.15


def test_topk4_live_is_speculative_everywhere(live):
    with SimProcess(profile=PROFILE, mode="spec-topk4", time_scale=50, seed=3) as sim:
        async def go():
            gen = await request(sim.url, "/generate", {"text": "Tell me about the sea.", "sampling_params": {
                "max_new_tokens": 40, "ignore_eos": True}})  # fmt: skip
            info = await request(sim.url, "/get_server_info", method="GET")
            prom = await request(sim.url, "/metrics", method="GET")
            return gen.json(), info.json(), prom.body.decode()

        gen, info, prom = asyncio.run(go())
    meta = gen["meta_info"]
    assert meta["completion_tokens"] == 40 and 0 < meta["spec_verify_ct"] < 39
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"]) == (
        3, 4, 4)
    assert info["speculative_algorithm"] == "EAGLE3" and info["speculative_adaptive"] is False
    assert "--mode spec-topk4" in info["launch_command"]
    assert any(line.startswith("sglang:spec_num_steps") and line.endswith(" 3") for line in prom.splitlines())
    assert any(line.startswith("sglang:spec_verify_calls_total") and not line.endswith(" 0")
               for line in prom.splitlines())  # fmt: skip


def test_adaptive_mode_switches_off_at_its_batch(live):
    prof = profiles.load(PROFILE)
    off = prof.for_mode("spec-adaptive").spec.adaptive_off_batch

    def thr(mode, c):
        return virtual.simulated_throughput(prof, mode, c, prompt_tokens=30, forwards=4000, warmup_forwards=800)

    # below its batch it is the spec configuration, step for step; at and above it the baseline's
    assert thr("spec-adaptive", off // 2) == thr("spec", off // 2)
    for c in (3 * off, 250):
        assert abs(thr("spec-adaptive", c) / thr("baseline", c) - 1) < 0.02, c
        assert thr("spec-adaptive", c) < 0.98 * thr("spec", c), c
    # the live server: it says it adapts, and a batch of 80 runs plain decode steps
    from loadgen.sim.closedloop import closed_loop

    with SimProcess(profile=PROFILE, mode="spec-adaptive", time_scale=25) as sim:
        asyncio.run(closed_loop(sim.url, 80, 1, max_tokens=30))

        async def fetch():
            info = await request(sim.url, "/get_server_info", method="GET")
            truth = await request(sim.url, "/loadgen/truth", method="GET")
            return info.json(), truth.json()

        info, truth = asyncio.run(fetch())
    assert info["speculative_adaptive"] is True and info["max_running_requests"] == 512
    assert info["speculative_num_steps"] == 2
    plain = [len(t["steps"]) - 1 - t["verify_ct"] for t in truth]
    assert len(truth) == 80 and sum(p > 0 for p in plain) >= off


SIM = {"profile": PROFILE, "seed": 0, "protocol": "sglang"}
LABELS = {"base": "baseline", "eagle": "spec", "tree": "spec-topk4"}


def test_known_best_small_grid():
    best = known.known_best(SIM, "chat", LABELS, [1, 40], forwards=2500)
    assert set(best) == {1, 40} and all(set(r) == set(LABELS) for r in best.values())
    assert max(best[1], key=best[1].get) == "base" and max(best[40], key=best[40].get) == "eagle"
    assert best[40]["tree"] < 0.6 * best[40]["eagle"]
    with pytest.raises(LoadgenError, match="'tree': profile pcie-8gpu-eagle3 has no mode 'spec-topk8'"):
        known.known_best(SIM, "chat", {**LABELS, "tree": "spec-topk8"}, [1], forwards=500)


def test_known_switches_small_grid():
    sw = [{"from": "base", "to": "eagle", "estimate": 12.0, "ci_low": 8.0, "ci_high": 20.0, "low_c": 5, "high_c": 30},
          {"from": "eagle", "to": "tree", "estimate": 12.0, "ci_low": 8.0, "ci_high": 20.0, "low_c": 5, "high_c": 30},
          {"from": "base", "to": "eagle", "estimate": 3.0, "ci_low": 2.0, "ci_high": 4.0, "low_c": 2, "high_c": 5}]
    got = known.known_switches(SIM, "chat", LABELS, sw, forwards=2500)
    hit, none, missed = got
    assert (hit.from_label, hit.to_label, hit.searched) == ("base", "eagle", (5, 30))
    assert hit.covered and 8 < hit.true < 20
    assert none.true is None and not none.covered
    assert missed.true is None  # the simulator's switch is above 5: nothing in [2, 5]
    k = switch_checked(hit)
    assert k.mark == "✓" and "base → eagle" in k.words and "inside" in k.words and k.label == "base"
    k = switch_checked(none)
    assert k.mark == "✗" and "does not switch eagle → tree between C=5 and 30" in k.words
    with pytest.raises(LoadgenError, match="no simulator mode for target 'other'"):
        known.known_switches(SIM, "chat", LABELS, [{**sw[0], "to": "other"}], forwards=500)


def test_topk4_live_server_serves_every_token(live):
    # its throughput against the model's (flat near 350 tok/s at C=70) is wall-clock: `loadgen bench sim
    # --profile pcie-8gpu-eagle3 --mode spec-topk4 --streams 70` prints it beside the schedule's
    from loadgen.sim.closedloop import closed_loop

    with SimProcess(profile=PROFILE, mode="spec-topk4", time_scale=20.0, seed=11) as sim:
        res = asyncio.run(closed_loop(sim.url, 70, 2, max_tokens=200))
    assert res.output_tokens == 200 * 70 * 2

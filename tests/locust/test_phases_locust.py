"""The Locust ramp runs a phase-shifting workload as `loadgen run` does: its clock starts when the stage's window
opens (locust/live.py anchors it), so each target's window runs the same schedule and is judged phase by phase."""

from helpers import FAST, results, run_locust

NAMES = ["predictable", "freetext"]


def test_the_ramp_s_window_runs_the_schedule_from_its_opening(live, tmp_path):
    (tmp_path / "ramp.toml").write_text("[run]\nmax_tokens = 16\n")
    # FAST's 1 s window in 0.5 s phases: five 0.2 s bins, the first phase in bins 0-2, the second in 3-4
    p = run_locust("--headless", "--config", "ramp.toml", "--ladder", "4", "--workload",
                   "phases:predictable@0.5s,freetext@0.5s", *FAST, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    for s in results(tmp_path / "results" / "ramp")["stages"]:
        assert s["phased"] and set(s["workloads"]) == set(NAMES), s["target"]
        tl = {wl: s["workloads"][wl]["timeline"] for wl in NAMES}
        b = tl["predictable"]["bin_s"]
        for i, started in enumerate(tl["freetext"]["completed"]):
            if (i + 1) * b <= 0.5 + 1e-9:  # wholly inside the first phase: no freetext request began there
                assert started == 0, (s["target"], i, tl)
        assert sum(tl["predictable"]["completed"]) > 0 and sum(tl["freetext"]["completed"]) > 0

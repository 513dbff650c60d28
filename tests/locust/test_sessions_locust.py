"""The Locust ramp holds multi-turn sessions as `loadgen run` does (its users run the same loop): per-turn figures
in each target's stage, adding up to the stage's requests."""

from helpers import FAST, results, run_locust

from tests.cli.test_sessions_cli import check_block


def test_the_locust_ramp_holds_the_same_sessions(live, tmp_path):
    (tmp_path / "ramp.toml").write_text("[run]\nmax_tokens = 16\n")  # a TOML key of the ramp's, not an option
    p = run_locust("--headless", "--config", "ramp.toml", "--ladder", "2", "--turns", "3", "--shared-prefix", "20",
                   *FAST, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    stages = results(tmp_path / "results" / "ramp")["stages"]
    assert [s["target"] for s in stages] == ["baseline", "spec"]
    for s in stages:
        check_block(s, 3)

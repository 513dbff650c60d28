"""`loadgen run` against a thinking simulator (``--reasoning-tokens``): the stage's run.json and run.csv carry time to
first output, reasoning tokens and TPOT per kind; against one that does not think, none of them."""

import csv
import io
import json

from loadgen.sim.process import SimProcess

THINK = 20


def _run(cli, tmp_path, extra_args):
    out = tmp_path / "run.json"
    with SimProcess(mode="baseline", time_scale=20, extra_args=extra_args) as sim:
        p = cli("run", "--url", sim.url, "--protocol", "chat", "--ladder", "2", "--duration", "1s",
                "--warmup", "0.2s", "--max-tokens", "40", "--ignore-eos", "--out", str(out.parent))
    assert p.returncode == 0, p.stderr
    stage = json.loads(out.read_text())["stages"][0]
    row = next(csv.DictReader(io.StringIO((tmp_path / "run.csv").read_text())))
    return stage, row, p.stdout


def test_a_thinking_server_s_stage_has_the_reasoning_figures(cli, tmp_path):
    s, row, out = _run(cli, tmp_path, ["--reasoning-tokens", str(THINK)])
    head = next(line for line in out.splitlines() if line.lstrip().startswith("target"))
    assert "TTFO p50" in head and "reasoning tok" in head  # the terminal's stage table
    done = s["requests"]["completed"]
    assert done > 0 and s["token_counts"] == "exact"
    assert s["reasoning_tokens"]["count"] == done and s["reasoning_tokens"]["min"] == s["reasoning_tokens"]["max"] == THINK
    assert s["ttfo"]["count"] == s["ttft"]["count"] == done and s["ttfo"]["min"] >= s["ttft"]["min"]
    assert s["reasoning_tpot"]["count"] == s["output_tpot"]["count"] == done
    assert float(row["reasoning_tokens_mean"]) == THINK and float(row["ttfo_p50_ms"]) >= float(row["ttft_p50_ms"])


def test_without_reasoning_the_stage_has_none_of_them(cli, tmp_path):
    s, row, out = _run(cli, tmp_path, [])
    assert "TTFO" not in out and "reasoning" not in out
    assert s["requests"]["completed"] > 0
    for name in ("ttfo", "reasoning_tokens", "reasoning_tpot", "output_tpot"):
        assert s[name] == {"count": 0}, name
    assert row["ttfo_p50_ms"] == row["reasoning_tokens_mean"] == ""

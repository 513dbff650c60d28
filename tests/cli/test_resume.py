"""`loadgen crossover --resume` (issue 17, item 3): a run killed (SIGKILL) after a random stage and resumed
gives the uninterrupted run's report; a resume asked differently, or of something that is no loadgen run,
is one line."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from loadgen.run.results import RUN_SCHEMA

from tests.cli.runner import in_process, start, stderr_until

# small: 2 concurrencies x 2 targets, short requests (a stage's users start spread over one request); the
# simulators at 2x, not 5x: the client then keeps up on 2 shared cores (at 5x, C=10 was client-bound and a
# busy machine took a third off one run's figure); freetext, whose verdict is clear (the baseline wins at
# every C, by about a third)
FLAGS = ["--ladder", "1,4", "--duration", "1.5s", "--warmup", "1s", "--seed", "11", "--workload", "freetext",
         "--max-tokens", "64", "--sim-time-scale", "2"]


def stages(out):
    return json.loads((out / "run.json").read_text())["stages"]


def killed_after(out, k: int, timeout=120.0) -> list[dict]:
    """Start the crossover and kill it and its simulators (SIGKILL, the whole process group: a machine that
    went away) as soon as run.json holds ``k`` stages; the stages the file held then."""
    p = subprocess.Popen([sys.executable, "-m", "loadgen", "crossover", *FLAGS, "--no-report", "--out", str(out)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                got = stages(out)
            except (OSError, ValueError, KeyError):
                got = []
            if len(got) >= k:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
                return stages(out)
            assert p.poll() is None, "the run ended before it was killed"
            time.sleep(0.05)
        raise AssertionError(f"no {k} stages in {timeout} s")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


def verdicts(out) -> dict:
    res = json.loads((out / "crossover.json").read_text())
    a = res["workloads"]["freetext"]["output_tokens_per_s"]["analysis"]
    return {"winners": {c["concurrency"]: c["verdict"] for c in a["comparisons"]},
            "crossovers": len(a["crossovers"])}


def test_a_run_killed_after_a_random_stage_and_resumed_reports_as_the_uninterrupted_one(cli, tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    p = cli("crossover", *FLAGS, "--no-report", "--out", str(whole))
    assert p.returncode == 0, p.stderr
    n = len(stages(whole))
    k = random.randint(1, n - 1)
    print(f"killed after stage {k} of {n}")
    before = killed_after(cut, k)
    assert len(before) >= k and not (cut / "crossover.json").exists()
    # the same flags in another order: compared typed, the order does not matter
    pairs = [FLAGS[i:i + 2] for i in range(0, len(FLAGS), 2)]
    r = cli("crossover", "--resume", str(cut), *[x for pair in reversed(pairs) for x in pair])
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("kept from the interrupted run") == len(before)
    doc = json.loads((cut / "run.json").read_text())
    after = doc["stages"]
    # the stages it had, exactly as they were; the rest run in the same places
    assert after[:len(before)] == before
    key = [(s["target"], s["concurrency"], s["stage_index"]) for s in after]
    assert key == [(s["target"], s["concurrency"], s["stage_index"]) for s in stages(whole)]
    assert doc["run"]["resumed"][0]["stages_kept"] == len(before)
    assert doc["run"]["argv"][1:1 + len(FLAGS)] == FLAGS  # the run's own flags: a second resume needs none
    for a, b in zip(after, stages(whole)):
        ta, tb = a["output_tokens_per_s"], b["output_tokens_per_s"]
        print(f"{a['target']:>8} C={a['concurrency']:<3} resumed {ta:7.1f} uninterrupted {tb:7.1f} tok/s "
              f"({(ta / tb - 1) * 100:+.1f} %)" + ("  [kept]" if a in before else ""))
        assert a["requests"]["failed"] == 0
    # every result file from the whole set of stages, the report too; the verdicts the same (the baseline
    # wins freetext by about a third at both C)
    assert verdicts(cut) == verdicts(whole)
    assert verdicts(cut)["winners"] == {1: "baseline", 4: "baseline"}
    assert (cut / "report.html").stat().st_size > 10_000
    csv_rows = (cut / "run.csv").read_text().strip().splitlines()
    assert len(csv_rows) == 1 + n
    tags = [line.split(",")[0] for line in (cut / "run.hlog").read_text().splitlines() if line.startswith("Tag=")]
    assert {t.split("/")[2] for t in tags} == {f"s{i}" for i in range(n)}
    # resumed again, with no flags: the run's own (all kept, the report the same)
    again = cli("crossover", "--resume", str(cut), "--no-report")
    assert again.returncode == 0, again.stderr
    assert stages(cut) == after and verdicts(cut) == verdicts(whole)


def fake_run(path, settings: dict, schema=RUN_SCHEMA, command="crossover"):
    path.mkdir()
    (path / "run.json").write_text(json.dumps({"schema": schema, "run": {"command": command, "settings": settings,
                                                                         "argv": ["crossover"]}, "stages": []}))
    return path


@pytest.mark.parametrize("make, words", [
    (lambda d: d.mkdir(), "not a loadgen run (no run.json in it)"),
    (lambda d: (d.mkdir(), (d / "run.json").write_text('{"rows": []}')), "not a loadgen run (schema loadgen.run/1"),
    (lambda d: fake_run(d, {}, schema="loadgen.run/0"), "written in schema loadgen.run/0"),
    (lambda d: fake_run(d, {}, command="run"), "a `loadgen run` run, not a `loadgen crossover` one"),
    (lambda d: fake_run(d, {"ladder": [1, 5, 10], "seed": 11}), "--ladder: the run had 1,5,10, this invocation 1,5"),
    (lambda d: fake_run(d, {"ladder": [1, 5], "seed": 3}), "--seed: the run had 3, this invocation 11"),
])
def test_a_resume_of_something_else_is_one_line(tmp_path, make, words):
    d = tmp_path / "r"
    make(d)
    p = in_process("crossover", "--resume", str(d), "--ladder", "1,5", "--seed", "11")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and words in p.stderr, p.stderr
    assert p.stderr.startswith("loadgen: error: --resume")


def test_resume_goes_on_where_the_run_was(tmp_path):
    d = fake_run(tmp_path / "r", {"ladder": [1, 5]})
    p = in_process("crossover", "--resume", str(d), "--ladder", "1,5", "--out", str(tmp_path / "elsewhere"))
    assert p.returncode == 2 and "a resumed run goes on where it was" in p.stderr, p.stderr


def test_flags_recorded_under_an_old_name_resume_as_its_flag(tmp_path):
    """A run.json written before the old names went (issue 28) holds them in its argv: --resume reads them as
    their flags (here the recorded ladder is read, and differs from the recorded settings)."""
    d = fake_run(tmp_path / "r", {"ladder": [1, 5]})
    doc = json.loads((d / "run.json").read_text())
    doc["run"]["argv"] = ["crossover", "--concurrency=1,5,10", "--workloads", "code"]
    (d / "run.json").write_text(json.dumps(doc))
    p = in_process("crossover", "--resume", str(d))
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "--ladder: the run had 1,5, this invocation 1,5,10" in p.stderr, p.stderr


def test_credentials_written_masked_are_not_a_difference_and_not_reused(tmp_path):
    """run.json holds a header's value masked: the same flags given again compare equal (here the first
    difference is a later knob); --resume alone, whose recorded flags would send the mask, is refused."""
    d = fake_run(tmp_path / "r", {"ladder": [1, 5], "header": {"Authorization": "***"}, "sim_profile": "other"})
    p = in_process("crossover", "--resume", str(d), "--ladder", "1,5", "--header",
                   "Authorization: Bearer abcdefgh123")
    assert p.returncode == 2 and "--sim-profile: the run had other" in p.stderr, p.stderr
    doc = json.loads((d / "run.json").read_text())
    doc["run"]["argv"] = ["crossover", "--header", "Authorization: ***"]
    (d / "run.json").write_text(json.dumps(doc))
    p = in_process("crossover", "--resume", str(d))
    assert p.returncode == 2 and "its recorded flags hold credentials" in p.stderr, p.stderr


def test_loadgen_run_cut_by_ctrl_c_resumes_and_runs_the_cut_stage_again(cli, tmp_path):
    out = tmp_path / "run.json"
    # the signal lands at the second stage's first progress line (1 s in), 3 s before its window ends: the
    # stage it cuts is the second whatever the host's speed
    flags = ["--ladder", "1,2,3", "--duration", "4s", "--warmup", "0.2s", "--sim-time-scale", "10", "--seed", "5"]
    p = start("run", *flags, "--out", str(out.parent))
    try:
        stderr_until(p, "C=2: ")  # the second stage's first progress line: its signal handler is set
        p.send_signal(signal.SIGINT)
        assert p.wait(60) == 130
    finally:
        p.kill()
        p.communicate()
    cut = json.loads(out.read_text())["stages"]
    assert len(cut) == 2 and cut[1]["cut"]["by"] == "interrupt"
    r = cli("run", "--resume", str(out), timeout=120)  # alone: the run's own flags
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert [(s["concurrency"], s["stage_index"]) for s in doc["stages"]] == [(1, 0), (2, 1), (3, 2)]
    assert doc["stages"][0] == cut[0] and not any(s["incomplete"] for s in doc["stages"])
    assert doc["run"]["resumed"] == [{**doc["run"]["resumed"][0], "stages_kept": 1,
                                      "stages_redone": ["stage 1 baseline at 2"]}]
    assert "C" in r.stdout and (tmp_path / "run.csv").read_text().count("\n") == 4

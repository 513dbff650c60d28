"""`loadgen crossover` as a user runs it: embedded simulators, started servers, --from, errors."""

import json
import re
import shutil
import sys

import pytest

from loadgen.analysis.coverage import why_unusable

from tests.cli.runner import free_port, in_process, nothing_listens

# a started server's stages: four requests a window, each short (32 tokens at time-scale 10): the tests of
# started servers read which server ran which stage and what was left running, not figures
SHORT = ["--requests", "4", "--warmup", "0.5s", "--max-tokens", "32"]


@pytest.fixture(scope="module")
def xo(favoured_module, cli, tmp_path_factory):
    """A run against the embedded simulators, with its report: chat, whose crossover (C≈12 in the model) lies
    between the ladder's C=1 and 30. At time-scale 5: at 10, a host busy on both cores starved the simulators
    at C=30 (143 forwards behind their model, against 0.8 at 5)."""
    out = tmp_path_factory.mktemp("xo") / "xo"
    p = cli("crossover", "--ladder", "1,30", "--duration", "3s", "--warmup", "1s", "--sim-time-scale", "5",
            "--out", str(out))
    assert p.returncode == 0, p.stderr
    return {"out": out, "p": p}


@pytest.fixture(scope="module")
def two(favoured_module, cli, tmp_path_factory):
    """A small run of two workloads against the embedded simulators, for the tests of --from that read what it
    wrote, not its figures: 1 s windows of short requests hold enough of the analysis's bins (four requests
    a window did not)."""
    out = tmp_path_factory.mktemp("two") / "xo"
    p = cli("crossover", "--ladder", "1,4", "--workload", "chat,code", "--duration", "1s", "--warmup", "0.3s",
            "--max-tokens", "32", "--sim-time-scale", "10", "--out", str(out), "--no-report")
    assert p.returncode == 0, p.stderr
    return out


def test_embedded_simulators_then_from(cli, xo, tmp_path):
    out, p = xo["out"], xo["p"]
    doc = json.loads((out / "run.json").read_text())
    assert [(s["target"], s["concurrency"]) for s in doc["stages"]] == [
        ("baseline", 1), ("spec", 1), ("baseline", 30), ("spec", 30)]
    assert doc["run"]["servers"]["spec"]["speculative"] is True
    # the server's own view of every stage (issue 14): SGLang's names, counted at request end, to the token
    for st in doc["stages"]:
        checks = st["server"]["checks"]
        assert st["server"]["engine"] == "sglang" and checks["tokens"]["verdict"] == "agree", checks
        assert checks["acceptance"]["verdict"] == ("equal" if st["target"] == "spec" else "not comparable")
    res = json.loads((out / "crossover.json").read_text())
    comps = res["workloads"]["chat"]["output_tokens_per_s"]["analysis"]["comparisons"]
    assert [c["concurrency"] for c in comps] == [1, 30]
    assert (out / "report.html").stat().st_size > 10_000
    assert "workload chat: output throughput" in p.stdout and "winner" in p.stdout
    # beside the crossover it found (spec loses at 1, wins at 30), the simulator's own for this traffic
    found = res["workloads"]["chat"]["output_tokens_per_s"]
    [k] = found["simulator_truth"]
    assert 5 < k["true"] < 20, k
    assert f"  {k['mark']} the simulator's own crossover for this traffic: C={k['true']:.1f}" in p.stdout
    assert f"own crossover for this traffic: C={k['true']:.1f}" in (out / "report.html").read_text()
    src = tmp_path / "xo"  # a copy: --from writes its analysis into the folder it reads
    shutil.copytree(out, src)
    again = cli("crossover", "--from", str(src), "--no-report")
    assert again.returncode == 0 and again.stdout == p.stdout


def _sim(port):
    return f"{sys.executable} -m loadgen sim --port {port} --time-scale 10 --profile pcie-8gpu-eagle3 --mode"


def _check(doc, p, port):
    """One GPU box: every stage of the baseline, then every stage of the speculative server, nothing left."""
    assert [s["target"] for s in doc["stages"]] == ["baseline", "baseline", "spec", "spec"]
    assert doc["run"]["servers"]["baseline"]["speculative"] is False
    assert doc["run"]["servers"]["spec"]["speculative"] is True
    assert "stopping baseline" in p.stderr
    assert nothing_listens(port)


def test_started_servers_one_at_a_time(cli, tmp_path):
    port = free_port()
    out = tmp_path / "xo"
    url = f"http://127.0.0.1:{port}"
    p = cli("crossover", "--baseline-url", url, "--spec-url", url, "--baseline-start", f"{_sim(port)} baseline",
            "--spec-start", f"{_sim(port)} spec", "--ladder", "1,4", *SHORT, "--out", str(out), "--no-report")
    assert p.returncode == 0, p.stderr
    _check(json.loads((out / "run.json").read_text()), p, port)


def test_config_file_shared_with_locust_starts_servers_and_flags_win(cli, tmp_path):
    port = free_port()
    sim = _sim(port)
    out = tmp_path / "xo"
    cfg = tmp_path / "ramp.toml"
    # 8 requests a window, two stages: the mix's 16 requests hold both of its workloads
    cfg.write_text(f"""
[run]
ladder = [1, 3]
requests = 8
warmup = "0.5s"
workload = "code:1,chat:1"
max_tokens = 40
out = "{tmp_path / 'ignored'}"

[targets.base]
url = "http://127.0.0.1:{port}"
start = "{sim} baseline"
stop_signal = "SIGTERM"

[targets.eagle]
url = "http://127.0.0.1:{port}"
start = "{sim} spec"
health = "/health_generate"

[tool.locust]
headless = true
""")
    p = cli("crossover", "--config", str(cfg), "--ladder", "2", "--out", str(out), "--no-report")
    assert p.returncode == 0, p.stderr
    doc = json.loads((out / "run.json").read_text())
    # --ladder won over the file's; the mix is one workload (one ladder), its requests code and chat;
    # the configurations keep their [targets.*] labels, the first the reference
    assert [(s["target"], s["concurrency"]) for s in doc["stages"]] == [("base", 2), ("eagle", 2)]
    assert doc["run"]["roles"] == {"baseline": "base", "spec": "eagle"}
    assert set().union(*(s["workloads"] for s in doc["stages"])) == {"code", "chat"}
    assert doc["run"]["servers"]["eagle"]["speculative"] is True
    assert "stopping base" in p.stderr
    assert nothing_listens(port)


def test_a_start_command_that_exits_is_one_line(cli, tmp_path):
    """At once (a typo, a missing model): the error's one line alone, nothing measured, nothing started after it.
    After a while: the run has said it waits for the server, and says that nothing was measured before the error."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    at_once = f"{sys.executable} -c 'import sys; sys.exit(4)'"
    p = cli("crossover", "--url", url, "--baseline-start", at_once, "--spec-start", at_once, "--ladder", "1",
            "--out", str(tmp_path / "o"), timeout=120)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "target baseline: start command exited with status 4" in lines[0], \
        p.stderr
    assert json.loads((tmp_path / "o" / "run.json").read_text())["stages"] == []
    later = f"{sys.executable} -c 'import sys, time; time.sleep(1.5); sys.exit(4)'"
    p = cli("crossover", "--url", url, "--baseline-start", later, "--spec-start", at_once, "--ladder", "1",
            "--out", str(tmp_path / "o2"), timeout=120)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and "status 4" in lines[-1] and "Traceback" not in p.stderr, p.stderr
    assert f"loadgen: starting baseline: waiting for {url}/health" in lines, p.stderr
    assert "loadgen: 0 of 2 stages measured before the error" in p.stderr and "stages done" not in p.stderr


def test_errors_are_one_line(tmp_path):
    """Input refused before any server starts or any load is sent: in this process, as loadgen.cli.main."""
    port = free_port()
    cases = [
        (["--baseline-url", "http://127.0.0.1:9"], "give both"),
        (["--from", str(tmp_path / "missing")], "not found"),
        (["--workload", "nosuch", "--ladder", "1"], "nosuch"),
        (["--config", str(tmp_path / "nope.toml")], "config file not found"),
    ]
    bad = tmp_path / "bad.toml"
    bad.write_text('[targets.a]\nurl = "http://127.0.0.1:1"\nstop_signal = "SIGNOPE"\n')
    cases.append((["--config", str(bad)], "targets.a.stop_signal"))
    one = tmp_path / "one.toml"
    one.write_text('[targets.a]\nurl = "http://127.0.0.1:1"\n')
    cases.append((["--config", str(one)], "at least two configurations"))
    u = f"http://127.0.0.1:{port}"
    cases += [
        (["--target", f"a={u}", "--target", f"a={u}"], "label 'a' is given twice"),
        (["--target", f"a={u}"], "--target: at least two configurations"),
        (["--target", "a"], "expected LABEL=URL"),
        (["--target", "a=ftp://x", "--target", f"b={u}"], "is not an http(s) URL"),
        (["--target", f"a={u}", "--target", f"b={u}", "--start", f"c=true"], "'c' names no --target"),
        (["--target", f"a={u}", "--target", f"b={u}", "--adaptive", "z"], "'z' names no configuration"),
        (["--target", f"a={u}", "--baseline-url", u], "not both"),
        (["--target", f"a={u}", "--target", f"b={u}", "--sim-modes", "baseline,spec"], "--sim-modes"),
        (["--sim-modes", "baseline,warp"], "has no mode 'warp'"),
        (["--sim-modes", "baseline,baseline"], "named twice"),
    ]
    for args, words in cases:
        p = in_process("crossover", *args, "--out", str(tmp_path / "o"))
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2, (args, p.stderr)
        assert words in lines[-1] and "Traceback" not in p.stderr, (args, p.stderr)


def test_from_a_cut_run_says_what_was_not_compared(cli, two, tmp_path):
    """A real simulator run, then run.json doctored as if cut before the code workload's speculative stages and
    before the planned C=16 (issue 12: the cut workload read "no difference", the cut ladder "safe everywhere")."""
    out = tmp_path / "xo"
    out.mkdir()
    doc = json.loads((two / "run.json").read_text())
    doc["stages"] = [s for s in doc["stages"] if not (s["target"] == "spec" and "code" in s["workloads"])]
    run = doc["run"]
    run["ladder"] = [1, 4, 16]
    run["planned_stages"] = [{"workload": w, "concurrency": c, "target": t}
                             for w in ("chat", "code") for c in (1, 4, 16) for t in ("baseline", "spec")]
    run["cut"] = {"by": "interrupt", "stages_not_run": 6}
    run["interrupted"] = True
    (out / "run.json").write_text(json.dumps(doc))
    again = cli("crossover", "--from", str(out))
    assert again.returncode == 0, again.stderr
    assert "workload code: NOT COMPARED" in again.stdout
    # the baseline's C=4 may itself be not comparable (1 s windows of 32-token requests on a busy host: its users
    # between requests at the scrapes); what this test reads is the cut plan's words
    assert re.search(r"code: not compared: no concurrency has complete stages of both targets \(baseline: measured "
                     r"C=1(, 4| and not comparable at C=4) and did not run C=16; spec: did not run C=1, 4, 16",
                     again.stdout), again.stdout
    assert "  C=16 not compared: not run" in again.stdout.split("workload code")[0]
    assert "never loses" not in again.stdout and "no difference" not in again.stdout.split("workload code")[1]
    res = json.loads((out / "crossover.json").read_text())
    assert res["coverage"]["code"]["status"] == "not compared" and res["workloads"]["code"] == {}
    assert not any(m["everywhere"] for m in res["workloads"]["chat"].values())
    caveat = res["workloads"]["chat"]["output_tokens_per_s"]["caveat"]
    if any(why_unusable(s) for s in doc["stages"] if s["concurrency"] == 4 and "chat" in s["workloads"]):
        # a busy host (real vLLM beside it): the simulator ran 2 of the 4 at once in chat's C=4 window
        assert caveat.startswith("Measured C=1 of the planned C=1–16; not compared: C=4 (") and \
            "C=16 (not run)" in caveat, caveat
    else:
        assert "Measured C=1–4 of the planned C=1–16; not compared: C=16 (not run)" in caveat, caveat
    html = (out / "report.html").read_text()
    assert '<span class="chip chip-none">not compared</span>' in html


# --- one GPU, one port: --url (or run.url in the TOML) with both start commands -----------------

def test_one_url_with_both_start_commands(cli, tmp_path):
    port = free_port()
    out = tmp_path / "xo"
    p = cli("crossover", "--url", f"http://127.0.0.1:{port}", "--baseline-start", f"{_sim(port)} baseline",
            "--spec-start", f"{_sim(port)} spec", "--ladder", "1,4", *SHORT, "--out", str(out), "--no-report")
    assert p.returncode == 0, p.stderr
    _check(json.loads((out / "run.json").read_text()), p, port)


def test_one_url_in_the_toml(cli, tmp_path):
    port = free_port()
    out = tmp_path / "xo"
    cfg = tmp_path / "one.toml"
    cfg.write_text(f"""
[run]
url = "http://127.0.0.1:{port}"
ladder = [1, 4]
requests = 4
warmup = "0.5s"
max_tokens = 32

[targets.baseline]
start = "{_sim(port)} baseline"

[targets.spec]
start = "{_sim(port)} spec"
""")
    p = cli("crossover", "--config", str(cfg), "--out", str(out), "--no-report")
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
        p = in_process("crossover", *args, "--out", str(tmp_path / "o"))
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2, (args, p.stderr)
        assert words in lines[-1] and "Traceback" not in p.stderr, (args, p.stderr)


def test_a_server_that_never_becomes_healthy_mid_ladder_keeps_what_was_measured(cli, tmp_path):
    """The baseline's stages ran; the speculative server never answers: one line says why, the baseline's
    stages are kept and analysed (the workload "not compared"), the budget bounds the wait, nothing is left."""
    port = free_port()
    out = tmp_path / "xo"
    never = f"{sys.executable} -c 'import time; print(\"loading weights\"); time.sleep(600)'"
    p = cli("crossover", "--url", f"http://127.0.0.1:{port}", "--baseline-start", f"{_sim(port)} baseline",
            "--spec-start", never, "--ladder", "1,2", *SHORT, "--max-run-time", "15s", "--out", str(out),
            "--no-report", timeout=120)
    assert p.returncode == 1, p.stderr
    assert not any(line.startswith("Traceback") for line in p.stderr.splitlines())  # (the server's own log may)
    err = [line for line in p.stderr.splitlines() if "error:" in line]
    assert len(err) == 1 and "spec" in err[0] and "not healthy" in err[0] and "loading weights" in err[0], p.stderr
    # the wait was what the run's budget had left, not the start command's own 900 s
    waited = float(re.search(r"not healthy after ([\d.]+) s", err[0]).group(1))
    assert 0 < waited <= 15, err[0]
    doc = json.loads((out / "run.json").read_text())
    assert [s["target"] for s in doc["stages"]] == ["baseline", "baseline"]
    assert "loadgen: 2 of 4 stages measured before the error" in p.stderr, p.stderr
    assert doc["run"]["cut"]["by"] == "error" and doc["run"]["cut"]["stages_not_run"] == 2
    res = json.loads((out / "crossover.json").read_text())
    assert res["coverage"]["chat"]["status"] == "not compared"
    # the one line of a run with nothing compared, after the error that ended the run (not a second error)
    said = [x for x in p.stderr.splitlines() if "nothing compared" in x]
    assert len(said) == 1 and said[0].startswith("loadgen: nothing compared: "), p.stderr  # not a second error
    assert said[0].endswith("the run was cut by an error with 2 planned stages not run"), said
    assert nothing_listens(port)


def test_from_into_another_out_folder_writes_a_whole_results_folder(cli, two, tmp_path):
    """--from A --out B: the analysis and the report land in B with a copy of the run (the report used to
    fail there, after printing the analysis: B had no run.json); A is left as it was."""
    src = tmp_path / "src"
    shutil.copytree(two, src)
    before = sorted(x.name for x in src.iterdir())
    dst = tmp_path / "dst"
    again = cli("crossover", "--from", str(src / "run.json"), "--out", str(dst))
    assert again.returncode == 0, again.stderr
    assert {"run.json", "run.csv", "run.hlog", "crossover.json", "report.html"} <= {x.name for x in dst.iterdir()}
    assert (dst / "run.json").read_bytes() == (src / "run.json").read_bytes()
    assert json.loads((dst / "crossover.json").read_text()) == json.loads((src / "crossover.json").read_text())
    assert sorted(x.name for x in src.iterdir()) == before


def _minutes(text: str) -> float:
    """Seconds of "40 s" or "2.5 min"."""
    v, unit = text.split()
    return float(v) * (60 if unit == "min" else 1)


def test_the_time_estimate_is_a_range_the_run_falls_inside(xo):
    """Issue 27: the first estimate was 2.4x short and dropped its "or more". Every estimate after the first stage
    is a range with both ends, and the run's actual duration lies inside it (up to the printed precision)."""
    err = xo["p"].stderr
    [total] = re.findall(r"stages done in ([\d.]+ (?:s|min))", err)
    total = _minutes(total)
    first = re.search(r"\d+ stages, estimated (.*)", err).group(1)
    low = re.match(r"(?:at least ([\d.]+ (?:s|min))|about [\d.]+ (?:s|min) \(([\d.]+ (?:s|min)) or more\)) \(request "
                   r"durations are not known", first)  # no upper end before any duration is measured
    assert low and _minutes(low.group(1) or low.group(2)) <= total + 1, first
    lines = re.findall(r"\[(\d+)/\d+\] .*\(elapsed ([\d.]+ (?:s|min)), (.*) left\)", err)
    assert [int(i) for i, _, _ in lines] == [1, 2, 3, 4], err
    for i, elapsed, left in lines[1:]:
        m = re.fullmatch(r"about [\d.]+ (?:s|min) \(([\d.]+)(?: (s|min))?–([\d.]+) (s|min)\)", left)
        assert m, left  # both ends, never "at least" once a duration is known
        lo = float(m.group(1)) * (60 if (m.group(2) or m.group(4)) == "min" else 1)
        hi = float(m.group(3)) * (60 if m.group(4) == "min" else 1)
        e = _minutes(elapsed)
        slack = 3.5  # the printed precision: whole seconds, or a tenth of a minute
        assert e + lo - slack <= total <= e + hi + slack, (i, elapsed, left, total)


def test_refine_measures_inside_the_crossover_and_the_ladder_declares_it(cli, tmp_path):
    """--refine on a ladder of concurrencies: the crossover (C≈12 in the model) lies in the ladder's one gap,
    1-30, so the first stages added are its geometric middle, C=5, for both targets; the next (the budget's
    second) lies in whichever gap then holds most of the interval. The added stages place the crossover; the
    ladder alone declares it (run.ladder stays 1, 30)."""
    out = tmp_path / "xo"
    p = cli("crossover", "--ladder", "1,30", "--duration", "3s", "--warmup", "1s", "--sim-time-scale", "5",
            "--refine", "--refine-budget", "2", "--out", str(out), "--no-report")
    assert p.returncode == 0, p.stderr
    said = [line.split("refining: adding ", 1)[1] for line in p.stderr.splitlines() if "refining: adding" in line]
    assert said[0] == "chat@C=5", said
    added = [int(x.removeprefix("chat@C=")) for line in said for x in line.split(", ")]
    assert len(added) <= 2 and len(set(added)) == len(added), added
    doc = json.loads((out / "run.json").read_text())
    assert doc["run"]["ladder"] == [1, 30]
    ran = sorted((s["concurrency"], s["target"]) for s in doc["stages"])
    assert ran == sorted((c, t) for c in (1, 30, *added) for t in ("baseline", "spec")), ran
    res = json.loads((out / "crossover.json").read_text())
    comps = res["workloads"]["chat"]["output_tokens_per_s"]["analysis"]["comparisons"]
    compared = {c for c in res["coverage"]["chat"]["compared"]}
    assert {c["concurrency"] for c in comps} == compared and set(added) <= compared | {
        s["concurrency"] for s in doc["stages"] if why_unusable(s)}

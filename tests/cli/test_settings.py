"""One definition of every knob (settings/knobs.py): the flags of `loadgen run` and `loadgen crossover`, their
removed old names (each a one-line error naming its flag), the TOML keys crossover reads and the defaults all
come from it (the Locust ramp's options: tests/locust/test_config.py)."""

import argparse
import importlib
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from loadgen.cli import front, main
from loadgen.errors import LoadgenError
from loadgen.settings import config as cfgmod
from loadgen.settings import flags
from loadgen.settings import knobs as K

from tests.cli.runner import in_process

ROOT = Path(__file__).resolve().parents[2]

# Every flag each front had before the one definition (measured on main, 5c03b54): none may go (an old name
# stays registered, as a one-line error naming its flag: RENAMED).
OLD = {
    "run": {"--url", "--protocol", "--model", "--label", "--concurrency", "--duration", "--requests", "--warmup",
            "--max-stage-time", "--max-run-time", "--workload", "--max-tokens", "--prompt-tokens", "--ignore-eos",
            "--seed", "--slo", "--tokenizer", "--header", "--read-timeout", "--processes", "--loop", "--spec-details",
            "--out", "--sim-profile", "--sim-mode", "--sim-time-scale"},
    "crossover": {"--from", "--config", "--out", "--url", "--baseline-url", "--spec-url", "--baseline-start",
                  "--spec-start", "--health-path", "--protocol", "--model", "--header", "--ladder", "--workloads",
                  "--max-tokens", "--prompt-tokens", "--ignore-eos", "--tokenizer", "--duration", "--requests",
                  "--warmup", "--max-stage-time", "--max-run-time", "--seed", "--slo", "--processes",
                  "--read-timeout", "--refine", "--refine-width", "--refine-budget", "--confidence", "--no-report",
                  "--sim-profile", "--sim-time-scale"},
}
# (old name, its flag, a value): the old names are gone (issue 28: no released users), each a one-line error
RENAMED = [("--concurrency", "--ladder", "1,3"), ("--workloads", "--workload", "code"),
           ("--stage-duration", "--duration", "7s"), ("--stage-requests", "--requests", "9")]


def cli_parser(command: str) -> argparse.ArgumentParser:
    """The real subcommand's parser (its module's register)."""
    p = argparse.ArgumentParser(prog=f"loadgen {command}")
    importlib.import_module(f"loadgen.cli.{command}").register(p)
    return p


def strings(p) -> set[str]:
    return {s for a in p._actions for s in a.option_strings} - {"-h", "--help"}


def expected(front_: str) -> set[str]:
    return {s for _, k in K.knobs(front_) for s in (k.flag, *k.renamed)}


def parse(front_: str, argv: list[str]):
    return cli_parser(front_).parse_args(argv)


@pytest.mark.parametrize("command", ["run", "crossover"])
def test_the_commands_have_exactly_the_defined_flags(command):
    got = strings(cli_parser(command))
    assert got == expected(command)
    assert OLD[command] <= got, OLD[command] - got
    assert {"--loop", "--spec-details"} <= strings(cli_parser("crossover"))


@pytest.mark.parametrize("front_", ["run", "crossover"])
@pytest.mark.parametrize("old,new,value", RENAMED)
def test_an_old_name_is_one_line_naming_its_flag_which_works(front_, old, new, value, tmp_path):
    if old not in expected(front_):
        pytest.skip("no such knob on this front")
    for given in ([old, value], [f"{old}={value}"], [old], [new, value, old, value]):
        p = in_process(front_, *given, "--out", str(tmp_path / "o"))
        assert (p.returncode, p.stdout, p.stderr.splitlines()) == (2, "", [f"loadgen: error: {old} was renamed: "
                                                                           f"use {new}"]), given
    name = next(n for n, k in K.knobs(front_) if k.flag == new)
    p = in_process(front_, "--help")
    assert p.returncode == 0 and f" {new}" in p.stdout and old not in p.stdout
    args = parse(front_, [new, value])
    assert not hasattr(args, "renamed")
    assert getattr(flags.typed(args, front_), name) == {"1,3": [1, 3], "7s": 7.0, "9": 9}.get(value, value)


def test_the_flags_a_run_recorded_under_an_old_name_read_as_its_flag():
    """--resume reads the flags run.json recorded (tests/cli/test_resume.py): those of a run before the rename."""
    got = flags.current_names(["--concurrency", "1,2", "--workloads=code", "--label", "x", "--stage-duration=5s",
                               "--stage-requests", "9", "--header=A=--workloads"], "crossover")
    assert got == ["--ladder", "1,2", "--workload=code", "--label", "x", "--duration=5s", "--requests", "9",
                   "--header=A=--workloads"]


def test_a_toml_key_and_its_crossover_flag_set_the_same_setting(tmp_path):
    """`loadgen crossover --config` fills every flag left alone that has a TOML key; the same values as flags
    give the same typed settings."""
    given = [(n, k) for n, k in K.knobs("crossover") if k.toml and k.from_config]
    assert {n for n, _ in given} >= {"ladder", "warmup", "duration", "requests", "seed", "workload", "max_tokens",
                                     "prompt_tokens", "ignore_eos", "tokenizer", "read_timeout", "loop",
                                     "max_stage_time", "max_run_time", "slo", "sim_profile", "sim_time_scale"}
    toml = tmp_path / "x.toml"
    toml.write_text('[run]\nladder = [1, 3]\nwarmup = "3s"\nduration = "7s"\nrequests = 9\nseed = 4\n'
                    'workload = "code"\nmax_tokens = 40\nprompt_tokens = "uniform:10,20"\nignore_eos = true\n'
                    'tokenizer = "tok.json"\nread_timeout = "50s"\nloop = "stamping"\nmax_stage_time = "2m"\n'
                    'max_run_time = "1h"\n[slo]\nttft_ms = 500\n[simulator]\nprofile = "fast"\ntime_scale = 2.5\n')
    from_toml = flags.typed(cli_parser("crossover").parse_args(["--config", str(toml)]), "crossover")
    cfgmod.overlay(from_toml, cfgmod.load(toml), flags.typed_defaults("crossover"), "crossover")
    by_flags = flags.typed(cli_parser("crossover").parse_args([
        "--ladder", "1,3", "--warmup", "3s", "--duration", "7s", "--requests", "9", "--seed", "4", "--workload", "code",
        "--max-tokens", "40", "--prompt-tokens", "uniform:10,20", "--ignore-eos", "--tokenizer", "tok.json",
        "--read-timeout", "50s", "--loop", "stamping", "--max-stage-time", "2m", "--max-run-time", "1h",
        "--slo", "ttft_ms=500", "--sim-profile", "fast", "--sim-time-scale", "2.5", "--config", str(toml)]),
        "crossover")
    for name, _ in given:
        assert getattr(from_toml, name) == getattr(by_flags, name), name
    assert from_toml.ladder == [1, 3] and from_toml.duration == 7.0 and from_toml.slo.ttft_ms == 500


def test_each_default_is_defined_once():
    assert cfgmod.RampConfig().ladder == K.LADDER and cfgmod.SimConf().profile == K.SIM_PROFILE
    assert flags.defaults("crossover")["ladder"] == "1,2,5,10,30,70,100,250"
    assert flags.defaults("run")["ladder"] == "1,2,5,10"
    for f in ("run", "crossover"):
        assert flags.defaults(f)["sim_profile"] == "pcie-8gpu-eagle3"
        assert flags.defaults(f)["read_timeout"] == "120s"
    assert flags.defaults("run")["warmup"] == "5s" and flags.defaults("run")["duration"] == "30s"
    assert (cfgmod.RampConfig().warmup_s, cfgmod.RampConfig().duration_s) == (5.0, 30.0)
    assert flags.defaults("crossover")["sim_time_scale"] == 5.0 and flags.defaults("run")["sim_time_scale"] == 1.0
    assert flags.defaults("run")["out"] == "results/run" and cfgmod.RampConfig().out == "results/ramp"



# Where a front's default differs from the Locust ramp's on purpose (why: at the constant in settings/knobs.py).
FRONT_DEFAULTS = {("run", "ladder"), ("run", "out"), ("crossover", "out"),
                  # crossover's embedded simulators run 5x faster, in shorter windows (None: chosen by the target)
                  ("crossover", "warmup"), ("crossover", "duration"), ("crossover", "sim_time_scale"),
                  ("crossover", "sim_modes")}


def test_the_ramp_config_and_the_stage_plan_are_the_knobs():
    """Every RampConfig field is a knob's (its flag, TOML key, check and help) and every knob with a TOML key names
    one; the knobs a stage carries to the load processes are RampConfig's own (StageKnobs, its base class); a
    knob's default is the same read from a flag left alone as from the TOML config, apart from the listed fronts."""
    from dataclasses import fields

    from loadgen.locust.stageplan import StagePlan

    attrs = {k.attr for _, k in K.knobs() if k.attr}
    own = {"slo", "targets", "simulator", "source", "given"}  # tables of their own ([slo], [targets.X], [simulator])
    ramp = {f.name for f in fields(cfgmod.RampConfig)}
    assert ramp - own == {a for a in attrs if "." not in a}
    assert {"simulator." + f.name for f in fields(cfgmod.SimConf)} == {a for a in attrs if a.startswith("simulator.")}
    assert all(k.attr for _, k in K.knobs() if k.toml and k.toml != "slo")
    stage = {f.name for f in fields(cfgmod.StageKnobs)}
    assert stage < ramp and stage - attrs == {"slo"}
    plan = {f.name for f in fields(StagePlan)}
    assert not plan & stage, "a stage plan carries the knobs as StageKnobs, not as fields of its own"
    cfg = cfgmod.RampConfig()

    def plain(v):
        return list(v) if isinstance(v, tuple) else v

    for f in ("run", "crossover"):
        typed = flags.typed_defaults(f)
        differ = [name for name, k in K.knobs(f) if k.attr and (f, name) not in FRONT_DEFAULTS
                  and plain(cfgmod.get(cfg, k.attr)) != plain(getattr(typed, name))]
        assert not differ, f"{f}: defaults differ from the ramp config's"

def _plan(monkeypatch, tmp_path, argv):
    """The RampPlan a command builds (no simulator, no load: the ramp is replaced by one that is interrupted)."""
    seen = {}
    monkeypatch.setattr(front, "start_simulators", lambda stack, s, modes: [f"http://127.0.0.1:{9 + i}"
                                                                           for i, _ in enumerate(modes)])
    monkeypatch.setattr(front, "probe_ahead", lambda *a: {})

    def drive(plan, writer, **kw):
        seen["plan"] = plan
        writer.finish(interrupted=True)
        return front.Outcome("interrupted", [])

    monkeypatch.setattr(front, "drive", drive)
    assert main([*argv, "--out", str(tmp_path / "o")]) == 130
    return seen["plan"]


def test_crossover_loop_and_spec_details_reach_the_run(monkeypatch, tmp_path):
    argv = ["--ladder", "1,4", "--protocol", "chat", "--loop", "asyncio", "--spec-details"]
    xo = _plan(monkeypatch, tmp_path, ["crossover", *argv])
    assert xo.loop == "asyncio" and [(t.label, t.spec_details) for t in xo.targets] == [
        ("baseline", True), ("spec", True)]
    assert _plan(monkeypatch, tmp_path, ["crossover", "--ladder", "1"]).loop == "auto"
    assert not any(t.spec_details for t in _plan(monkeypatch, tmp_path, ["crossover", "--ladder", "1"]).targets)
    run = _plan(monkeypatch, tmp_path, ["run", *argv])  # built the same way as loadgen run's one target
    assert run.loop == "asyncio" and run.targets[0].spec_details is True
    assert (xo.ladder, xo.warmup_s, xo.duration_s) == ([1, 4], K.SIM_WARMUP_S, K.SIM_DURATION_S)
    assert (run.ladder, run.warmup_s, run.duration_s) == ([1, 4], K.WARMUP_S, K.DURATION_S)


@pytest.mark.parametrize("cmd", [["-m", "loadgen", "run", "--help"], ["-m", "loadgen", "crossover", "--help"],
                                 ["-m", "locust", "-f", "scenarios/ramp.py", "--help"]])
def test_help_works(live, cmd):
    p = subprocess.run([sys.executable, *cmd], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    if "loadgen" in cmd:
        assert "--ladder" in p.stdout and "--workload" in p.stdout and "--loop" in p.stdout
        # the common group leads, its flags in it only once, and examples close the help
        groups = [line for line in p.stdout.splitlines() if line and not line[0].isspace() and line.endswith(":")]
        assert groups[:2] == ["options:", "common:"] and groups[-1] == "examples:", groups
        common = p.stdout.split("common:")[1].split("\n\n")[0]
        first = ["--url"] if "run" in cmd else ["--baseline-url", "--spec-url"]
        for flag in [*first, "--protocol", "--model", "--workload", "--ladder", "--duration", "--out"]:
            assert f"  {flag} " in common and p.stdout.count(f"\n  {flag} ") == 1, flag
        assert p.stdout.count("\n  loadgen ") >= 3  # examples, each a command


@pytest.mark.parametrize("given,message", [
    (["--turns", "0"], "--turns: must be >= 1, got 0"),
    (["--turns", "3", "--rate", "5"], "--turns 3: multi-turn sessions run in a closed loop (--ladder): a later turn "
                                      "is sent when the reply before it has ended, so an open loop (--rate, --trace) "
                                      "could not plan it"),
    (["--shared-prefix", "x"], "--shared-prefix: 'x' is not a whole number of tokens"),
    (["--prefix-ratio", "0.5"], "--prefix-ratio needs --shared-prefix (the share of sessions that carry it)"),
    (["--prefix-ratio", "2", "--shared-prefix", "10"], "--prefix-ratio: must lie in [0, 1], got 2"),
])
@pytest.mark.parametrize("front_", ["run", "crossover"])
def test_a_bad_session_setting_is_one_line_before_any_load(front_, given, message, tmp_path):
    p = in_process(front_, *given, "--ladder", "1", "--out", str(tmp_path / "o"))
    assert (p.returncode, p.stderr.strip().splitlines()) == (2, [f"loadgen: error: {message}"]), p.stderr


def test_session_settings_reach_the_run_from_flags_and_toml(tmp_path):
    toml = tmp_path / "s.toml"
    toml.write_text('[run]\nturns = 4\nthink_time = "1.5s"\nshared_prefix = 64\nprefix_ratio = 0.25\n')
    from_toml = flags.typed(cli_parser("crossover").parse_args(["--config", str(toml)]), "crossover")
    cfgmod.overlay(from_toml, cfgmod.load(toml), flags.typed_defaults("crossover"), "crossover")
    by_flags = flags.typed(cli_parser("crossover").parse_args(
        ["--turns", "4", "--think-time", "1.5s", "--shared-prefix", "64", "--prefix-ratio", "0.25"]), "crossover")
    for s in (from_toml, by_flags):
        spec = front.session_spec(s)
        assert (spec.turns, spec.think_s, spec.shared_prefix, spec.prefix_ratio) == (4, 1.5, 64, 0.25)


def test_a_key_the_file_left_out_keeps_the_front_s_default(tmp_path):
    """crossover's simulators run 5x by default, the Locust ramp's 1x: a config that says nothing of the time scale
    leaves crossover at 5, and one that says 1 gets 1."""
    for text, want in (('[run]\nworkload = "chat"\n', 5.0), ('[simulator]\ntime_scale = 1.0\n', 1.0)):
        toml = tmp_path / "x.toml"
        toml.write_text(text)
        s = flags.typed(cli_parser("crossover").parse_args(["--config", str(toml)]), "crossover")
        cfgmod.overlay(s, cfgmod.load(toml), flags.typed_defaults("crossover"), "crossover")
        assert s.sim_time_scale == want, text


def test_the_simulators_prefix_cache_reaches_them_from_flags_and_toml(monkeypatch, tmp_path):
    """--sim-prefix-cache (TOML simulator.prefix_cache; run, crossover and the Locust ramp) is the embedded
    simulators' --prefix-cache; 0 (the default) starts them without one."""
    toml = tmp_path / "p.toml"
    toml.write_text("[simulator]\nprefix_cache = 4096\n")
    from_toml = flags.typed(cli_parser("crossover").parse_args(["--config", str(toml)]), "crossover")
    cfgmod.overlay(from_toml, cfgmod.load(toml), flags.typed_defaults("crossover"), "crossover")
    by_flags = flags.typed(cli_parser("run").parse_args(["--sim-prefix-cache", "4096"]), "run")
    assert from_toml.sim_prefix_cache == by_flags.sim_prefix_cache == 4096
    assert flags.typed(cli_parser("run").parse_args([]), "run").sim_prefix_cache == 0
    assert cfgmod.load(toml).simulator.prefix_cache == 4096 and cfgmod.SimConf().prefix_cache == 0
    assert cfgmod.with_overrides(cfgmod.RampConfig(), sim_prefix_cache="512").simulator.prefix_cache == 512
    toml.write_text("[simulator]\nprefix_cache = -1\n")
    with pytest.raises(LoadgenError, match="simulator.prefix_cache: must be >= 0"):
        cfgmod.load(toml)
    p = in_process("run", "--sim-prefix-cache", "lots", "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and p.stderr.startswith("loadgen: error: --sim-prefix-cache")
    # start_simulators hands it to every simulator it starts
    from loadgen.sim import process

    started = []
    monkeypatch.setattr(front.os, "sched_getaffinity", lambda pid: {0})  # one core: no pinning of this process
    monkeypatch.setattr(process, "SimProcess", lambda **kw: started.append(kw) or _Started())
    with ExitStack() as stack:
        front.start_simulators(stack, by_flags, ("baseline", "spec"))
    assert [kw["prefix_cache"] for kw in started] == [4096, 4096]


class _Started:
    url = "http://127.0.0.1:9"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


@pytest.mark.parametrize("given,line", [
    (["crossover", "--durtion", "3s"],
     "loadgen: error: unrecognized arguments: --durtion 3s (did you mean: --durtion → --duration)"),
    (["run", "--ladder", "1", "--max-toknes=32"],
     "loadgen: error: unrecognized arguments: --max-toknes=32 (did you mean: --max-toknes → --max-tokens)"),
    (["crossover", "--duration", "-1s"],
     "loadgen crossover: error: argument --duration: expected one argument (a value that starts with '-' is given "
     "as --duration=VALUE)"),
    (["crossover", "--protocol", "openai"],
     "loadgen crossover: error: argument --protocol: invalid choice: 'openai' (choose from 'chat', 'completions', "
     "'sglang')"),
    (["crossover", "--xyzzy"], "loadgen: error: unrecognized arguments: --xyzzy"),
])
def test_a_flag_argparse_refuses_is_one_line_naming_it_and_the_nearest(given, line, tmp_path):
    """argparse's own refusals: one line (its 37-line usage dump before it left out), the nearest flag for a
    misspelt one, how to give a value that starts with '-'."""
    p = in_process(*given, "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and p.stderr.splitlines() == [line] and not (tmp_path / "o").exists()


def test_a_misspelt_toml_key_names_the_nearest(tmp_path):
    (tmp_path / "c.toml").write_text("[run]\nladdr = [1, 2]\n[simulator]\nprofil = \"x\"\n")
    with pytest.raises(LoadgenError, match=r"^c.toml: run.laddr: unknown key: did you mean run.ladder\?$"):
        cfgmod.load(tmp_path / "c.toml")
    (tmp_path / "d.toml").write_text("[simulator]\nprofil = \"x\"\n")
    with pytest.raises(LoadgenError, match=r"^d.toml: simulator.profil: unknown key: did you mean simulator.profile\?$"):
        cfgmod.load(tmp_path / "d.toml")
    (tmp_path / "e.toml").write_text("[run]\nqqq = 1\n")
    with pytest.raises(LoadgenError, match=r"^e.toml: run.qqq: unknown key \(known in \[run\]: ladder, "):
        cfgmod.load(tmp_path / "e.toml")

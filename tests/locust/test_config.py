"""The ramp's config: one-line errors naming the key; plans alternate targets and share prompts."""

import socket

import pytest

from loadgen.errors import LoadgenError
from loadgen.settings import config as cfgmod
from loadgen.locust.conductor import build_plans
from loadgen.locust.stageplan import StagePlan


def parse(text: str):
    import tomllib

    return cfgmod.parse(tomllib.loads(text), "x.toml")


def test_defaults_need_no_file():
    cfg = cfgmod.load(None)
    assert cfg.ladder == (1, 2, 5, 10, 30, 70, 100, 250)
    assert cfg.uses_simulator and cfg.simulator.modes == ("baseline", "spec")


def test_example_config_is_the_defaults():
    from pathlib import Path

    example = cfgmod.load(Path(__file__).resolve().parents[2] / "scenarios" / "example.toml")
    defaults = cfgmod.RampConfig(source=example.source)
    assert example == defaults


@pytest.mark.parametrize("text,message", [
    ("[run]\nladderr = [1]\n", "x.toml: run.ladderr: unknown key"),
    ("[rnu]\nladder = [1]\n", "x.toml: rnu: unknown key"),
    ("[run]\nladder = \"1,x\"\n", "x.toml: run.ladder: '1,x' is not a comma-separated list of whole numbers"),
    ("[run]\nladder = []\n", "x.toml: run.ladder: the list of concurrencies is empty"),
    ("[run]\nladder = [1, 5, 5]\n", "x.toml: run.ladder: concurrencies must increase, got 5 after 5"),
    ("[run]\nladder = [2, 1]\n", "x.toml: run.ladder: concurrencies must increase, got 1 after 2"),
    ("[run]\nladder = [0, 1]\n", "x.toml: run.ladder: concurrencies must be >= 1, got 0"),
    ("[run]\nladder = [1.5]\n", "x.toml: run.ladder: expected whole numbers, got a number (1.5)"),
    ("[run]\nwarmup = true\n", "x.toml: run.warmup: expected a duration"),
    ("[run]\nduration = \"soon\"\n", "x.toml: run.duration: 'soon' is not a duration"),
    ("[run]\nseed = \"1\"\n", "x.toml: run.seed: expected a whole number, got a string ('1')"),
    ("[run]\nmax_tokens = \"lots\"\n", "x.toml: run.max_tokens:"),
    ("[slo]\nttft = 5\n", "x.toml: slo.ttft: unknown key"),
    ("[slo]\nttft_ms = \"5\"\n", "x.toml: slo.ttft_ms: expected a number, got a string"),
    ("[targets.a]\nprotocol = \"chat\"\n", "x.toml: targets.a.url: missing"),
    ("[targets.a]\nurl = \"localhost:8000\"\n", "x.toml: targets.a.url: 'localhost:8000' is not an http(s) URL"),
    ("[targets.a]\nurl = \"http://h:1\"\nprotocol = \"grpc\"\n", "x.toml: targets.a.protocol: unknown protocol 'grpc'"),
    ("[targets.a]\nurl = \"http://h:1\"\nheaders = { X = 1 }\n", "x.toml: targets.a.headers.X: expected a string"),
    ("[targets.a]\nurl = \"http://h:1\"\nmodle = \"m\"\n", "x.toml: targets.a.modle: unknown key"),
    ("[simulator]\nmodes = []\n", "x.toml: simulator.modes: expected a non-empty list"),
    ("[simulator]\nmodes = [\"spec\", \"spec\"]\n", "x.toml: simulator.modes: ['spec', 'spec'] names a mode twice"),
    ("[simulator]\nmodes = [\"a b\"]\n", "x.toml: simulator.modes: expected mode names"),
    ("[simulator]\ntime_scale = 0\n", "x.toml: simulator.time_scale: must be > 0"),
])
def test_bad_values_name_the_key_in_one_line(text, message):
    with pytest.raises(LoadgenError) as e:
        parse(text)
    assert str(e.value).startswith(message), str(e.value)
    assert "\n" not in str(e.value)


def test_unknown_workload_names_the_key():
    cfg = parse("[run]\nworkload = \"nope\"\n")
    with pytest.raises(LoadgenError, match=r"^x.toml: run.workload: unknown workload 'nope'"):
        cfgmod.check_workload(cfg)


def test_unreachable_target_names_key_and_url():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = parse(f"[targets.spec]\nurl = \"http://127.0.0.1:{port}\"\n")
    with pytest.raises(LoadgenError) as e:
        cfgmod.check_reachable(cfg.targets, source=cfg.source)
    assert str(e.value).startswith(f"x.toml: targets.spec.url: cannot reach http://127.0.0.1:{port}: ")


def test_command_line_overrides_the_file():
    cfg = parse("[run]\nladder = [1, 2, 4]\nduration = \"10s\"\n")
    out = cfgmod.with_overrides(cfg, ladder="1,3", duration="2s", warmup="0", seed="7", workload="code")
    assert out.ladder == (1, 3) and out.duration_s == 2.0 and out.warmup_s == 0.0
    assert out.seed == 7 and out.workload == "code"
    assert cfg.ladder == (1, 2, 4)  # the file's config is untouched
    assert cfgmod.with_overrides(cfg, ladder="", seed=None).ladder == (1, 2, 4)  # web UI: empty = not given
    with pytest.raises(LoadgenError, match=r"^--ladder: concurrencies must increase, got 3 after 3$"):
        cfgmod.with_overrides(cfg, ladder="3,3")
    assert cfgmod.with_overrides(cfg, requests="20").duration_s is None


def test_stages_alternate_targets_and_share_the_prompt_seed():
    cfg = parse("[run]\nladder = [1, 2, 5]\nseed = 3\n[targets.base]\nurl = \"http://a:1\"\n"
                "[targets.spec]\nurl = \"http://b:2\"\nprotocol = \"chat\"\n")
    plans = build_plans(cfg, cfg.targets, "r")
    assert [(p.label, p.concurrency) for p in plans] == [
        ("base", 1), ("spec", 1), ("base", 2), ("spec", 2), ("base", 5), ("spec", 5)]
    assert [p.index for p in plans] == list(range(6))
    assert [p.step for p in plans] == [0, 0, 1, 1, 2, 2]
    # Both targets at one concurrency see the same prompts; the next concurrency sees others.
    a, b, c = (list(_take(p.requests_iter(), 5)) for p in plans[:3])
    assert a == b and a != c
    # A plan survives the trip through a Locust message (msgpack-able plain data).
    assert StagePlan.from_msg(plans[1].to_msg()) == plans[1]


def test_a_repeated_ramp_gives_each_pass_its_own_prompts_the_same_for_every_target():
    cfg = parse("[run]\nladder = [1, 2]\nrepeat = 2\n[targets.base]\nurl = \"http://a:1\"\n"
                "[targets.spec]\nurl = \"http://b:2\"\n")
    plans = build_plans(cfg, cfg.targets, "r")
    assert [(p.label, p.concurrency, p.repeat, p.step) for p in plans] == [
        ("base", 1, 0, 0), ("spec", 1, 0, 0), ("base", 2, 0, 1), ("spec", 2, 0, 1),
        ("base", 1, 1, 0), ("spec", 1, 1, 0), ("base", 2, 1, 1), ("spec", 2, 1, 1)]
    assert StagePlan.from_msg(plans[5].to_msg()) == plans[5]
    p0a, p0b, p1a, p1b = (list(_take(plans[i].requests_iter(), 5)) for i in (0, 1, 4, 5))
    assert p0a == p0b and p1a == p1b and p0a != p1a
    assert all(p.repeat is None for p in build_plans(parse("[run]\nladder = [1]\n"), cfg.targets))
    with pytest.raises(LoadgenError, match="repeat"):
        parse("[run]\nrepeat = 0\n")
    with pytest.raises(LoadgenError, match="run.repeat is for a ladder of concurrencies"):
        build_plans(parse("[run]\nrate = [1.0, 2.0]\nrepeat = 2\n"), cfg.targets)


def test_shares_split_the_sequence_without_overlap():
    cfg = parse("[run]\nladder = [4]\n")
    plan = build_plans(cfg, [cfgmod.TargetConf("t", "http://h:1")])[0]
    whole = list(_take(plan.requests_iter(), 12))
    parts = [list(_take(plan.requests_iter(i, 3), 4)) for i in range(3)]
    assert sorted(map(repr, whole)) == sorted(repr(r) for p in parts for r in p)


def _take(it, n):
    for _, x in zip(range(n), it):
        yield x


# --- the options come from the one definition (settings/knobs.py) ------------------------------------------

# Locust's parser is built in a child process: importing locust here would gevent-patch the test process.
LOCUST_PARSE = r"""
import json, sys
from locust.argument_parser import get_empty_argument_parser, setup_parser_arguments
from loadgen.locust import hooks
p = get_empty_argument_parser(add_help=False)
setup_parser_arguments(p)
before = {s for a in p._actions for s in a.option_strings}
hooks.add_options(p)
ns = p.parse_known_args(json.loads(sys.argv[1]))[0]  # (parse_args would also check the config and targets)
print(json.dumps({"added": sorted({s for a in p._actions for s in a.option_strings} - before),
                  "web_ui": sorted(p.args_included_in_web_ui), "keys": list(hooks.OPTION_KEYS),
                  "ns": {k: getattr(ns, k) for k in hooks.OPTION_KEYS}}))
"""
OLD_OPTIONS = {"--ladder", "--warmup", "--stage-duration", "--stage-requests", "--workload", "--seed", "--out",
               "--sim-time-scale", "--sim-profile", "--keep-parts"}  # before the one definition (5c03b54)


def locust_parse(*argv: str, rc: int = 0) -> tuple[dict | None, list[str]]:
    """Locust's parser with loadgen's options, given ``argv``: what it parsed (None when it exited ``rc`` != 0)
    and loadgen's lines on stderr."""
    import json
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", LOCUST_PARSE, json.dumps(argv)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == rc, p.stderr
    return json.loads(p.stdout) if rc == 0 else None, [line for line in p.stderr.splitlines()
                                                        if line.startswith("loadgen:")]


def test_the_locust_options_are_the_defined_ones(live):
    from loadgen.settings import knobs as K

    got, notes = locust_parse("--duration", "7s", "--requests", "9", "--ladder", "1,3", "--workload", "code")
    assert set(got["added"]) == {s for _, k in K.knobs("locust") for s in (k.flag, *k.renamed)}
    assert OLD_OPTIONS <= set(got["added"])  # an old name stays registered, as a one-line error
    # read back from environment.parsed_options by these names; editable in the web UI's form but --keep-parts
    assert got["keys"] == [name for name, _ in K.knobs("locust")]
    assert set(got["keys"]) - {"keep_parts"} <= set(got["web_ui"]) and "keep_parts" not in got["web_ui"]
    assert "renamed" not in got["web_ui"]
    assert got["ns"] == {"ladder": "1,3", "warmup": None, "duration": "7s", "requests": "9", "seed": None,
                         "workload": "code", "out": None, "server_metrics_interval": None,
                         "reset_cache": False, "keep_parts": False, "sim_profile": None,
                         "sim_time_scale": None, "sim_metrics_flavour": None, "sim_faults": None, "sim_prefix_cache": None,
                         "sim_modes": None,
                         "rate": None, "arrival": None, "max_in_flight": None, "max_dispatch_lag": None,
                         "past_saturation": False, "max_run_time": None, "turns": None, "think_time": None, "shared_prefix": None, "prefix_ratio": None}
    assert notes == []
    cfg = cfgmod.with_overrides(cfgmod.RampConfig(), **got["ns"])
    assert (cfg.duration_s, cfg.requests, cfg.ladder, cfg.workload) == (7.0, 9, (1, 3), "code")


def test_each_old_name_is_one_line_naming_its_option(live, tmp_path):
    """The old names are gone (issue 28): on the command line or in the file's [tool.locust] table, one line
    naming the option, exit status 2."""
    for old, new in [("--stage-duration", "--duration"), ("--stage-requests", "--requests"),
                     ("--workloads", "--workload"), ("--concurrency", "--ladder")]:
        assert locust_parse(old, "7", rc=2) == (None, [f"loadgen: error: {old} was renamed: use {new}"])
    (tmp_path / "x.toml").write_text('[tool.locust]\nstage-duration = "7s"\n')
    assert locust_parse("--config", str(tmp_path / "x.toml"), rc=2) == (
        None, ["loadgen: error: --stage-duration was renamed: use --duration"])


# a Locust option's text and the same value in the TOML file, by how the knob is checked
SAMPLES = {"ladder": ("1,3", [1, 3]), "seconds": ("7s", "7s"), "integer": ("3", 3), "word": ("code", "code"),
           "nonblank": ("res/x", "res/x"), "number": ("2.5", 2.5), "string": ("fast", "fast"),
           "boolean": (True, True), "modes": ("baseline,spec-topk4", ["baseline", "spec-topk4"]),
           "rates": ("1,2.5", [1, 2.5]), "arrival": ("gamma:2", "gamma:2"),
           "faults": ("reset=0.1,stall=0.1:2s", "reset=0.1,stall=0.1:2s")}


def _locust_knobs():
    from loadgen.settings import knobs as K

    return K.knobs("locust")


@pytest.mark.parametrize("name,k", _locust_knobs(), ids=[n for n, _ in _locust_knobs()])
def test_a_toml_key_and_its_locust_option_set_the_same_field(name, k):
    # a choice: its last one (the first is the default)
    text, value = SAMPLES[k.check] if k.check != "choice" else (k.check_kw["choices"][-1],) * 2
    table, key = k.toml.split(".")
    from_toml = cfgmod.parse({table: {key: value}}, "x.toml")
    from_option = cfgmod.with_overrides(cfgmod.RampConfig(), **{name: text})
    default = cfgmod.get(cfgmod.RampConfig(), k.attr)
    assert cfgmod.get(from_toml, k.attr) == cfgmod.get(from_option, k.attr) != default


def test_option_errors_name_the_canonical_flag():
    with pytest.raises(LoadgenError, match=r"^--requests: must be >= 1, got 0$"):
        cfgmod.with_overrides(cfgmod.RampConfig(), requests="0")
    with pytest.raises(LoadgenError, match=r"^--duration: 'x' is not a duration"):
        cfgmod.with_overrides(cfgmod.RampConfig(), duration="x")
    with pytest.raises(LoadgenError, match=r"^--seed: expected a whole number, got 'x'$"):
        cfgmod.with_overrides(cfgmod.RampConfig(), seed="x")
    with pytest.raises(LoadgenError, match=r"^--sim-time-scale: expected a number, got 'x'$"):
        cfgmod.with_overrides(cfgmod.RampConfig(), sim_time_scale="x")

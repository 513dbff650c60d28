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
    ("[run]\nladder = \"1,x\"\n", "x.toml: run.ladder: '1,x' is not a list of whole numbers"),
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
    ("[simulator]\nmodes = [\"fast\"]\n", "x.toml: simulator.modes: expected \"baseline\" or \"spec\""),
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
    out = cfgmod.with_overrides(cfg, ladder="1,3", stage_duration="2s", warmup="0", seed="7", workload="code")
    assert out.ladder == (1, 3) and out.duration_s == 2.0 and out.warmup_s == 0.0
    assert out.seed == 7 and out.workload == "code"
    assert cfg.ladder == (1, 2, 4)  # the file's config is untouched
    assert cfgmod.with_overrides(cfg, ladder="", seed=None).ladder == (1, 2, 4)  # web UI: empty = not given
    with pytest.raises(LoadgenError, match=r"^--ladder: concurrencies must increase, got 3 after 3$"):
        cfgmod.with_overrides(cfg, ladder="3,3")
    assert cfgmod.with_overrides(cfg, stage_requests="20").duration_s is None


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


def test_shares_split_the_sequence_without_overlap():
    cfg = parse("[run]\nladder = [4]\n")
    plan = build_plans(cfg, [cfgmod.TargetConf("t", "http://h:1")])[0]
    whole = list(_take(plan.requests_iter(), 12))
    parts = [list(_take(plan.requests_iter(i, 3), 4)) for i in range(3)]
    assert sorted(map(repr, whole)) == sorted(repr(r) for p in parts for r in p)


def _take(it, n):
    for _, x in zip(range(n), it):
        yield x

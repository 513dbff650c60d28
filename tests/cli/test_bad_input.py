"""Bad input to the CLI, one table (issue 43): every case is refused before any request is sent or any server is
started, in one line of stderr that names the flag, the key, the file or the URL at fault, with exit status 2 and no
traceback.

Each case runs ``python -m loadgen`` as a user does, in a folder of its own (its files written there), against a
loopback HTTP server that counts every request it receives and answers each: a request sent before the refusal (a
probe of /v1/models, a /metrics read, a stage) counts. The cases run in parallel, a few at a time, when the first of
them is asked for (a subprocess is a second of CPU, mostly imports).

A target that does not answer is an error before load (exit status 2, one line naming its URL and why): the cases
``dead-*`` and ``not-http`` point at a port where nothing listens, or at a server that does not speak HTTP; the
counting server stands by. Start commands that exit at once, or name no program, are refused before any stage.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.cli.loopback import CountingServer, NotHttpServer
from tests.cli.runner import free_port


@dataclass
class Case:
    id: str
    argv: str
    """The command line after ``loadgen``, split on spaces; {url} the counting server's URL, {dead} a URL where
    nothing listens, {nothttp} one that does not speak HTTP. A word with spaces: given as a list instead."""
    names: tuple[str, ...]
    """What the one line must name (a flag, a key, a file, a URL)."""
    files: dict[str, str] = field(default_factory=dict)
    """File name → text, written in the case's folder (its working directory); {url}, {dead} filled in."""

    def __str__(self) -> str:
        return self.id


XO = "crossover --target a={url} --target b={url}"
TWO = '[targets.a]\nurl = "{url}"\n[targets.b]\nurl = "{url}"\n'
EXIT3 = "sh -c 'exit 3'"

CASES = [
    # --- flags ----------------------------------------------------------------------------------------------
    Case("tie-0", f"{XO} --tie 0", ("--tie",)),
    Case("tie-60%", f"{XO} --tie 60%", ("--tie",)),
    Case("confidence-1.5", f"{XO} --confidence 1.5", ("--confidence",)),
    Case("passes-0", f"{XO} --passes 0", ("--passes",)),
    Case("duration-negative", "run --url {url} --duration -1s", ("--duration",)),
    Case("duration-negative-eq", "run --url {url} --duration=-1s", ("--duration",)),
    Case("duration-0", "run --url {url} --duration 0s", ("--duration",)),
    Case("max-tokens-low-above-high", "run --url {url} --max-tokens uniform:64,32", ("--max-tokens", "64", "32")),
    Case("max-run-time-below-one-round", f"{XO} --ladder 1,2,5 --duration 10s --max-run-time 5s",
         ("--max-run-time",)),
    Case("run-max-run-time-below-one-stage", "run --url {url} --ladder 1,2 --max-run-time 2s", ("--max-run-time",)),
    Case("ladder-0", "run --url {url} --ladder 0", ("--ladder",)),
    Case("ladder-decreasing", "run --url {url} --ladder 5,2", ("--ladder",)),
    Case("protocol-unknown", "run --url {url} --protocol openai", ("--protocol", "openai")),
    Case("flag-misspelt", "run --url {url} --max-toknes 32", ("--max-toknes", "--max-tokens")),
    Case("read-timeout-0", "run --url {url} --read-timeout 0s", ("--read-timeout",)),
    Case("requests-0", "run --url {url} --requests 0", ("--requests",)),
    Case("processes-0", "run --url {url} --processes 0", ("--processes",)),
    Case("slo-unknown-key", "run --url {url} --slo ttft=5", ("--slo", "ttft")),
    Case("header-no-colon", "run --url {url} --header NoColon", ("--header",)),
    Case("label-with-space", ["run", "--url", "{url}", "--label", "a b"], ("--label",)),
    Case("sim-time-scale-0", "run --url {url} --sim-time-scale 0", ("--sim-time-scale",)),
    Case("wait-for-server-not-a-duration", "run --url {url} --wait-for-server soon", ("--wait-for-server",)),
    Case("refine-width-1", f"{XO} --refine-width 1", ("--refine-width",)),
    Case("capacity-width-0.5", f"{XO} --capacity-width 0.5", ("--capacity-width",)),
    Case("server-metrics-interval-negative", f"{XO} --server-metrics-interval=-1", ("--server-metrics-interval",)),
    Case("health-path-no-slash", f"{XO} --health-path health", ("--health-path",)),
    Case("model-empty", [*XO.split(), "--model", ""], ("--model",)),
    Case("max-stage-time-0", f"{XO} --max-stage-time 0s", ("--max-stage-time",)),
    Case("out-empty", [*XO.split(), "--out", ""], ("--out",)),
    Case("rate-0", f"{XO} --rate 0,1", ("--rate",)),
    Case("arrival-unknown", f"{XO} --rate 1,2 --arrival weird", ("--arrival",)),
    Case("turns-on-open-loop", f"{XO} --rate 1,2 --turns 3", ("--turns",)),
    Case("sim-faults-probability", f"{XO} --sim-faults reset=2", ("--sim-faults",)),
    Case("target-once", "crossover --target a={url}", ("--target",)),
    Case("start-names-no-target", f"{XO} --start c=true", ("--start", "'c'")),
    Case("capacity-without-slos", "capacity --target a={url} --target b={url} --rate 1,2", ("--capacity",)),
    Case("capacity-bad-slo", "capacity --target a={url} --target b={url} --rate 1,2 --capacity foo=1",
         ("--capacity", "foo=1")),
    Case("sim-mode-unknown", "run --sim-mode warp", ("--sim-mode", "warp")),
    Case("report-confidence", "report --confidence 1.5 nosuch", ("--confidence",)),
    Case("report-missing-folder", "report nosuch", ("nosuch",)),
    Case("sim-port-negative", "sim --port=-1", ("--port",)),
    Case("sim-profile-unknown", "sim --profile nosuch", ("--profile", "nosuch")),
    # --- URLs -----------------------------------------------------------------------------------------------
    Case("url-no-scheme", "run --url 127.0.0.1:8000", ("--url", "127.0.0.1:8000")),
    Case("url-port-out-of-range", "run --url http://127.0.0.1:99999", ("--url", "99999")),
    Case("target-port-not-a-number", "crossover --target a={url} --target b=http://127.0.0.1:abc",
         ("--target b", "abc")),
    Case("baseline-url-no-scheme", "crossover --baseline-url localhost:8000 --spec-url {url}",
         ("--baseline-url", "localhost:8000")),
    # --- TOML configs ---------------------------------------------------------------------------------------
    Case("toml-misspelt-key", "crossover --config c.toml", ("c.toml", "run.laddr", "run.ladder"),
         {"c.toml": "[run]\nladdr = [1, 2]\n" + TWO}),
    Case("toml-ladder-decreasing", "crossover --config c.toml", ("c.toml", "run.ladder"),
         {"c.toml": "[run]\nladder = [5, 2]\n" + TWO}),
    Case("toml-duration-a-boolean", "crossover --config c.toml", ("c.toml", "run.duration"),
         {"c.toml": "[run]\nduration = true\n" + TWO}),
    Case("toml-read-timeout-0", "crossover --config c.toml", ("c.toml", "run.read_timeout"),
         {"c.toml": "[run]\nread_timeout = 0\n" + TWO}),
    Case("toml-not-toml", "crossover --config c.toml", ("c.toml",), {"c.toml": "[run\n"}),
    Case("toml-missing", "crossover --config nosuch.toml", ("nosuch.toml",)),
    Case("toml-url-no-scheme", "crossover --config c.toml", ("c.toml", "targets.a.url"),
         {"c.toml": '[targets.a]\nurl = "127.0.0.1:8000"\n[targets.b]\nurl = "{url}"\n'}),
    Case("toml-url-bad-port", "crossover --config c.toml", ("c.toml", "targets.b.url", "70000"),
         {"c.toml": '[targets.a]\nurl = "{url}"\n[targets.b]\nurl = "http://127.0.0.1:70000"\n'}),
    Case("toml-protocol-unknown", "crossover --config c.toml", ("c.toml", "targets.a.protocol"),
         {"c.toml": TWO.replace('"\n[targets.b]', '"\nprotocol = "grpc"\n[targets.b]')}),
    Case("toml-one-target", "crossover --config c.toml", ("c.toml", "targets"), {"c.toml": '[targets.a]\nurl = "{url}"\n'}),
    Case("toml-slo-a-string", "crossover --config c.toml", ("c.toml", "slo.ttft_ms"),
         {"c.toml": '[slo]\nttft_ms = "fast"\n' + TWO}),
    Case("toml-stop-signal", "crossover --config c.toml", ("c.toml", "targets.a.stop_signal"),
         {"c.toml": TWO.replace('"\n[targets.b]', '"\nstop_signal = "SIGNOPE"\n[targets.b]')}),
    # --- workload files -------------------------------------------------------------------------------------
    Case("jsonl-missing", "run --url {url} --workload missing.jsonl", ("missing.jsonl",)),
    Case("jsonl-empty", "run --url {url} --workload empty.jsonl", ("empty.jsonl",), {"empty.jsonl": ""}),
    Case("jsonl-malformed", "run --url {url} --workload bad.jsonl", ("bad.jsonl:2",),
         {"bad.jsonl": '{"prompt": "hi"}\nnot json\n'}),
    Case("jsonl-no-prompt", "run --url {url} --workload np.jsonl", ("np.jsonl:1", "prompt"),
         {"np.jsonl": '{"text": "hi"}\n'}),
    Case("sharegpt-no-conversations", f"{XO} --workload sg.json", ("sg.json", "conversations"),
         {"sg.json": '[{"id": 1}]'}),
    Case("sharegpt-no-human-turn", f"{XO} --workload sg.json", ("sg.json", "human"),
         {"sg.json": '[{"conversations": [{"from": "gpt", "value": "x"}]}]'}),
    Case("workload-unknown", "run --url {url} --workload nosuch", ("nosuch",)),
    # --- trace files ----------------------------------------------------------------------------------------
    Case("trace-malformed", f"{XO} --trace t.jsonl", ("t.jsonl:1",), {"t.jsonl": "garbage\n"}),
    Case("trace-missing-field", f"{XO} --trace t.jsonl", ("t.jsonl:1", "output_length"),
         {"t.jsonl": '{"timestamp": 0, "input_length": 10}\n'}),
    Case("trace-empty", f"{XO} --trace t.jsonl", ("t.jsonl",), {"t.jsonl": ""}),
    Case("trace-missing", f"{XO} --trace nosuch.jsonl", ("nosuch.jsonl",)),
    # --- start commands -------------------------------------------------------------------------------------
    Case("start-exits-at-once", ["crossover", "--url", "{dead}", "--baseline-start", EXIT3, "--spec-start", EXIT3,
                                 "--ladder", "1"], ("baseline", "status 3")),
    Case("start-no-such-program", ["crossover", "--url", "{dead}", "--start", "a=no-such-server --port 1",
                                   "--start", f"b={EXIT3}", "--ladder", "1"], ("start command of a", "no-such-server")),
    Case("start-unclosed-quote", ["crossover", "--url", "{dead}", "--start", f"a={EXIT3}", "--start",
                                  "b=sh -c 'exit 3", "--ladder", "1"], ("start command of b",)),
    Case("toml-start-exits-at-once", "crossover --config c.toml --ladder 1", ("base", "status 3"),
         {"c.toml": f'[run]\nurl = "{{dead}}"\n[targets.base]\nstart = "{EXIT3}"\n[targets.spec]\nstart = "{EXIT3}"\n'}),
    # --- targets that do not answer (exit status 2, before any stage) ----------------------------------------
    Case("dead-url", "run --url {dead} --ladder 1", ("{dead}", "does not answer", "--wait-for-server")),
    Case("dead-target", "crossover --target a={url} --target gone={dead} --ladder 1",
         ("gone", "{dead}", "does not answer")),
    Case("dead-capacity", "capacity --target a={dead} --target b={url} --rate 1,2 --capacity ttft_p99=800ms",
         ("{dead}", "does not answer")),
    Case("not-http", "run --url {nothttp} --ladder 1", ("{nothttp}", "not an HTTP server")),
]


def _fill(text: str, urls: dict[str, str]) -> str:
    for k, v in urls.items():
        text = text.replace("{" + k + "}", v)
    return text


@dataclass
class Outcome:
    returncode: int | str
    stderr: str
    requests: list[str]
    urls: dict[str, str]
    seconds: float


def _run(case: Case, folder: Path, loadgen) -> Outcome:
    folder.mkdir(parents=True)
    with CountingServer() as counting, NotHttpServer() as not_http:
        urls = {"url": counting.url, "dead": f"http://127.0.0.1:{free_port()}", "nothttp": not_http.url}
        for name, text in case.files.items():
            (folder / name).write_text(_fill(text, urls))
        argv = case.argv.split() if isinstance(case.argv, str) else case.argv
        t0 = time.monotonic()
        try:
            p = loadgen(*(_fill(a, urls) for a in argv), timeout=60, cwd=folder)
            rc, err = p.returncode, p.stderr
        except Exception as exc:  # subprocess.TimeoutExpired: it went on to run stages
            rc, err = "timeout", str(exc)
        return Outcome(rc, err, list(counting.requests), urls, time.monotonic() - t0)


@pytest.fixture(scope="module")
def outcomes(cli, request, tmp_path_factory):
    """Every selected case run, four at a time (a 2-core host: the subprocesses are CPU, the servers threads)."""
    chosen = {item.callspec.params["case"].id for item in request.session.items
              if item.module is request.module and hasattr(item, "callspec")}
    root = tmp_path_factory.mktemp("bad-input")
    with ThreadPoolExecutor(4) as pool:
        futures = {c.id: pool.submit(_run, c, root / c.id, cli) for c in CASES if c.id in chosen}
        yield {cid: f.result() for cid, f in futures.items()}


def test_the_table_has_the_cases_it_claims():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 40


@pytest.mark.parametrize("case", CASES, ids=str)
def test_bad_input_is_one_line_naming_it_before_any_request(case, outcomes):
    o = outcomes[case.id]
    lines = [line for line in o.stderr.splitlines() if line.strip()]
    print(f"{case.id}: {o.seconds:.1f} s, status {o.returncode}: {o.stderr.strip()}")
    assert o.requests == [], f"sent before the refusal: {o.requests[:5]} ({len(o.requests)}); stderr: {o.stderr}"
    assert o.returncode == 2, o.stderr
    assert "Traceback" not in o.stderr, o.stderr
    assert len(lines) == 1, o.stderr
    assert lines[0].startswith("loadgen") and "error: " in lines[0], lines[0]
    for name in case.names:
        assert _fill(name, o.urls) in lines[0], (name, lines[0])

"""A target that does not answer is an error before load (issue 43): ``loadgen run``, ``crossover`` and
``capacity`` ask each URL they do not start themselves before the first stage and before anything is written; one
where nothing listens, that does not speak HTTP or does not answer in time ends the command with exit status 2 and
one line naming the URL and why, at once. ``--wait-for-server T`` asks again until it answers or T has passed.

What holds whatever the host's speed is asserted (the status, the one line, that no stage ran and nothing was
written); the seconds it took are printed (nothing listening is refused at once: a connection, no wait)."""

from __future__ import annotations

import json
import time
from urllib.parse import urlparse

from loadgen.sim.process import SimProcess

from tests.cli.loopback import CountingServer, DelayedProxy
from tests.cli.runner import free_port, start, stderr_until

HINT = "start it first, or give --wait-for-server T to wait for a server still loading"


def _timed(cli, *args, **kw):
    t0 = time.monotonic()
    p = cli(*args, **kw)
    print(f"loadgen {args[0]}: status {p.returncode} after {time.monotonic() - t0:.1f} s")
    return p


def test_run_against_a_url_where_nothing_listens_is_one_line_and_no_stage(cli, tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    out = tmp_path / "out"
    p = _timed(cli, "run", "--url", url, "--ladder", "1,2", "--out", str(out), timeout=60)
    assert (p.returncode, p.stdout) == (2, ""), p.stderr
    assert p.stderr.splitlines() == [f"loadgen: error: {url} does not answer (connection refused): {HINT}"]
    assert not out.exists()  # no stage ran: no run.json, no table


def test_crossover_against_dead_urls_is_one_line_and_no_stage(cli, tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    out = tmp_path / "xo"
    with CountingServer() as live:
        p = _timed(cli, "crossover", "--baseline-url", live.url, "--spec-url", dead, "--ladder", "1,2", "--out",
                   str(out), timeout=60)
        # the dead one is found by a connection before any request: the live one was asked nothing either
        assert live.requests == []
    assert (p.returncode, p.stdout) == (2, ""), p.stderr
    assert p.stderr.splitlines() == [f"loadgen: error: spec at {dead} does not answer (connection refused): {HINT}"]
    assert not (out / "run.json").exists()
    p = _timed(cli, "crossover", "--target", f"a={dead}", "--target", f"b={dead}", "--out", str(out), timeout=60)
    assert p.returncode == 2 and p.stderr.splitlines() == [f"loadgen: error: a at {dead} does not answer (connection "
                                                           f"refused): {HINT}"], p.stderr


def test_wait_for_server_gives_up_after_its_time_with_the_url_and_why(cli, tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    p = _timed(cli, "run", "--url", url, "--wait-for-server", "1s", "--out", str(tmp_path / "out"), timeout=60)
    assert time.monotonic() - t0 >= 1.0  # it did wait
    assert p.returncode == 2, p.stderr
    assert p.stderr.splitlines() == [f"loadgen: waiting up to 1 s for {url} to answer (connection refused)",
                                     f"loadgen: error: {url} does not answer (connection refused) after waiting 1 s "
                                     "(--wait-for-server)"]
    assert not (tmp_path / "out").exists()


def test_wait_for_server_runs_once_a_late_server_answers(cli, tmp_path):
    """The server starts listening about 1 s after loadgen said it waits for it: with --wait-for-server 30s the run
    goes on once it answers, and its stage runs against it (30 s, not a tight margin: a busy host may take a while
    between the line and the listening; the run ends when it answers, not at 30 s)."""
    port = free_port()
    out = tmp_path / "out"
    with SimProcess(mode="baseline", time_scale=10) as sim:
        up = urlparse(sim.url)
        with DelayedProxy(port, (up.hostname, up.port)) as late:
            p = start("run", "--url", f"http://127.0.0.1:{port}", "--wait-for-server", "30s", "--ladder", "1",
                      "--requests", "4", "--warmup", "0.3s", "--max-tokens", "16", "--out", str(out))
            try:
                head = stderr_until(p, "waiting up to")
                t0 = time.monotonic()
                late.listen_after(1.0)
                stdout, stderr = p.communicate(timeout=120)
            finally:
                p.kill()
            print(f"it listened {late.listening_at - t0:.1f} s after loadgen said it waits; loadgen ended "
                  f"{time.monotonic() - t0:.1f} s after")
    assert p.returncode == 0, head + stderr
    assert head.splitlines()[-1] == f"loadgen: waiting up to 30 s for http://127.0.0.1:{port} to answer (connection " \
                                    "refused)", head
    (stage,) = json.loads((out / "run.json").read_text())["stages"]
    assert stage["requests"]["completed"] >= 4 and stage["requests"]["failed"] == 0

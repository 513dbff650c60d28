"""`loadgen crossover` against the two llama-servers: run.json, crossover.json and report.html
from one baseline-vs-speculative ramp (chat route, predictable and freetext with their own prompt lengths, 40-56 output
tokens, C=2,4, 5 s windows stretched on a slow host: conftest.llama_stretch), then the same analysis again with ``--from``. The speculative server must show what n-gram drafting
does: much more of the output drafted and accepted on copy-style prompts than on open text.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from .checks import (check_counts, check_itl_against_metrics, check_subset_of_server_counters,
                     near_zero_gap_share, pooled_acceptance)
from .runs import LOADGEN, MetricsPoller, client_cpus, run_cli, stretched

pytestmark = pytest.mark.e2e

# no C=1 and 5 s windows: on a slow CI host (135 ms a token) C=1's 3 s windows held no request start
LADDER = [2, 4]
WORKLOADS = ["predictable", "freetext"]


@pytest.fixture(scope="module")
def xo(tmp_path_factory: pytest.TempPathFactory, llama_baseline_server, llama_spec_server, llama_server_cpu,
       llama_stretch) -> dict:
    out = tmp_path_factory.mktemp("xo") / "out"
    cmd = LOADGEN + ["crossover", "--baseline-url", llama_baseline_server.url, "--spec-url", llama_spec_server.url,
                     "--protocol", "chat", "--model", "gemma", "--ladder", ",".join(map(str, LADDER)),
                     "--workloads", ",".join(WORKLOADS), "--max-tokens", "uniform:40,56",
                     "--duration", stretched(5, llama_stretch), "--warmup", "2s", "--seed", "5", "--out", str(out)]
    with contextlib.ExitStack() as stack:
        pollers = {label: stack.enter_context(MetricsPoller(srv.url))
                   for label, srv in (("baseline", llama_baseline_server), ("spec", llama_spec_server))}
        proc = run_cli(cmd, cpus=client_cpus(llama_server_cpu), timeout=400 * llama_stretch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"out": out, "proc": proc, "doc": json.loads((out / "run.json").read_text()),
            "res": json.loads((out / "crossover.json").read_text()), "pollers": pollers, "cpus": client_cpus(llama_server_cpu)}


def _stages(xo: dict, target: str, workload: str | None = None) -> list[dict]:
    return [s for s in xo["doc"]["stages"] if s["target"] == target and (workload is None or workload in s["workloads"])]


def test_outputs_of_the_ramp(xo: dict) -> None:
    out, doc, res = xo["out"], xo["doc"], xo["res"]
    # alternating targets at each concurrency, one ladder per workload
    assert [(list(s["workloads"]), s["concurrency"], s["target"]) for s in doc["stages"]] == [
        ([w], c, t) for w in WORKLOADS for c in LADDER for t in ("baseline", "spec")]
    servers = doc["run"]["servers"]
    assert servers["baseline"]["engine"] == servers["spec"]["engine"] == "llama.cpp", servers
    assert res["baseline"] == "baseline" and res["spec"] == "spec"
    assert sorted(res["workloads"]) == sorted(WORKLOADS)
    for w in WORKLOADS:
        a = res["workloads"][w]["output_tokens_per_s"]["analysis"]
        assert [c["concurrency"] for c in a["comparisons"]] == LADDER
        for c in a["comparisons"]:
            assert c["mean_baseline"] > 0 and c["mean_spec"] > 0 and c["verdict"] in ("tie", "baseline", "spec"), c
        assert res["workloads"][w]["output_tokens_per_s"]["recommendation"]
    html = (out / "report.html").read_text()
    assert len(html) > 10_000 and "predictable" in html and "freetext" in html
    for f in ("run.csv", "run.hlog", "plots/predictable-throughput.png"):
        assert (out / f).stat().st_size > 0, f
    assert "workload predictable: output throughput" in xo["proc"].stdout


def test_from_reproduces_the_analysis(xo: dict, tmp_path: Path) -> None:
    again = tmp_path / "again"
    p = run_cli(LOADGEN + ["crossover", "--from", str(xo["out"]), "--out", str(again), "--no-report"],
                cpus=xo["cpus"], timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout == xo["proc"].stdout
    assert json.loads((again / "crossover.json").read_text()) == xo["res"]


def test_every_stage_has_its_servers_view(xo: dict) -> None:
    """Each stage's server block against the server it ran on: tokens of the requests that ended between
    the scrapes equal the counter, and on the speculative server the drafts equal the requests' timings."""
    for st in xo["doc"]["stages"]:
        sv = st["server"]
        assert sv["available"] and sv["engine"] == "llama.cpp", sv
        assert sv["checks"]["tokens"]["verdict"] == "agree", sv["checks"]["tokens"]
        want = "equal" if st["target"] == "spec" else "not comparable"
        assert sv["checks"]["acceptance"]["verdict"] == want, sv["checks"]["acceptance"]
        assert sv["checks"]["running"]["cap"] == 4 and sv["gauges"]["running"]["max"] <= 4
    html = (xo["out"] / "report.html").read_text()
    assert "What the server ran" in html


def test_token_counts_and_itl_against_each_server(xo: dict) -> None:
    for target in ("baseline", "spec"):
        stages = _stages(xo, target)
        for s in stages:
            check_counts(s)
        check_subset_of_server_counters(stages, xo["pollers"][target])
        check_itl_against_metrics(stages, xo["pollers"][target])


def test_speculation_pays_on_predictable_not_on_freetext(xo: dict) -> None:
    assert all(s["drafts"]["proposed"] == 0 for s in _stages(xo, "baseline"))
    assert xo["pollers"]["baseline"].total().drafted == 0
    spec = {w: {s["concurrency"]: s for s in _stages(xo, "spec", w)} for w in WORKLOADS}
    pred, free = pooled_acceptance(list(spec["predictable"].values()), "predictable"), \
        pooled_acceptance(list(spec["freetext"].values()), "freetext")
    # accept rate = drafts accepted / proposed (llama.cpp's timings.draft_n_accepted / draft_n)
    assert pred["proposed"] > 0 and pred["accept_rate"] > 0.6, pred
    if free["proposed"]:
        assert pred["accept_rate"] > free["accept_rate"], (pred, free)
    # share of the output that came from accepted drafts, over the ladder
    assert pred["accepted_per_token"] > 1.5 * free["accepted_per_token"], (pred, free)
    # loadgen sees the accepted drafts in its own timing: llama.cpp sends the tokens of one
    # verify step as back-to-back events, so each accepted draft token is a chunk gap of ~0
    # (per request exactly so: test_llama_protocol.py). Pooled over the ladder, since a
    # window's chunks and its requests' drafts are different slices of the traffic.
    gaps = {w: sum(near_zero_gap_share(s) * s["chunk_gap"]["count"] for s in spec[w].values())
            / sum(s["chunk_gap"]["count"] for s in spec[w].values()) for w in WORKLOADS}
    assert gaps["predictable"] > gaps["freetext"], gaps
    assert gaps["predictable"] >= 0.5 * pred["accepted_per_token"], (gaps, pred)
    for s in _stages(xo, "baseline"):
        # No drafts, so no bursts: only reads that found two events at once (a busy machine) give a
        # ~0 gap here; measured 0-7.5 % under load, against most of predictable's gaps.
        assert near_zero_gap_share(s) <= 0.10, (s["concurrency"], s["chunk_gap"])

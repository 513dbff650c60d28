"""Three configurations on one ladder against real llama-servers: the baseline and two n-gram drafters of
different draft sizes (``ngramA``: N=6, M=16, the suite's speculative server; ``ngramB``: N=6, M=32), one
``loadgen crossover --target base=… --target ngramA=… --target ngramB=…`` over two workloads of
contrasting acceptance (predictable, freetext), C=2 (one rung: the suite's time on a slow CI host), 6 s windows. crossover.json must compare all three
on each workload, the terminal must name the best (or the tie) at every C, the drafters must accept more
on predictable than on freetext, and the policy must say plainly that llama.cpp has no engine form for it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from loadgen.analysis.engineterms import translate

from .llama import SPEC_NGRAM_N, LlamaServer
from .runs import LOADGEN, client_cpus, run_cli, stretched

pytestmark = pytest.mark.e2e

LADDER = [2]
WORKLOADS = ["predictable", "freetext"]
LABELS = ["base", "ngramA", "ngramB"]
NGRAM_B_M = 32


@pytest.fixture(scope="module")
def ngram_b(llama_binary: Path, llama_model: Path, llama_server_cpu: int | None):
    with LlamaServer(model=llama_model, binary=llama_binary, spec=True, ngram_n=SPEC_NGRAM_N, ngram_m=NGRAM_B_M,
                     cpu=llama_server_cpu, name="ngramB") as srv:
        yield srv


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory, llama_baseline_server, llama_spec_server, ngram_b,
          llama_server_cpu, llama_stretch) -> dict:
    out = tmp_path_factory.mktemp("configs") / "out"
    urls = dict(zip(LABELS, (llama_baseline_server.url, llama_spec_server.url, ngram_b.url)))
    cmd = LOADGEN + ["crossover", *[a for x in LABELS for a in ("--target", f"{x}={urls[x]}")],
                     "--protocol", "chat", "--model", "gemma", "--ladder", ",".join(map(str, LADDER)),
                     "--workloads", ",".join(WORKLOADS), "--max-tokens", "uniform:40,56",
                     "--duration", stretched(6, llama_stretch), "--warmup", "2s", "--seed", "5", "--out", str(out), "--no-report"]
    proc = run_cli(cmd, cpus=client_cpus(llama_server_cpu), timeout=300 * llama_stretch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"out": out, "proc": proc, "doc": json.loads((out / "run.json").read_text()),
            "res": json.loads((out / "crossover.json").read_text())}


def _table(stdout: str, workload: str) -> dict[int, str]:
    """The printed configs table of one workload: C → its 'best' cell (a label, or 'tie: a/b')."""
    lines = stdout.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith(f"workload {workload}:") and "configurations" in x)
    best = {}
    for x in lines[start + 1:]:
        m = re.match(r"\s+(\d+)\s+(?:[\d.]+\s+){3}(tie: \S+|\S+)", x)
        if m:
            best[int(m.group(1))] = m.group(2)
        elif best and not x.startswith("  ") or x.startswith("workload"):
            break
    return best


def test_every_configuration_on_every_workload(three: dict) -> None:
    doc, res = three["doc"], three["res"]
    servers = doc["run"]["servers"]
    assert list(servers) == LABELS and {s["engine"] for s in servers.values()} == {"llama.cpp"}, servers
    assert [servers[x]["speculative"] for x in LABELS] == [False, True, True]
    # every configuration once at each C of each workload
    seen = sorted((list(s["workloads"])[0], s["concurrency"], s["target"]) for s in doc["stages"])
    assert seen == sorted((w, c, x) for w in WORKLOADS for c in LADDER for x in LABELS)
    for w in WORKLOADS:
        r = res["configs"][w]["output_tokens_per_s"]
        assert r["labels"] == LABELS and r["reference"] == "base" and not r.get("excluded"), r.get("excluded")
        assert [a["concurrency"] for a in r["at"]] == LADDER
        for a in r["at"]:
            assert set(a["means"]) == set(LABELS) and all(v > 0 for v in a["means"].values()), a
            assert a["best"] in LABELS if a["best"] else set(a["leaders"]) <= set(LABELS), a
        assert r["policy"] and res["policy"][w]["output_tokens_per_s"].startswith("output")


def test_the_terminal_names_the_best_per_workload(three: dict, capsys) -> None:
    res, stdout = three["res"], three["proc"].stdout
    found = {}
    for w in WORKLOADS:
        best = _table(stdout, w)
        assert sorted(best) == LADDER, (w, best, stdout[-3000:])
        for a in res["configs"][w]["output_tokens_per_s"]["at"]:
            want = a["best"] or "tie: " + "/".join(a["leaders"])
            assert best[a["concurrency"]] == want, (w, a)
        found[w] = best
        means = {a["concurrency"]: a["means"] for a in res["configs"][w]["output_tokens_per_s"]["at"]}
        with capsys.disabled():
            print(f"\n[configs e2e] {w}: best per C {best}; output tok/s "
                  + "; ".join(f"C={c} " + " ".join(f"{x} {m[x]:.1f}" for x in LABELS) for c, m in means.items()))
        assert res["policy"][w]["output_tokens_per_s"] in stdout


def test_drafters_accept_more_on_predictable(three: dict) -> None:
    acc = {}
    for x in ("ngramA", "ngramB"):
        for w in WORKLOADS:
            st = [s for s in three["doc"]["stages"] if s["target"] == x and list(s["workloads"]) == [w]]
            proposed = sum(s["drafts"]["proposed"] for s in st)
            accepted = sum(s["drafts"]["accepted"] for s in st)
            acc[x, w] = accepted / proposed if proposed else 0.0
        assert acc[x, "predictable"] > 0.6 and acc[x, "predictable"] > acc[x, "freetext"], acc
    assert all(s["drafts"]["proposed"] == 0 for s in three["doc"]["stages"] if s["target"] == "base")


def test_the_policy_has_no_llama_cpp_form(three: dict) -> None:
    res, servers = three["res"], three["doc"]["run"]["servers"]
    for w in WORKLOADS:
        policy = res["configs"][w]["output_tokens_per_s"]["policy"]
        steps = [{"labels": p["labels"], "c_from": p["c_from"], "c_to": p["c_to"], "batch_from": None,
                  "batch_to": None} for p in policy]
        tr = translate(steps, servers, "base")
        assert tr.terms == [] and len(tr.cannot) == 1, tr
        assert ("llama.cpp has no load-dependent" in tr.cannot[0]) == (len({tuple(p["labels"]) for p in policy}) > 1)

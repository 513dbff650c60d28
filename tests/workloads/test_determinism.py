"""Same seed, same bytes; different seed, different requests; every request keeps its label."""

from __future__ import annotations

import hashlib
import pickle
import subprocess
import sys
from collections import Counter

import pytest

from loadgen.workloads import Length, Lengths, resolve

BUILTINS = ("code", "chat", "predictable", "freetext")

MIX = "code:1,chat:1,predictable:1,freetext:1"
SHAPED = Lengths(prompt_tokens=Length.parse("uniform:50,400"), output_tokens=Length.parse("normal:128,32"))


@pytest.mark.parametrize("spec", [*BUILTINS, MIX])
@pytest.mark.parametrize("lengths", [None, SHAPED], ids=["natural", "shaped"])
def test_same_seed_same_bytes_and_seeds_differ(spec: str, lengths: Lengths | None, wl) -> None:
    take, dumps = wl.take, wl.dumps
    first = dumps(take(resolve(spec, lengths), 7, 500))
    again = dumps(take(resolve(spec, lengths), 7, 500))
    other = dumps(take(resolve(spec, lengths), 8, 500))
    assert first == again
    assert first != other


def test_identical_across_processes(live, wl) -> None:
    # A fresh interpreter with another hash seed: nothing may depend on hash() or import order.
    code = (
        "import hashlib, itertools, orjson; from loadgen.workloads import resolve, Lengths, Length;"
        f"w = resolve({MIX!r}, Lengths(prompt_tokens=Length.parse('uniform:50,400'), output_tokens=Length.parse('normal:128,32')));"
        "print(hashlib.sha256(b'\\n'.join(orjson.dumps(r) for r in itertools.islice(w.requests(7), 500))).hexdigest())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=wl.repo,
        env={"PYTHONHASHSEED": "12345", "PYTHONPATH": str(wl.repo), "PATH": "/usr/bin:/bin"},
    )
    here = hashlib.sha256(wl.dumps(wl.take(resolve(MIX, SHAPED), 7, 500))).hexdigest()
    assert out.stdout.strip() == here


def test_mix_keeps_labels_and_weights(wl) -> None:
    reqs = wl.take(resolve("code:3,chat:1"), 0, 4000)
    counts = Counter(r.workload for r in reqs)
    assert set(counts) == {"code", "chat"}
    assert 0.72 < counts["code"] / len(reqs) < 0.78
    # The code requests of a mix are a plain code stream, not a resampled one.
    assert all((r.prompt is None) == (r.workload == "chat") for r in reqs)


@pytest.mark.parametrize("name", BUILTINS)
def test_builtins_have_fifty_distinct_prompts(name: str, wl) -> None:
    reqs = wl.take(resolve(name), 0, 600)
    distinct = {r.prompt if r.prompt is not None else tuple(m["content"] for m in r.messages) for r in reqs}
    assert len(distinct) >= 50
    assert all(r.workload == name and r.max_tokens > 0 for r in reqs)


def test_sampling_matches_category(wl) -> None:
    for name in ("code", "chat", "predictable"):
        assert all(r.temperature == 0.0 for r in wl.take(resolve(name), 0, 200))
    assert all(r.temperature > 0 for r in wl.take(resolve("freetext"), 0, 200))


def test_pickled_workload_gives_the_same_stream(wl) -> None:
    # `loadgen run --processes N` ships the workload to worker processes by pickling it.
    workload = resolve(MIX, SHAPED)
    clone = pickle.loads(pickle.dumps(workload))
    assert wl.dumps(wl.take(clone, 3, 200)) == wl.dumps(wl.take(workload, 3, 200))

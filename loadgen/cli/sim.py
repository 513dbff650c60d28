"""``loadgen sim``: serve the simulator, or print a profile's expected table (--expect)."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from loadgen.errors import LoadgenError
from loadgen.sim import calibrate, profiles, prom


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default="pcie-8gpu-eagle3", help="built-in name or a .toml path")
    p.add_argument("--mode", default="baseline",
                   help="baseline, spec, or another of the profile's [modes.*] (e.g. spec-topk4, spec-adaptive)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000, help="0 picks a free port")
    p.add_argument("--time-scale", type=float, default=1.0, help="run the same schedule X times faster")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-running-requests", type=int, default=0, help="default: the profile's (48 under spec)")
    p.add_argument("--max-queued-requests", type=int, default=None)
    p.add_argument("--incremental-streaming-output", action="store_true")
    p.add_argument("--stream-shape", choices=("step", "burst"), default="step",
                   help="step: one event per step with all its tokens (SGLang); burst: one event per token, "
                        "a step's tokens written back to back (llama.cpp's accepted drafts)")
    p.add_argument("--metrics-flavour", choices=prom.METRICS_FLAVOURS, default=prom.METRICS_FLAVOURS[0],
                   help="whose /metrics names: sglang (counters move when a request ends; POST /flush_cache) or "
                        "vllm (vllm: names, counters move per step; POST /reset_prefix_cache)")
    p.add_argument("--speculative-algorithm", default=None, help="implies --mode spec")
    p.add_argument("--speculative-num-steps", type=int, default=None)
    p.add_argument("--speculative-eagle-topk", type=int, default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    p.add_argument("--speculative-adaptive", action="store_true", help="speculation off at large batches")
    p.add_argument("--faults", default=None, metavar="SPEC",
                   help="inject faults, each a per-request probability seeded by --seed: reset=P, http503=P, "
                        "http500=P, http429=P, error_event=P, malformed=P, stall=P:D, slow_headers=P:D, "
                        "truncate=P, and die_after=N, hang_after=N (docs/simulator.md, Faults)")
    p.add_argument("--reasoning-tokens", type=int, default=0, metavar="N",
                   help="chat streams each request's first N output tokens as reasoning_content deltas, then the "
                        "answer as content, as a reasoning model behind a reasoning parser (usage counts them)")
    p.add_argument("--prefix-cache", type=int, default=None, metavar="TOKENS",
                   help="keep a prefix cache of this many tokens: a prompt's cached head is not prefilled again "
                        "(SGLang's radix cache); 0 = none (default: the profile's prefix_cache_tokens, 0)")
    p.add_argument("--truth-file", type=Path, default=None, help="append per-request ground truth as JSONL")
    p.add_argument("--context-length", type=int, default=0)
    p.add_argument("--model-name", default="", help="served model name (default: the profile's)")
    p.add_argument("--expect", default=None, metavar="C,C,...", help="print expected tok/s per concurrency and exit")
    p.add_argument("--fit", type=Path, default=None, metavar="TABLE", help="fit the profile's [cost] to a measured table 'C spec baseline' and print it")
    p.add_argument("--prompt-tokens", type=int, default=30, help="traffic shape for --expect/--fit")
    p.add_argument("--output-tokens", type=int, default=200, help="traffic shape for --expect/--fit")
    p.add_argument("--accept", type=float, default=None, help="per-draft acceptance for --expect/--fit (default: the profile's chat value)")


def _profile(args: argparse.Namespace, resolve: bool = True) -> tuple[profiles.Profile, str]:
    """The profile and mode to serve: the mode's [modes.*] overrides, then the --speculative-* flags.

    ``resolve=False`` (--expect, --fit, which show every mode): the flags change the profile's own
    [spec] and each mode's overrides apply on top.
    """
    try:
        prof = profiles.load(args.profile)
    except LoadgenError as exc:
        raise LoadgenError(f"--profile: {exc}") from None
    mode = args.mode
    try:
        prof.mode(mode)  # a one-line error naming the profile's modes if it has no such mode
    except LoadgenError as exc:
        raise LoadgenError(f"--mode: {exc}") from None
    changes = {}
    if args.speculative_algorithm:
        changes["algorithm"] = args.speculative_algorithm.upper()
        if not prof.is_speculative(mode):
            mode = "spec"
    if resolve:
        prof = prof.for_mode(mode)
    for flag, key in (
        ("speculative_num_steps", "num_steps"),
        ("speculative_eagle_topk", "eagle_topk"),
        ("speculative_num_draft_tokens", "num_draft_tokens"),
    ):
        if getattr(args, flag) is not None:
            if getattr(args, flag) < 1:
                raise LoadgenError(f"--{flag.replace('_', '-')} must be >= 1")
            changes[key] = getattr(args, flag)
    if "num_steps" in changes and "num_draft_tokens" not in changes and changes.get("eagle_topk", prof.spec.eagle_topk) == 1:
        changes["num_draft_tokens"] = changes["num_steps"] + 1  # SGLang forces this with topk=1
    if changes:
        prof = profiles.with_spec(prof, **changes)
        if prof.spec.num_draft_tokens < 2:
            raise LoadgenError("--speculative-num-draft-tokens must be >= 2")
    return prof, mode


def _concurrencies(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise LoadgenError(f"--expect: expected comma-separated integers, got {text!r}") from None
    if not out or min(out) < 1:
        raise LoadgenError("--expect: concurrencies must be positive integers")
    return out


def run(args: argparse.Namespace) -> int:
    prof, mode = _profile(args, resolve=args.fit is None and args.expect is None)
    kw = dict(prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens, accept=args.accept)
    if args.fit is not None or args.expect is not None:
        # the tables only: serving the simulator imports nothing of the analysis (0.22 s more to start, measured)
        from loadgen.report.terminal import expected_table
    if args.fit is not None:
        try:
            rows = calibrate.read_table(args.fit.read_text(encoding="utf-8"))
        except OSError as exc:
            raise LoadgenError(f"cannot read table {args.fit}: {exc}") from None
        fitted, worst = calibrate.fit(prof, rows, **kw)
        print(calibrate.cost_toml(fitted))
        print(f"# worst relative error over the table: {worst:.1%}")
        print(expected_table(fitted, [r.concurrency for r in rows], kw, False))
        return 0
    if args.expect is not None:
        print(expected_table(prof, _concurrencies(args.expect), kw, args.speculative_adaptive))
        return 0
    if args.time_scale <= 0:
        raise LoadgenError("--time-scale must be > 0")
    if not 0 <= args.port <= 65535:
        raise LoadgenError(f"--port must be 0..65535, got {args.port}")
    if args.max_queued_requests is not None and args.max_queued_requests < 0:
        raise LoadgenError("--max-queued-requests must be >= 0")
    if args.max_running_requests < 0:
        raise LoadgenError("--max-running-requests must be >= 0")
    if args.reasoning_tokens < 0:
        raise LoadgenError("--reasoning-tokens must be >= 0")
    if args.prefix_cache is not None and args.prefix_cache < 0:
        raise LoadgenError(f"--prefix-cache must be >= 0 tokens, got {args.prefix_cache}")
    from loadgen.sim.faults import parse as parse_faults
    from loadgen.sim.server import ServerConfig

    faults = parse_faults(args.faults) if args.faults is not None else None

    cfg = ServerConfig(
        profile=prof,
        mode=mode,
        time_scale=args.time_scale,
        seed=args.seed,
        max_running=args.max_running_requests,
        max_queued=args.max_queued_requests,
        incremental=args.incremental_streaming_output,
        stream_shape=args.stream_shape,
        metrics_flavour=args.metrics_flavour,
        adaptive=args.speculative_adaptive,
        truth_path=args.truth_file,
        faults=faults,
        reasoning_tokens=args.reasoning_tokens,
        prefix_cache=prof.prefix_cache_tokens if args.prefix_cache is None else args.prefix_cache,
        context_length=args.context_length,
        model_name=args.model_name,
        host=args.host,
        port=args.port,
    )
    try:
        import uvloop  # measured: several times less loop overhead at 250 streams

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    return runner(serve(cfg))


async def serve(cfg, ready=None) -> int:
    """Listen, print the listening line, and serve until SIGTERM/SIGINT."""
    from aiohttp import web

    from loadgen.sim.server import SimServer

    if cfg.truth_path is not None:
        try:
            cfg.truth_path.parent.mkdir(parents=True, exist_ok=True)
            cfg.truth_path.open("ab").close()
        except OSError as exc:
            raise LoadgenError(f"cannot write truth file {cfg.truth_path}: {exc}") from None
    sim = SimServer(cfg)
    runner = web.AppRunner(sim.app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, cfg.host, cfg.port, backlog=1024)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise LoadgenError(f"cannot listen on {cfg.host}:{cfg.port}: {exc.strerror or exc}") from None
    port = runner.addresses[0][1]
    sim.port = port
    print(f"loadgen sim: listening on http://{cfg.host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    if ready is not None:
        ready(sim, port)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
    return 0


if __name__ == "__main__":
    from loadgen.cli import main

    sys.exit(main(["sim", *sys.argv[1:]]))

"""The LLM Locust user: one user = one closed-loop stream slot of the current stage.

Each user greenlet starts its closed loop on the asyncio thread (the runner's
loop: request, stream, stamp, fold into the stage's histograms, repeat) and
waits for it for the whole stage. Finished records come back in batches to the
executor's reporter greenlet, which puts them in Locust's own statistics
(``events.request``, named target/workload) — always from a Locust greenlet,
never from the asyncio thread.

Locust's table shows end-to-end time per request with Locust's own rounding;
the LLM figures (TTFT, ITL, tokens/s, tokens per chunk, accept length) come
from loadgen's HDR histograms and are in the "LLM stages" tab and the result files.
"""

from __future__ import annotations

from locust import User, constant, task

from loadgen import redact
from loadgen.record import CANCELLED, RequestRecord


class LLMRequestFailed(Exception):
    pass


def executor_of(environment):
    return getattr(environment, "loadgen_executor", None)


class LLMUser(User):
    """One closed-loop stream slot of the current stage (target, workload, prompts come from the stage plan)."""

    wait_time = constant(0)
    host = ""

    @task
    def stream(self) -> None:
        ex = executor_of(self.environment)
        if ex is None:
            import gevent

            gevent.sleep(1.0)
            return
        ex.run_user()


def report(events, rec: RequestRecord, request_type: str) -> None:
    """One finished request into Locust's statistics (call from a greenlet)."""
    if rec.error_class == CANCELLED:
        return
    e2e_ms = (rec.end_ns - rec.t0_ns) / 1e6 if rec.end_ns else 0.0
    # Locust shows and writes its failures (UI, --csv, --html): a message naming a URL is masked (loadgen/redact.py)
    exc = None if rec.ok else LLMRequestFailed(redact.text(f"{rec.error_class}: {rec.error_message or ''}".strip()))
    ttft = rec.ttft_ns
    events.request.fire(
        request_type=request_type,
        name=f"{rec.target}/{rec.workload}",
        response_time=e2e_ms,
        response_length=rec.output_tokens if rec.output_tokens is not None else rec.tokens_received,
        exception=exc,
        context={"ttft_ms": ttft / 1e6 if ttft is not None else None, "chunks": len(rec.chunk_ns)},
    )

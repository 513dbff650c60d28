"""The LLM Locust user: one user = one closed-loop stream slot of the current stage.

Each user greenlet asks the process's executor for its next request; the
request is streamed, stamped and folded into the stage's histograms on the
asyncio thread, and only the finished record comes back. The greenlet then
reports it to Locust's own statistics (``events.request``, named by target and
workload) — always from a Locust greenlet, never from the asyncio thread.

Locust's table shows end-to-end time per request with Locust's own rounding;
the LLM figures (TTFT, ITL, tokens/s, tokens per chunk, accept length) come
from loadgen's HDR histograms and are in the "LLM stages" tab and the result files.
"""

from __future__ import annotations

from locust import User, constant, task

from loadgen.record import RequestRecord


class LLMRequestFailed(Exception):
    pass


def executor_of(environment):
    return getattr(environment, "loadgen_executor", None)


class LLMUser(User):
    """Streams the current stage's requests (target, workload and prompts come from the stage plan)."""

    wait_time = constant(0)
    host = ""

    @task
    def stream(self) -> None:
        ex = executor_of(self.environment)
        if ex is None:
            self.wait_time_idle()
            return
        stage = ex.stage
        rec = ex.request()
        if rec is None or rec.error_class == "cancelled":
            return
        self.report(rec, stage.target.protocol if stage is not None else "llm")

    def wait_time_idle(self) -> None:
        import gevent

        gevent.sleep(1.0)

    def report(self, rec: RequestRecord, request_type: str) -> None:
        e2e_ms = (rec.end_ns - rec.t0_ns) / 1e6 if rec.end_ns else 0.0
        exc = None if rec.ok else LLMRequestFailed(f"{rec.error_class}: {rec.error_message or ''}".strip())
        ttft = rec.ttft_ns
        self.environment.events.request.fire(
            request_type=request_type,
            name=f"{rec.target}/{rec.workload}",
            response_time=e2e_ms,
            response_length=rec.output_tokens if rec.output_tokens is not None else rec.tokens_received,
            exception=exc,
            context={"ttft_ms": ttft / 1e6 if ttft is not None else None, "chunks": len(rec.chunk_ns)},
        )

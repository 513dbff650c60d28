"""Turn a validated Job into a scheduled request: how many tokens, how it ends, what it says.

Everything random about a request comes from one RNG seeded by the server seed
and the request's content (plus a per-server counter only for sampled requests
without a sampling seed), so a fixed seed gives the same streams whatever the
arrival order, and greedy requests repeat exactly, as they would on a real server.
With ``prefix_cache`` the request carries its prompt's tokens (``SimRequest.prompt_seq``) for the scheduler's
prefix cache; a prompt given as token ids has no text to match and is never cached.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from loadgen.sim.acceptance import predictability
from loadgen.sim.profiles import Profile
from loadgen.sim.scheduler import SimRequest
from loadgen.sim.textgen import OutputView, TextSource
from loadgen.sim.truth import TruthRecord
from loadgen.sim.validate import Job
from loadgen.workloads import tokens


@dataclass(frozen=True)
class Finish:
    """How the request ends if nothing aborts it."""

    type: str
    """'length' or 'stop'."""
    matched: int | str | None = None


def natural_length(kind: str, source: TextSource, rng: random.Random) -> int:
    """Where a model would emit EOS: a copy ends with its passage, an answer after a few paragraphs."""
    if kind == "copy" and source.passage_tokens:
        return source.passage_tokens
    mean = 400.0 if kind == "creative" else 250.0
    return max(8, min(4000, int(rng.lognormvariate(math.log(mean), 0.6))))


def make_request(
    job: Job,
    *,
    rid: str,
    profile: Profile,
    mode: str,
    seed: int,
    counter: int,
    max_new: int,
    received_ns: int,
    record: bool = True,
    prefix_cache: bool = False,
) -> tuple[SimRequest, OutputView, Finish]:
    pred = predictability(job.prompt, job.temperature, profile.acceptance)
    salt = job.sampling_seed if job.sampling_seed is not None else (counter if job.temperature > 0 else 0)
    rng = random.Random(f"{seed}|{job.prompt}|{max_new}|{job.temperature}|{salt}")
    source = TextSource(job.prompt, pred.kind, random.Random(rng.random()))
    target, visible, finish, cap = max_new, max_new, Finish("length", None), None
    if not job.ignore_eos:
        natural = max(natural_length(pred.kind, source, rng), job.min_new_tokens)
        if natural + 1 <= max_new:
            target, visible, finish = natural + 1, natural, Finish("stop", profile.eos_token_id)
    if job.stop and visible > 0:
        text = source.text(0, visible)
        hits = [(text.find(s), s) for s in job.stop if text.find(s) >= 0]
        if hits:
            start, s = min(hits)
            end = start + len(s)
            upto, n = 0, 0
            while upto < end:  # the token in which the stop string completes
                upto += len(source.pieces[n])
                n += 1
            target, visible, finish = n, n, Finish("stop", s)
            cap = end if job.no_stop_trim else start
    truth = TruthRecord(
        rid=rid,
        route=job.route,
        stream=job.stream,
        mode=mode,
        received_ns=received_ns,
        prompt_tokens=job.prompt_tokens,
        prompt_kind=pred.kind,
        accept_p=round(pred.p, 4),
    )
    req = SimRequest(
        rid=rid,
        prompt_tokens=job.prompt_tokens,
        target_tokens=target,
        finish_type=finish.type,
        accept_p=pred.p,
        rng=rng,
        truth=truth,
        record=record,
    )
    if prefix_cache and job.prompt:
        seq = tokens.split(job.prompt)
        if len(seq) == job.prompt_tokens:  # a text prompt: its tokens are the ones counted
            req.prompt_seq = seq
    eos = profile.eos_token_id if finish.type == "stop" and finish.matched == profile.eos_token_id else None
    return req, OutputView(source, visible, eos, cap), finish

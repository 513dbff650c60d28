"""When requests are sent in an open-loop stage: arrival processes and traces, as planned send times.

In: a rate and an arrival process (``constant``, ``poisson``, ``gamma:CV``) or a trace file (Mooncake
JSONL). Out: an endless or finite, seeded, ascending sequence of planned send offsets in seconds
from the stage's start (:class:`arrivals.Arrivals`), the same for every target at a rate, which the
open-loop stage (loadgen/run/pacing.py) keeps and the simulator's virtual-time truth
(loadgen/sim/openloop.py) replays. Nothing here sends anything or knows a protocol.
"""

"""A stage spread over processes: one window, results merged exactly."""

from loadgen.bench.client_bench import RequestCycle
from loadgen.bench.procs import schedserver
from loadgen.request import GenRequest
from loadgen.run.processes import run_stage_processes
from loadgen.run.spec import RunOptions, StageSpec
from loadgen.client.target import Target


def test_two_processes_share_one_window_and_merge(favoured):
    req = GenRequest(workload="w", prompt="x", max_tokens=20)
    with schedserver("--interval-ms", "10", "--tokens", "2", "--ttft-ms", "10", cpu=None) as url:
        res = run_stage_processes(Target("t", url, "sglang"), StageSpec(6, duration_s=2.0, warmup_s=0.5),
                                  RequestCycle([req]), RunOptions(), processes=2)
    d = res.to_dict()
    assert d["client"]["processes"] == 2 and len(d["client"]["cpu_pct"]) == 2
    # (6 streams of a 2-token chunk every 10 ms: about 1200 tok/s on a quiet host; how close the client's
    # figures come to a server's send log is `loadgen bench client`'s)
    # (the workers start 2 s after the stage: on a loaded host spawning them took longer, and a window
    # left empty says nothing of the merge; ahead of the host's other work, `favoured`, they make it)
    assert d["requests"]["failed"] == 0 and d["requests"]["completed"] > 0
    assert d["ttft"]["count"] == d["requests"]["completed"]
    assert abs(d["window"]["duration_s"] - 2.0) < 1e-6
    assert sum(d["timeline"]["tokens"]) == d["output_tokens"]

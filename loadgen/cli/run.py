"""``loadgen run``: fixed-concurrency stages against one target, a table and a JSON file.

In: the flags (settings/knobs.py, front "run"). Out: OUT/run.json (+ run.csv, run.hlog), the stage
table on stdout. A ramp of one target, built as the crossover's two (cli/front.py).
"""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack

from loadgen import redact
from loadgen.cli import front
from loadgen.client.target import Target
from loadgen.report.sessions import session_lines
from loadgen.report.table import stage_table
from loadgen.run.results import ResultsWriter
from loadgen.settings import flags, recorded


EXAMPLES = """examples:
  loadgen run --ladder 1,5 --duration 5s
      the embedded simulator: two stages, a table and OUT/run.json
  loadgen run --url http://gpu:8000 --protocol chat --model Qwen/Qwen3-8B --ladder 1,4,16
      one vLLM server over three concurrencies
  loadgen run --url http://gpu:30000 --rate 1,2,4 --duration 60s
      one SGLang server at three Poisson request rates (open loop)
(loadgen crossover compares two servers; docs/guide.md: every option)"""


def register(p: argparse.ArgumentParser) -> None:
    p.usage = "%(prog)s [options]   (the options most runs set come first, under 'common')"
    p.epilog = EXAMPLES
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    flags.register(p, "run")


def run(args) -> int:
    args, resume_doc = front.resumed_args(args, "run", flags.defaults("run"))
    s = flags.typed(args, "run")
    out = front.out_folder(s.out)
    front.check_resume(resume_doc, s, "run")
    front.open_plan(s)  # an open-loop flag in a wrong combination fails here, before the simulator starts
    front.check_budget(s, 1)
    workloads = front.workloads_of(s, [s.workload])
    make_source = front.source_factory(s, workloads)
    opts = front.run_options(s)
    front.sigterm_like_ctrl_c()
    with ExitStack() as stack:
        url = s.url
        meta = {"command": "run", "argv": sys.argv[1:], "workload": workloads[0], "seed": s.seed,
                **front.open_meta(s), "settings": recorded.record(s, "run")}
        if url is None:
            [url] = front.start_simulators(stack, s, (s.sim_mode,))
            meta["simulator"] = {"profile": s.sim_profile, "mode": s.sim_mode, "time_scale": s.sim_time_scale,
                                 "prefix_cache": s.sim_prefix_cache or 0}
            print(f"loadgen: no --url given: embedded simulator ({s.sim_profile}, {s.sim_mode}) at {url}",
                  file=sys.stderr)
        target = Target(s.label or (s.sim_mode if s.url is None else "target"), url, s.protocol, s.model,
                        s.header, s.spec_details)
        meta["targets"] = front.target_meta([target])
        found = front.probe_ahead([target], {}, s.wait_for_server)  # a target that does not answer: nothing written
        writer = ResultsWriter(out / "run.json", meta, resume=resume_doc)
        front.record_probes(writer, [target], found)
        plan = front.ramp_plan(s, [target], workloads, make_source, opts)
        outcome = front.drive(plan, writer)
    if outcome.status == "interrupted":
        print("loadgen: interrupted; results so far are saved", file=sys.stderr)
        if outcome.stages:
            print("\n".join([stage_table(outcome.stages), *session_lines(outcome.stages, meta.get("simulator"))]))
        print(f"loadgen: results in {writer.path}", file=sys.stderr)
        return outcome.exit_code
    print("\n".join([stage_table(outcome.stages), *session_lines(outcome.stages, meta.get("simulator"))]))
    print(f"loadgen: results in {writer.path} (+ .csv, .hlog)", file=sys.stderr)
    if not any((d.get("requests") or {}).get("completed") for d in outcome.stages):
        # a CI job must not pass on a run that measured nothing (as crossover's "nothing compared" does not)
        why = next((f"{k}: {v.get('first_message', '')}" for d in outcome.stages
                    for k, v in ((d.get("requests") or {}).get("failures") or {}).items()), "")
        print(f"loadgen: error: no request succeeded at {redact.url(target.url)}" + (f" ({why})" if why else ""),
              file=sys.stderr)
        return 1
    return 0

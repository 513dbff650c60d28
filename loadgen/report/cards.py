"""The page's run-wide cards: the header's facts, the flags card and the run card.

In: the run document, the run's analysis (``ra``, a :class:`~loadgen.analysis.compare.RunAnalysis`),
the slices and the lines of stages left out of the results file. Out: HTML / text — :func:`facts_line`
and :func:`wall_time` (the header), :func:`flags_card` (every client-bound, failed, approximate,
incomplete or never-compared item, with the self-check's advice) and :func:`run_card` (targets,
servers, ladder, seed; template ``templates/run-card.html``), read off a concurrency run's analysis by
:func:`run_card_of` and off the open-loop page's own facts by rates.py.
"""

from __future__ import annotations

from html import escape

import orjson

from loadgen import redact
from loadgen.analysis.results import level
from loadgen.analysis.compare import RunAnalysis
from loadgen.report.inputs import Slice, max_running, servers
from loadgen.report.palette import labels_of, palette, swatch
from loadgen.report.templates import fragment


def wall_time(run: dict) -> str:
    """How long the run took ("12.5 min", "40 s"), "" when it does not say."""
    a, b = run.get("started_unix"), run.get("finished_unix")
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b >= a:
        return f"{(b - a) / 60:.1f} min" if b - a >= 60 else f"{b - a:.0f} s"
    return ""


def _target_word(label: str, server: dict | None) -> str:
    """A target with its engine and speculative algorithm: "spec (sglang, EAGLE3)"."""
    info = (server or {}).get("server_info") or {}
    bits = [server.get("engine")] if server and server.get("engine") not in (None, "unknown") else []
    if info.get("speculative_algorithm"):
        bits.append(str(info["speculative_algorithm"]))
    return f"{label} ({', '.join(bits)})" if bits else label


def facts_line(doc: dict, ra: RunAnalysis) -> str:
    """The header's second line: who is compared with whom, the ladder, the workloads (plain text)."""
    run = doc.get("run", {})
    srv = servers(doc)
    ladder = run.get("ladder") or sorted({s["concurrency"] for s in doc.get("stages", [])})
    wls = run.get("workloads") or [w for w in ra.workloads if w != "all"]
    labels = labels_of(ra)
    if len(labels) > 2:
        who = (f"{_target_word(labels[0], srv.get(labels[0]))} (reference) vs "
               + ", ".join(_target_word(x, srv.get(x)) for x in labels[1:]))
    else:
        who = f"{_target_word(ra.baseline, srv.get(ra.baseline))} vs {_target_word(ra.spec, srv.get(ra.spec))}"
    parts = [who,
             "ladder " + ",".join(map(str, ladder)), "workloads " + ", ".join(map(str, wls))]
    if run.get("simulator"):
        parts.append(f"simulator {run['simulator'].get('profile', '')}".strip())
    return " · ".join(parts)


def flags_card(sl: dict[str, dict[str, dict[int, Slice]]], ra: RunAnalysis, dropped: list[str], run: dict) -> str:
    """Every flagged item of the run (or that there are none), grouped, with what to do about them."""
    from loadgen.analysis.compare import run_cut_words

    items = []
    advice: dict[str, list[str]] = {}
    for wl, per_target in sl.items():
        for label, by_c in per_target.items():
            for c, s in sorted(by_c.items()):
                for kind, text in s.flags:
                    items.append((kind, f"{wl} · {label} C={c}", text))
                if any(k == "client" for k, _ in s.flags):
                    for st in s.stages:
                        tip = (st.get("client") or {}).get("advice")
                        if tip and f"{label} C={c}" not in advice.setdefault(tip, []):
                            advice[tip].append(f"{label} C={c}")
    for d in dropped:
        items.append(("fail", "results file", d))
    # planned stages that neither finished nor were analysed: the verdicts leave them out (crossover.Scope)
    for wl, cov in ra.coverage.items():
        for c, why in sorted(cov.missing.items()):
            items.append(("missing", f"{wl} C={c}", f"not compared: {why}"))
    cut = run_cut_words(run)
    if cut:
        items.append(("incomplete", "run", f"{cut}; only the stages that finished are analysed"))
    if not items:
        return ('<section class="card ok"><b>No flags:</b> no stage was client-bound, no request failed, '
                'token counts are exact.</section>')
    counts = {}
    for kind, _, _ in items:
        counts[kind] = counts.get(kind, 0) + 1
    names = {"client": "client-bound", "fail": "with failures", "approx": "approximate token counts",
             "incomplete": "incomplete", "note": "notes", "missing": "planned but not compared"}
    summary = ", ".join(f"{n} {names.get(k, k)}" for k, n in counts.items())
    lis = "".join(f'<li class="f-{k}"><b>{escape(who)}</b>: {escape(text)}</li>' for k, who, text in items)
    explain = ""
    if "client" in counts and advice:
        # the self-check's own advice for what it measured (stage.ClientHealth), not a fixed remedy
        tips = "; ".join(f"{escape(tip)} ({escape(', '.join(who))})" for tip, who in advice.items())
        explain += ("<p>Client-bound: loadgen itself distorted the figures there (latencies over-stated, throughput "
                    f"under-stated); before trusting those stages: {tips}.</p>")
    elif "client" in counts:  # results from before the self-check gave advice
        explain += ("<p>Client-bound: loadgen itself was too busy to stamp chunks on time, so latencies there may be "
                    "over-stated and throughput under-stated; rerun with more <code>--processes</code> or on a quieter "
                    "machine before trusting those stages.</p>")
    if "approx" in counts:
        explain += ("<p>Approximate token counts: the server sent no per-chunk usage, so tokens per chunk and ITL are "
                    "estimated (docs/metrics.md §Token counts).</p>")
    return (f'<section class="card flags"><h2>Flags <small>{escape(summary)}</small></h2>{explain}'
            f'<details{" open" if len(items) <= 8 else ""}><summary>{len(items)} flagged item(s)</summary>'
            f'<ul>{lis}</ul></details></section>')


def sim_fact(sim: dict) -> str:
    """The embedded simulators in words (run.json ``run.simulator``): the card printed the raw dict, ``{'baseline':
    'baseline', …}``, ``max_tokens None``. The lengths and sessions are the run's own, said elsewhere on the page."""
    modes = sim.get("modes")
    if isinstance(modes, dict):
        who = ", ".join(m if lbl == m else f"{lbl} ({m})" for lbl, m in modes.items())
    else:
        who = str(sim.get("mode") or "–")
    bits = [f"{sim.get('profile', '?')} profile: {who}"]
    if sim.get("time_scale") not in (None, 1, 1.0):
        bits.append(f"runs {sim['time_scale']:g}× faster than real time")
    bits.append(f"prefix cache {sim['prefix_cache']} tokens" if sim.get("prefix_cache") else "no prefix cache")
    if sim.get("faults"):
        bits.append(f"faults {sim['faults']}")
    if sim.get("metrics_flavour") not in (None, "sglang"):
        bits.append(f"/metrics as {sim['metrics_flavour']}")
    if sim.get("seed") is not None:
        bits.append(f"seed {sim['seed']}")
    return "; ".join(bits)


def run_card_of(doc: dict, ra: RunAnalysis) -> str:
    """The "Run" card at the foot of the page: the targets and their servers, then the run's facts."""
    return run_card(doc, labels_of(ra), ra.adaptive, ra.confidence, list(ra.workloads))


def run_card(doc: dict, labels: list[str], adaptive_labels: list[str], confidence: float,
             workloads: list[str]) -> str:
    """The "Run" card of the configurations ``labels`` (the reference first) of any axis."""
    run = doc.get("run", {})
    srv = servers(doc)
    colours = palette(labels) if len(labels) > 2 else {}  # three or more: each with its colour and role
    if colours:
        adaptive = set(adaptive_labels)
        roles = {x: "reference" if i == 0 else "candidate, adapts on its own" if x in adaptive else "candidate"
                 for i, x in enumerate(labels)}
    else:
        roles = {labels[0]: "baseline", labels[min(1, len(labels) - 1)]: "speculative"}
    targets = run.get("targets") or [{"label": lbl} for lbl in roles]
    rows = []
    for t in targets:
        label = t.get("label", "?")
        s = srv.get(label) or {}
        info = s.get("server_info") or {}
        algo = info.get("speculative_algorithm")
        spec_txt = "–"
        if algo:
            bits = [str(algo)] + [f"{k.replace('speculative_', '')}={info[k]}" for k in
                                  ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
                                  if info.get(k) is not None]
            spec_txt = ", ".join(bits)
        elif s.get("speculative") is False:
            spec_txt = "off"
        model = ", ".join(map(str, s.get("models") or [])) or info.get("model_path") or "–"
        mrr = max_running(s)
        name = swatch(colours[label], label) if label in colours else escape(str(label))
        rows.append(f"<tr><td>{name}</td>" + "".join(f"<td>{escape(str(v))}</td>" for v in (
            roles.get(label, "–"), t.get("url", "–"), t.get("protocol", "–"), s.get("engine", "–"),
            info.get("version", "–"), model, spec_txt, mrr if mrr else "–")) + "</tr>")
    ladder = run.get("ladder") or sorted({s["concurrency"] for s in doc.get("stages", [])})
    wls = run.get("workloads") or ([run["workload"]] if run.get("workload") else workloads)
    started, finished = run.get("started_unix"), run.get("finished_unix")
    dur = f"{(finished - started) / 60:.1f} min" if isinstance(started, (int, float)) and isinstance(finished, (int, float)) else "–"
    sim = run.get("simulator")
    facts = [("ladder", ", ".join(map(str, ladder))), ("workloads", ", ".join(map(str, wls))),
             ("stages", str(len(doc.get("stages", [])))), ("wall time", dur),
             ("confidence", f"{level(confidence)} % (crossovers: whole-ladder, Šidák)"),
             ("seed", str(run.get("seed", "–"))), ("loadgen", str(run.get("loadgen_version", "–")))]
    if sim:
        facts.insert(2, ("simulator", sim_fact(sim)))
    if run.get("combined_from"):
        facts.append(("combined from", ", ".join(map(str, run["combined_from"]))))
    if run.get("argv"):
        facts.append(("command", "loadgen " + " ".join(map(str, run["argv"]))))
    dl = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts)
    raw = escape(orjson.dumps(redact.document(srv), option=orjson.OPT_INDENT_2).decode()) if srv else "none recorded"
    return fragment("run-card.html").format(rows="".join(rows), dl=dl, raw=raw)

#!/usr/bin/env python3
"""The figures of a bench/gpu run for docs/real-servers.md, and loadgen's counts against llama-server's own.

    python3 bench/gpu/crosscheck.py RUN_DIR

RUN_DIR is what `device.sh collect` brought back (run.json, crossover.json, loadgen.log, scrape.jsonl.gz)
or the device's own run folder (out/run.json, loadgen.log, scrape.jsonl). Standard library only, so it runs
on the GPU machine too (collect prints it there).

Prints, as Markdown:
1. per workload and concurrency, baseline vs speculative: output tok/s, TTFT and ITL p50/p99, accept
   rate, flags (client-bound, failed requests, approximate token counts, cut, notes);
2. the verdict lines exactly as `loadgen crossover` printed them (from loadgen.log; else crossover.json);
3. loadgen's own check of each stage (its `server` block): the server's token counter over loadgen's two
   scrapes of the window against the tokens of the requests that ended between them, by loadgen's rule
   (within the requests that ended while a scrape was in flight, ±1 %), and how many are equal to the token;
   printed also without scrape.jsonl;
4. the cross-check of each stage's window against the server's /metrics counters, scraped every 0.25 s
   by bench/gpu/scrape.py on the same clock (CLOCK_MONOTONIC) loadgen stamps its windows with.

What the cross-check compares, and why it is not a plain equality (docs/real-servers.md, /metrics):
llama.cpp's counters move when a request *ends* (its slot is released). So over one window
- loadgen's `output_tokens` = tokens whose chunks arrived inside the window (exact on llama.cpp: one token
  per event), i.e. tokens the server generated in the window;
- the server's delta of `tokens_predicted_total` = all tokens of the requests that *ended* in the window,
  generated partly before it.
Both measure the same steady rate; they differ by the tokens in flight at the two edges, on the order of
C x (mean tokens per request) / 2 each, and agree closely only when the window spans many request
lifetimes. The table gives "window / E2E p50" so that the reader can see which case a stage is in, the
allowance C x mean tokens (edge effects), and says "agree" / "DIFFER" against it. Drafts likewise:
loadgen sums `timings.draft_n(_accepted)` of the requests *started* in the window (complete ones), the
server's spec_decode counters move for requests *ended* in it: the accept *rates* are comparable, the
counts only as far as the sets overlap. Where loadgen itself recorded the server's counters over the
window (stage "server", from loadgen's own scrape), those are the same counters over the same window,
so they must agree up to the scrape spacing: that comparison is exact, like with like.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

TOK = "tokens_predicted_total"
DRAFT = "spec_decode_num_draft_tokens_total"
ACC = "spec_decode_num_accepted_tokens_total"


def find(root: Path, names: list[str]) -> Path | None:
    for sub in ("", "out"):
        for n in names:
            p = root / sub / n if sub else root / n
            if p.is_file():
                return p
    return None


def read_text(p: Path) -> str:
    return gzip.decompress(p.read_bytes()).decode() if p.suffix == ".gz" else p.read_text()


@dataclass
class Scrape:
    t_ns: int
    up: bool
    m: dict


def load_scrapes(p: Path | None) -> list[Scrape]:
    if p is None:
        return []
    out = []
    for line in read_text(p).splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue  # a line cut when the scraper was killed
        out.append(Scrape(d["t_ns"], d.get("up", False), d.get("m", {})))
    return out


def _diff(a: Scrape, b: Scrape) -> dict:
    return {k: b.m.get(k, 0.0) - a.m.get(k, 0.0) for k in set(a.m) | set(b.m) if k.endswith("_total")}


def counters_over(scrapes: list[Scrape], lo: int, hi: int) -> tuple[dict, dict] | None:
    """Counter differences over [lo, hi] from the scrapes around it: (inner, outer), where inner runs from the
    first scrape at or after lo to the last at or before hi and outer from the last at or before lo to the first
    at or after hi, so the true difference over [lo, hi] lies between them. None if the server was down or
    restarted in between (counters fell)."""
    up = [s for s in scrapes if s.up]
    before = [s for s in up if s.t_ns <= lo]
    after = [s for s in up if s.t_ns >= hi]
    if not before or not after:
        return None
    a, b = before[-1], after[0]
    span = [s for s in scrapes if a.t_ns <= s.t_ns <= b.t_ns]
    if any(not s.up for s in span) or any(y.m.get(TOK, 0) < x.m.get(TOK, 0) for x, y in zip(span, span[1:])):
        return None
    inside = [s for s in span if lo <= s.t_ns <= hi]
    inner = _diff(inside[0], inside[-1]) if len(inside) >= 2 else {k: 0.0 for k in _diff(a, b)}
    return inner, _diff(a, b)


def max_tokens_bound(argv: list[str]) -> int | None:
    """The largest output length the run asked for (--max-tokens N | uniform:A,B | ...: the last number)."""
    for i, a in enumerate(argv):
        v = a.split("=", 1)[1] if a.startswith("--max-tokens=") else argv[i + 1] if a == "--max-tokens" and i + 1 < len(argv) else None
        if v is not None:
            nums = re.findall(r"\d+", v)
            return max(int(n) for n in nums) if nums else None
    return None


def fmt(v, spec: str = ".1f", none: str = "–") -> str:
    return none if v is None else format(v, spec)


def pct(d: dict, k: str):
    return (d or {}).get(k)


def stage_workload(s: dict) -> str:
    w = list((s.get("workloads") or {}).keys())
    return w[0] if len(w) == 1 else ",".join(w) or "?"


def flags(s: dict) -> list[str]:
    out = []
    if (s.get("client") or {}).get("client_bound"):
        out.append("client-bound")
    req = s.get("requests") or {}
    if req.get("failed"):
        out.append(f"{req['failed']} failed")
    if s.get("token_counts") == "approximate":
        out.append("approx counts")
    if s.get("incomplete"):
        out.append("incomplete")
    cut = s.get("cut")
    if cut:
        out.append(f"cut in {cut.get('phase', '?')} by {cut.get('by', '?')}")
    if s.get("notes"):
        out.append(f"{len(s['notes'])} note(s)")
    return out


def figures_table(stages: list[dict], labels: tuple[str, str]) -> list[str]:
    base, spec = labels
    by: dict[tuple[str, int], dict[str, dict]] = {}
    for s in stages:
        by.setdefault((stage_workload(s), s["concurrency"]), {})[s["target"]] = s
    order = []
    for s in stages:
        key = (stage_workload(s), s["concurrency"])
        if key not in order:
            order.append(key)
    wls = list(dict.fromkeys(w for w, _ in order))  # workloads in the order the run met them
    order.sort(key=lambda k: (wls.index(k[0]), k[1]))
    lines = ["| workload | C | output tok/s: baseline | spec | spec/base | TTFT p50/p99 ms: baseline | spec "
             "| ITL p50/p99 ms: baseline | spec | accept rate (spec) | requests b/s | flags |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for wl, c in order:
        pair = by[(wl, c)]
        b, s = pair.get(base), pair.get(spec)

        def tps(x):
            return x.get("output_tokens_per_s") if x else None

        def pp(x, m):
            if not x or not (x.get(m) or {}).get("count"):
                return "–"
            return f"{fmt(pct(x[m], 'p50'))}/{fmt(pct(x[m], 'p99'))}"

        ratio = f"{tps(s) / tps(b):.2f}x" if tps(b) and tps(s) is not None else "–"
        reqs = "/".join(str((x or {}).get("requests", {}).get("completed", "–")) for x in (b, s))
        fl = [f"{lab}: {', '.join(flags(x))}" for lab, x in (("b", b), ("s", s)) if x and flags(x)]
        lines.append(f"| {wl} | {c} | {fmt(tps(b))} | {fmt(tps(s))} | {ratio} | {pp(b, 'ttft')} | {pp(s, 'ttft')} "
                     f"| {pp(b, 'itl')} | {pp(s, 'itl')} | {fmt((s or {}).get('accept_rate'), '.3f')} | {reqs} "
                     f"| {'; '.join(fl) or 'none'} |")
    return lines


def printed_verdicts(log: Path | None, crossover: Path | None) -> list[str]:
    if log is not None:
        text = read_text(log).replace("\r", "\n").splitlines()
        start = next((i for i, ln in enumerate(text)
                      if re.match(r"^\s*workload \S+.*(intervals|NOT COMPARED)", ln)), None)
        if start is not None:
            block = [ln for ln in text[start:] if not ln.startswith("loadgen:") and ln.strip()]
            return ["```"] + block + ["```"]
    if crossover is not None:
        res = json.loads(read_text(crossover))
        out = ["(from crossover.json: loadgen.log had no printed tables)"]
        for wl, per in res.get("workloads", {}).items():
            for name, m in per.items():
                out.append(f"- {wl} / {name}: {m.get('recommendation', '')}")
        for wl, cov in (res.get("coverage") or {}).items():
            if isinstance(cov, dict) and cov.get("status") == "not compared":
                out.append(f"- {wl}: {cov.get('recommendation', 'not compared')}")
        return out
    return ["(no loadgen.log and no crossover.json: the run printed no verdict)"]


TOKENS_AGREE_PCT = 1.0
"""Copied from loadgen/serverview/checks.py (TOKENS_AGREE_PCT, issue 14's 1 % bar) because this file stays
standard-library only: keep the two equal."""


def tokens_rule(t: dict) -> bool | None:
    """loadgen's tokens_check (loadgen/serverview/checks.py), re-derived from the figures it stored in the stage's
    ``server.checks.tokens``: the client's count within the slack plus TOKENS_AGREE_PCT of the server's, or the
    server's count within ``client_range`` ± that tolerance, where ``client_range`` is [low, high] of
    ClientView.ended_range: the tokens of the requests that ended between the two scrapes, from those that surely
    ended between them (after the opening scrape's answer, before the closing one was sent) to every one the
    server can have counted (from the opening one's sending to the closing one's answer). None where loadgen
    compared nothing (not comparable, or no figures)."""
    server, client = t.get("server"), t.get("client")
    if t.get("verdict") not in ("agree", "disagree") or server is None or client is None:
        return None
    tol = (TOKENS_AGREE_PCT / 100) * max(server, client)
    lo, hi = t.get("client_range") or (client, client)
    return abs(client - server) <= (t.get("slack_tokens") or 0.0) + tol or lo - tol <= server <= hi + tol


def own_check_table(stages: list[dict]) -> tuple[list[str], list[str]]:
    """loadgen's own check, like for like: the server's counter over loadgen's two scrapes of each window against
    the client's tokens of the requests that ended between them (stage ``server``), by loadgen's rule."""
    lines = ["| target | workload | C | server Δtokens (between loadgen's scrapes) | client: requests ended between "
             "(midpoints) | client: ended while a scrape was in flight, narrow–wide | loadgen's verdict "
             "| rule re-derived | equal to the token |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    notes: list[str] = []
    compared = agree = equal = own_agree = 0
    drift, skipped = [], []
    for s in stages:
        name = f"{s['target']} {stage_workload(s)} C={s['concurrency']}"
        head = f"| {s['target']} | {stage_workload(s)} | {s['concurrency']} "
        own = s.get("server") if isinstance(s.get("server"), dict) else None
        if own is None:
            skipped.append(f"{name} (no server block: loadgen did not scrape the server)")
            lines.append(head + "| – | – | – | no server block | – | – |")
            continue
        if not own.get("available"):
            why = str(own.get("reason") or own.get("why") or "no reason given")
            skipped.append(f"{name} (server block unavailable: {why[:120]})")
            lines.append(head + f"| – | – | – | server block unavailable: {why[:60]} | – | – |")
            continue
        t = (own.get("checks") or {}).get("tokens")
        if not t:
            skipped.append(f"{name} (no tokens check recorded)")
            lines.append(head + f"| {fmt(own.get('output_tokens'), '.0f')} | – | – | no tokens check | – | – |")
            continue
        ok = tokens_rule(t)
        mine = own.get("client_ended_between_scrapes") or {}
        rng = t.get("client_range")
        client_txt = fmt(t.get("client"), "g")
        if mine.get("requests") is not None:
            client_txt += f" ({mine['requests']} requests)"
        if rng:
            rng_txt = f"{rng[0]:g}–{rng[1]:g}"
        else:  # loadgen stores no range when it equals the midpoint count (or on an engine counting per step)
            rng_txt = f"± {t['slack_tokens']:g}" if t.get("slack_tokens") else "= midpoints"
        if ok is None:
            skipped.append(f"{name} ({t.get('verdict')}: {str(t.get('why', ''))[:120]})")
            lines.append(head + f"| {fmt(t.get('server'), '.0f')} | {client_txt} | {rng_txt} | {t.get('verdict')} "
                         f"| – | – |")
            continue
        compared += 1
        agree += ok
        own_agree += t["verdict"] == "agree"
        same = t["client"] == t["server"]
        equal += same
        if ok != (t["verdict"] == "agree"):
            drift.append(f"{name} (loadgen: {t['verdict']}, re-derived: {'agree' if ok else 'disagree'})")
        if not same:
            notes.append(f"{name}: server Δtokens {t['server']:g} vs the client's {t['client']:g} over the same two "
                         f"scrapes" + (f", {rng_txt} counting the requests that ended while a scrape was in flight"
                                       if rng else "") + f": {'within' if ok else 'OUTSIDE'} loadgen's rule")
        lines.append(head + f"| {fmt(t['server'], '.0f')} | {client_txt} | {rng_txt} | {t['verdict']} "
                     f"| {'agree' if ok else 'DISAGREE'} | {'yes' if same else 'no'} |")
    summary = (f"like for like — the server's counter against the tokens of the requests that ended between "
               f"loadgen's two scrapes of each window: {agree} of {compared} stages within the requests that ended "
               f"while a scrape was in flight (loadgen's rule, ±{TOKENS_AGREE_PCT:g} %), {equal} of them equal "
               f"to the token" if compared else
               "like for like — no stage has loadgen's own token check against the server's counter")
    if own_agree != agree or drift:
        summary += (f"; loadgen's own check said {own_agree} of {compared} agree — this copy of its rule is out of "
                    f"step with loadgen/serverview/checks.py: " + "; ".join(drift))
    notes.insert(0, summary)
    if skipped:
        notes.append(f"not compared ({len(skipped)} stages): " + "; ".join(skipped))
    return lines, notes


def crosscheck_table(stages: list[dict], scrapes: list[Scrape], max_n: int | None) -> tuple[list[str], list[str]]:
    lines = ["| target | workload | C | window s | window / E2E p50 | loadgen window tokens (arrived in window) "
             "| server Δtokens (requests ended in window) | server/loadgen | bound ±C×max tokens | check "
             "| drafts proposed/accepted: loadgen (requests started in window) | server (ended in window) "
             "| accept rate: loadgen | server | loadgen's own scrape: tokens, drafted/accepted | same counters? |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    notes: list[str] = []
    within = outside = short = own_ok = own_bad = 0
    for s in stages:
        w = s.get("window") or {}
        lo, hi, dur = w.get("start_ns"), w.get("end_ns"), w.get("duration_s") or 0
        c = s["concurrency"]
        e2e = (s.get("e2e") or {}).get("p50")
        span = dur / (e2e / 1000) if e2e else None
        tokens = s.get("output_tokens", 0)
        done = (s.get("requests") or {}).get("completed", 0)
        n_max = max_n or (2 * s.get("server_output_tokens", 0) / done if done else None)
        bound = c * n_max if n_max else None
        got = counters_over(scrapes, lo, hi) if lo and hi and scrapes else None
        dr = s.get("drafts") or {}
        lg_rate = s.get("accept_rate")
        own = s.get("server") if isinstance(s.get("server"), dict) else None
        own_txt, own_check = "–", "–"
        if own and own.get("available"):
            own_txt = (f"{fmt(own.get('output_tokens'), '.0f')}, {fmt(own.get('draft_tokens'), '.0f')}/"
                       f"{fmt(own.get('accepted_tokens'), '.0f')}")
        elif own:
            own_txt = f"not available: {str(own.get('reason', ''))[:60]}"
        head = f"| {s['target']} | {stage_workload(s)} | {c} | {dur:.1f} | {fmt(span, '.2f')} | {tokens} "
        if got is None:
            lines.append(head + f"| – | – | {fmt(bound, '.0f')} | no scrape | {dr.get('proposed', 0)}/"
                         f"{dr.get('accepted', 0)} | – | {fmt(lg_rate, '.3f')} | – | {own_txt} | – |")
            continue
        inner, outer = got
        si, so = inner.get(TOK, 0.0), outer.get(TOK, 0.0)
        server_txt = f"{si:.0f}" if si == so else f"{si:.0f}–{so:.0f}"
        ratio = f"{si / tokens:.2f}" if tokens and si == so else (f"{si / tokens:.2f}–{so / tokens:.2f}" if tokens else "–")
        # server - loadgen = (tokens made before the window by requests ending in it) - (tokens made in the window
        # by requests ending after it): each term is at most one request per user, so |difference| <= C x max tokens
        if bound is not None and si - bound <= tokens <= so + bound:
            check = "within"
            within += 1
        else:
            check = "OUTSIDE"
            outside += 1
        if span is not None and span < 2:
            short += 1
            check += " (window < 2 requests: rates not comparable)"
        sd, sa = outer.get(DRAFT), outer.get(ACC)
        srate = sa / sd if sd else None
        if own and own.get("available") and own.get("output_tokens") is not None:
            # the same counters over the same window: each must lie inside this scraper's bracket. loadgen's two
            # scrapes span interval_s (4.2 s around a 4.0 s window in the dry run), so widen the outer side by the
            # excess on either end (it may sit at one end) plus 50 ms for its scrapes' round trips
            pad = max(0.0, float(own.get("interval_s") or dur) - dur) + 0.05
            wide = counters_over(scrapes, lo - int(pad * 1e9), hi + int(pad * 1e9))
            o_outer = wide[1] if wide else outer
            pairs = [(TOK, own.get("output_tokens")), (DRAFT, own.get("draft_tokens")), (ACC, own.get("accepted_tokens"))]
            bad = [k for k, v in pairs if v is not None and not inner.get(k, 0.0) <= v <= o_outer.get(k, 0.0)]
            ok = not bad
            own_check = "yes" if ok else (f"NO: {', '.join(bad)} outside the scraper's "
                                          f"{inner.get(TOK, 0):.0f}–{o_outer.get(TOK, 0):.0f}")
            own_ok += ok
            own_bad += not ok
        lines.append(head + f"| {server_txt} | {ratio} | {fmt(bound, '.0f')} | {check} "
                     f"| {dr.get('proposed', 0)}/{dr.get('accepted', 0)} | {fmt(sd, '.0f')}/{fmt(sa, '.0f')} "
                     f"| {fmt(lg_rate, '.3f')} | {fmt(srate, '.3f')} | {own_txt} | {own_check} |")
    notes.append(f"loadgen's window tokens against the server's counter: {within} stages within the bound, "
                 f"{outside} outside it (an outside stage means a miscount: the bound is a hard one)")
    notes.append(f"{short} stages have windows shorter than two E2E p50s: there the server's counter moves in lumps "
                 f"of whole requests and the two rates say little about each other; longer windows make them agree")
    if own_ok or own_bad:
        notes.append(f"loadgen's own window scrape (stage 'server': tokens, drafted, accepted) against this scraper, "
                     f"same counters over the same window: {own_ok} stages agree, {own_bad} do not")
    return lines, notes


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    root = Path(argv[0])
    run = find(root, ["run.json", "run.json.gz"])
    if run is None:
        print(f"crosscheck: error: no run.json in {root} or {root / 'out'}", file=sys.stderr)
        return 1
    try:
        doc = json.loads(read_text(run))
    except (OSError, ValueError) as e:
        print(f"crosscheck: error: {run}: {e}", file=sys.stderr)
        return 1
    stages = [s for s in doc.get("stages", []) if s.get("target")]
    meta = doc.get("run", {})
    labels = tuple((meta.get("roles") or {}).get(k, k) for k in ("baseline", "spec"))
    scrapes = load_scrapes(find(root, ["scrape.jsonl", "scrape.jsonl.gz"]))
    print(f"# bench/gpu run: {run}")
    print(f"loadgen {' '.join(meta.get('argv', []))[:1500]}")
    planned = meta.get("planned_stages")
    print(f"\nstages: {len(stages)} recorded" + (f" of {len(planned)} planned" if planned else "")
          + (f"; run cut: {meta['cut']}" if meta.get("cut") else "")
          + (f"; interrupted" if meta.get("interrupted") else ""))
    for lab, srv in (meta.get("servers") or {}).items():
        print(f"server {lab}: " + json.dumps(srv)[:400])
    print("\n## Figures\n")
    print("\n".join(figures_table(stages, labels)))
    print("\n## Verdicts as printed\n")
    print("\n".join(printed_verdicts(find(root, ["loadgen.log"]), find(root, ["crossover.json", "crossover.json.gz"]))))
    print("\n## loadgen's own check against the server's /metrics\n")
    lines, notes = own_check_table(stages)
    print("\n".join(lines))
    print()
    for n in notes:
        print(f"- {n}")
    print("\n## Cross-check against bench/gpu/scrape.py's /metrics\n")
    if not scrapes:
        print("(no scrape.jsonl: no cross-check against the separate scraper)")
        return 0
    ups = sum(s.up for s in scrapes)
    print(f"{len(scrapes)} scrapes ({ups} answered), "
          f"{(scrapes[-1].t_ns - scrapes[0].t_ns) / 1e9:.0f} s\n")
    max_n = max_tokens_bound(meta.get("argv", []))
    print(f"bound per stage: C x {max_n or '2 x mean'} tokens (the largest --max-tokens asked)\n")
    lines, notes = crosscheck_table(stages, scrapes, max_n)
    print("\n".join(lines))
    print()
    for n in notes:
        print(f"- {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

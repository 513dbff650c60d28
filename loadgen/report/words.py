"""The verdicts in words: what the page (and the terminal summary) says about an analysis.

In: ``crossover.json``'s dict (``res``) and, for the SGLang hint, the run document.
Out: one-word kinds (:func:`kind_of`, :data:`KIND_CHIP` names their chips), the short
per-workload sentences (:func:`headline`), the page's one-line answer (:func:`top_sentence`),
a stage's winner (:func:`winner_word`), the SGLang running-batch hint (:func:`sglang_hint`),
and the small text helpers the HTML pieces share (:func:`fmt_c`, :func:`slug`, …).
Plain text only: escaping is left to whoever puts it in HTML.
"""

from __future__ import annotations

import re

from loadgen.report.inputs import PRIMARY, max_running, servers


def fmt_c(x: float) -> str:
    """A concurrency estimate as the page writes it: whole from 10 up, else one decimal (C≈24, C≈2.5)."""
    return str(int(round(x))) if x >= 10 else f"{x:.1f}".rstrip("0").rstrip(".")


def without_metric(text: str) -> str:
    """A recommendation without its "metric:" prefix."""
    _, sep, rest = text.partition(": ")
    return rest if sep else text


def capitalised(text: str) -> str:
    """The first letter upper-case, the rest as it is (a recommendation starting a sentence)."""
    return text[:1].upper() + text[1:]


def first_sentence(text: str) -> str:
    """Up to the first full stop that ends a sentence (not a decimal point)."""
    m = re.search(r"\.\s+(?=[A-Z(])", text)
    return text[: m.start() + 1] if m else text


def verdict_kind(a: dict) -> str:
    """One word for a metric's outcome: cross, spec, baseline, tie or mixed."""
    if a["crossovers"]:
        return "cross"
    vs = {c["verdict"] for c in a["comparisons"]}
    if vs == {"spec"}:
        return "spec"
    if vs == {"baseline"}:
        return "baseline"
    if vs <= {"tie"}:
        # a tie too wide to call (crossover.py §3) is not "no difference"
        return "inconclusive" if any(c.get("wide") for c in a["comparisons"]) else "tie"
    if "spec" in vs and "baseline" not in vs:
        return "spec-some"
    if "baseline" in vs and "spec" not in vs:
        return "baseline-some"
    return "mixed"


KIND_CHIP = {"cross": ("crossover", "chip-cross"), "spec": ("speculation wins", "chip-spec"),
             "baseline": ("baseline wins", "chip-base"), "tie": ("no difference", "chip-tie"),
             "spec-some": ("speculation wins some", "chip-spec"), "baseline-some": ("baseline wins some", "chip-base"),
             "mixed": ("mixed, unconfirmed", "chip-tie"), "inconclusive": ("inconclusive", "chip-tie"),
             "not compared": ("not compared", "chip-none")}


def kind_of(m: dict | None) -> str:
    """A metric entry's verdict kind (crossover.json from before "verdict": from its comparisons)."""
    if not m:
        return "not compared"
    return m.get("verdict") or verdict_kind(m["analysis"])


def short(m: dict) -> str:
    """A metric's verdict for a summary line: its first sentence, then what it rests on (the caveat)."""
    rec = m["recommendation"]
    cav = m.get("caveat") or ""
    body = rec[: len(rec) - len(cav)].rstrip() if cav and rec.endswith(cav) else rec
    return " ".join(x for x in (first_sentence(without_metric(body)), cav) if x)


def headline(res: dict, metric: str = PRIMARY) -> list[tuple[str, str, str]]:
    """(workload, sentence, kind) per workload, from the primary metric's verdict (see :func:`short`).

    A workload never compared is listed as "not compared", with the sentence that says why.
    """
    out = []
    for wl, per in res["workloads"].items():
        if metric in per:
            out.append((wl, short(per[metric]), kind_of(per[metric])))
        elif (res.get("coverage") or {}).get(wl, {}).get("status") == "not compared":
            out.append((wl, without_metric(res["coverage"][wl].get("recommendation", "not compared")), "not compared"))
    order = {"cross": 0, "mixed": 1, "baseline": 2, "baseline-some": 2, "spec": 3, "spec-some": 3, "tie": 4,
             "inconclusive": 4, "not compared": 5}
    return sorted(out, key=lambda t: (order.get(t[2], 5), t[0] == "all", t[0]))


def top_sentence(res: dict) -> str:
    """The one-line answer at the top of the page."""
    items = headline(res)
    if not items:
        return "No concurrency was measured by both targets, so nothing can be compared."
    crossing = [(wl, t) for wl, t, k in items if k == "cross"]
    if len(items) == 1:
        return capitalised(items[0][1])  # headline's short form: first sentence and what it rests on
    if crossing:
        wl, t = crossing[0]
        t = first_sentence(t).rstrip(".")
        more = len(crossing) - 1
        return f"{wl}: {t}" + (f" — and {more} more workload{'s' if more > 1 else ''} cross over, "
                                                   "see below." if more else ".")
    kinds = {k for _, _, k in items}
    caveats = any((per.get(PRIMARY) or {}).get("caveat") for per in res["workloads"].values())
    rests = " (see below what each verdict rests on)." if caveats else "."
    if kinds == {"spec"}:
        return "Speculation wins output throughput at every measured concurrency in every workload" + rests
    if kinds == {"baseline"}:
        return "The baseline wins output throughput at every measured concurrency in every workload" + rests
    never = [wl for wl, _, k in items if k == "not compared"]
    if never:
        return (f"No output-throughput crossover in any workload compared; {', '.join(never)} "
                f"{'was' if len(never) == 1 else 'were'} not compared. The verdict per workload is below.")
    return "No output-throughput crossover in any workload; the verdict per workload is below."


def winner_word(c: dict) -> str:
    """A stage's "winner" cell: the better target's role, "tie", or "inconclusive" for a tie too wide to call."""
    if c["verdict"] != "tie":
        return c["verdict"]
    return "inconclusive" if c.get("wide") else "tie"


def _policy(xs: list[dict]) -> str:
    """Crossovers (in C order) as an on/off rule in running-batch terms."""
    on = xs[0]["direction"] == "spec_to_baseline"
    parts = []
    for i, x in enumerate(xs):
        v = f"≈{fmt_c(x['estimate'])} ({fmt_c(x['ci_low'])}–{fmt_c(x['ci_high'])})"
        parts.append(f"{'on' if on else 'off'} below a running batch of {v}" if i == 0
                     else f"{'on' if on else 'off'} from there to {v}")
        on = not on
    return "speculation " + ", ".join(parts) + f", {'on' if on else 'off'} above it"


def sglang_hint(doc: dict, res: dict, metric: str = PRIMARY) -> str | None:
    """For an SGLang speculative server: the throughput crossover(s) in running-batch terms."""
    server = servers(doc).get(res["spec"])
    if not server or server.get("engine") != "sglang":
        return None
    mrr = max_running(server)
    if mrr is None:
        return None
    inside, beyond = [], []
    for wl, per in res["workloads"].items():
        if metric not in per:
            continue
        xs = sorted(per[metric]["analysis"]["crossovers"], key=lambda x: x["estimate"])
        if not xs:
            continue
        if all(x["ci_high"] <= mrr for x in xs):
            inside.append(f"{wl}: {_policy(xs)}")
        else:
            beyond.append(f"{', '.join('C≈' + fmt_c(x['estimate']) for x in xs if x['ci_high'] > mrr)} ({wl})")
    if not inside and not beyond:
        return None
    parts = []
    if inside:
        parts.append(f"For SGLang: at concurrency ≤ max_running_requests ({mrr}) the running batch is ≈ C, so as an "
                     f"adaptive threshold in batch-size terms — {'; '.join(inside)}.")
    if beyond:
        parts.append(f"The crossover at {', '.join(beyond)} lies beyond max_running_requests ({mrr}): there the "
                     "running batch stays at that cap and further requests queue, so it is not a batch-size threshold.")
    if (server.get("server_info") or {}).get("speculative_adaptive"):
        parts.append("(The speculative server already ran with speculative_adaptive on.)")
    return " ".join(parts)


def slug(text: str) -> str:
    """A workload or metric name as an HTML anchor and a PNG file name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "workload"

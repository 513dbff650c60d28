"""Plain-text tables of stage results for the terminal."""

from __future__ import annotations


def _f(v, nd=1) -> str:
    if v is None or v == "":
        return "-"
    return f"{v:.{nd}f}" if isinstance(v, float) else str(v)


def stage_table(stages: list[dict]) -> str:
    head = ["target", "C", "ok", "fail", "tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "gap p50",
            "tok/chunk", "TPOT p50", "accept", "client"]
    rows = [head]
    from loadgen.analysis.compare import cut_words

    for d in stages:
        flag = "BOUND" if d["client"]["client_bound"] else "ok"
        if d.get("incomplete"):
            flag += " incomplete"
        elif d.get("cut"):
            flag += " cut"
        rows.append([
            d["target"], str(d["concurrency"]), str(d["requests"]["completed"]), str(d["requests"]["failed"]),
            _f(d["output_tokens_per_s"]), _f(d["ttft"].get("p50"), 2), _f(d["ttft"].get("p99"), 2),
            _f(d["itl"].get("p50"), 2), _f(d["itl"].get("p99"), 2), _f(d["chunk_gap"].get("p50"), 2),
            _f(d["tokens_per_chunk"].get("mean"), 2), _f(d["tpot"].get("p50"), 2),
            _f(d["accept_length"].get("mean"), 2), flag,
        ])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    notes = []
    for d in stages:
        for reason in d["client"]["reasons"]:
            notes.append(f"{d['target']} C={d['concurrency']}: client-bound: {reason}")
        if d["client"].get("client_bound") and d["client"].get("advice"):
            notes.append(f"{d['target']} C={d['concurrency']}: advice: {d['client']['advice']}")
        if d.get("cut"):
            notes.append(f"{d['target']} C={d['concurrency']}: {cut_words(d['cut'])}")
        for f, info in d["requests"]["failures"].items():
            notes.append(f"{d['target']} C={d['concurrency']}: {info['count']} × {f}: {info['first_message']}")
        if d.get("token_counts") == "approximate":
            notes.append(f"{d['target']} C={d['concurrency']}: per-token figures are APPROXIMATE "
                         "(the server sent no per-chunk usage)")
        for n in d.get("notes", []):
            notes.append(f"{d['target']} C={d['concurrency']}: {n}")
    return "\n".join(lines + ([""] + notes if notes else []))

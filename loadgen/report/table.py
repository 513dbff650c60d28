"""Plain-text tables of stage results for the terminal."""

from __future__ import annotations


def _f(v, nd=1) -> str:
    if v is None or v == "":
        return "-"
    return f"{v:.{nd}f}" if isinstance(v, float) else str(v)


def where(d: dict) -> str:
    """A stage's place on its ladder as the tables say it: "C=10", or an open loop's "rate=2.5/s"."""
    return f"rate={d['rate']:.3g}/s" if d.get("rate") is not None else f"C={d['concurrency']}"


def stage_table(stages: list[dict]) -> str:
    if any(d.get("open_loop") for d in stages):
        return open_table(stages)
    head = ["target", "C", "ok", "fail", "tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "gap p50",
            "tok/chunk", "TPOT p50", "accept", "client"]
    rows = [head]
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
    if any((d.get("reasoning_tokens") or {}).get("count") for d in stages):
        # a reasoning model's stages: the answer's first token and the thought's length beside TTFT (the first
        # token of either kind), so a long thought does not read as a slow server
        at = head.index("TTFT p99") + 1
        for row, d in zip(rows[1:], stages):
            row[at:at] = [_f((d.get("ttfo") or {}).get("p50"), 2), _f((d.get("reasoning_tokens") or {}).get("mean"))]
        head[at:at] = ["TTFO p50", "reasoning tok"]
    return _layout(rows, stages)


def open_table(stages: list[dict]) -> str:
    """Open-loop stages: offered and achieved rates, latencies from the planned send, dispatch lag, saturation."""
    from loadgen.stage.saturation import saturation

    head = ["target", "rate/s", "ended/s", "ok", "fail", "tok/s", "TTFT·plan p50", "TTFT·plan p99", "TPOT p50",
            "ITL p99", "E2E·plan p99", "lag p99", "server", "client"]
    rows = [head]
    sats = [saturation(d) for d in stages]  # each reads the stage's binned histograms: once
    for d, sat in zip(stages, sats):
        ol = d.get("open_loop") or {}
        flag = "BOUND" if d["client"]["client_bound"] else "ok"
        if d.get("incomplete"):
            flag += " incomplete"
        rows.append([
            d["target"], _f(d.get("rate"), 3 if (d.get("rate") or 0) < 10 else 1), _f(sat.ended_per_s, 2),
            str(d["requests"]["completed"]), str(d["requests"]["failed"]), _f(d["output_tokens_per_s"]),
            _f(d["ttft_planned"].get("p50"), 1), _f(d["ttft_planned"].get("p99"), 1), _f(d["tpot"].get("p50"), 2),
            _f(d["itl"].get("p99"), 2), _f(d["e2e_planned"].get("p99"), 0),
            _f((ol.get("dispatch_lag_ms") or {}).get("p99"), 2), "SATURATED" if sat.saturated else "keeps up", flag,
        ])
    out = _layout(rows, stages)
    sat_notes = [f"{d['target']} {where(d)}: saturated: {s.why}" for d, s in zip(stages, sats) if s.saturated]
    return out + ("\n" + "\n".join(sat_notes) if sat_notes else "")


def aligned(rows: list[list[str]], rule: bool = True) -> list[str]:
    """The rows right-aligned in columns two spaces apart (the first row is the head), with a rule of dashes
    under the head unless ``rule`` is False: every table the terminal prints."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    if rule:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def _layout(rows: list[list[str]], stages: list[dict]) -> str:
    from loadgen.analysis.compare import cut_words

    lines = aligned(rows)
    notes = []
    for d in stages:
        for reason in d["client"]["reasons"]:
            notes.append(f"{d['target']} {where(d)}: client-bound: {reason}")
        if d["client"].get("client_bound") and d["client"].get("advice"):
            notes.append(f"{d['target']} {where(d)}: advice: {d['client']['advice']}")
        if d.get("cut"):
            notes.append(f"{d['target']} {where(d)}: {cut_words(d['cut'])}")
        for f, info in d["requests"]["failures"].items():
            notes.append(f"{d['target']} {where(d)}: {info['count']} × {f}: {info['first_message']}")
        if d.get("token_counts") == "approximate":
            notes.append(f"{d['target']} {where(d)}: per-token figures are APPROXIMATE "
                         "(the server sent no per-chunk usage)")
        for n in d.get("notes", []):
            notes.append(f"{d['target']} {where(d)}: {n}")
    return "\n".join(lines + ([""] + notes if notes else []))

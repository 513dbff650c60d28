"""The configurations a crossover compares, from typed settings: one list, however the user named them.

In: :class:`~loadgen.settings.knobs.Settings` (``--target``, ``--start``, ``--adaptive``, the
two-URL sugar ``--baseline-url/--spec-url``, ``--url`` with start commands) and a config's
``[targets.X]`` tables. Out: :class:`Configuration` list, the reference first, or None (the
embedded simulators); every inconsistency one line naming the flag.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.errors import LoadgenError
from loadgen.settings import parse
from loadgen.settings.config import TargetConf, check_url
from loadgen.settings.knobs import Settings


@dataclass
class Configuration:
    """One configuration to compare: its label, where it answers, how loadgen starts it (if it does)."""

    label: str
    url: str
    start: str | None = None
    adaptive: bool = False
    conf: TargetConf | None = None
    """Its [targets.X] table, when it comes from a --config."""


def configurations(s: Settings, targets_conf: list[TargetConf]) -> list[Configuration] | None:
    """The configurations to compare, the reference first, from the flags or the config's [targets.*];
    None: the embedded simulators (``--sim-modes``)."""
    given = parse.labelled(s.target, "--target", "URL")
    starts = parse.labelled(s.start, "--start", "CMD")
    adaptive = [parse.label(a, "--adaptive") for a in s.adaptive or []]
    if given and (s.baseline_url or s.spec_url or s.url):
        raise LoadgenError("--target names each configuration's URL: give it or --url/--baseline-url/--spec-url, "
                           "not both")
    if starts and (s.baseline_start or s.spec_start):
        raise LoadgenError("--start LABEL=CMD and --baseline-start/--spec-start: give one form, not both")
    if given:
        out = [Configuration(label, check_url(f"--target {label}", url)) for label, url in given]
    elif s.url is not None:
        out, starts = _one_port(s, starts), []
    elif s.baseline_url or s.spec_url:
        if (s.baseline_url is None) != (s.spec_url is None):
            raise LoadgenError("give both --baseline-url and --spec-url, or neither (embedded simulator)")
        out = [Configuration("baseline", s.baseline_url, s.baseline_start),
               Configuration("spec", s.spec_url, s.spec_start)]
    else:
        out = [Configuration(tc.label, tc.url, tc.start, tc.adaptive, tc) for tc in targets_conf]
    if not out:
        if starts or s.baseline_start or s.spec_start:
            raise LoadgenError("a start command needs the URL its server answers on: --target LABEL=URL or --url")
        if adaptive:
            raise LoadgenError("--adaptive names a --target; on the embedded simulator the mode spec-adaptive is "
                               "adaptive by itself")
        return None
    if s.sim_modes:
        raise LoadgenError("--sim-modes chooses the embedded simulators: it does not go with --target or URLs")
    if len(out) < 2:
        where = f"{s.config}: targets" if targets_conf and not given else "--target"
        raise LoadgenError(f"{where}: at least two configurations to compare (the first is the reference), "
                           f"got {len(out)}")
    by_label = {c.label: c for c in out}
    for label, cmd in starts:
        if label not in by_label:
            raise LoadgenError(f"--start: {label!r} names no --target (known: {', '.join(by_label)})")
        by_label[label].start = cmd
    for label in adaptive:
        if label not in by_label:
            raise LoadgenError(f"--adaptive: {label!r} names no configuration (known: {', '.join(by_label)})")
        by_label[label].adaptive = True
    return out


def _one_port(s: Settings, starts: list[tuple[str, str]]) -> list[Configuration]:
    """``--url``: one port every configuration answers on in turn, each started by its command."""
    if s.baseline_url or s.spec_url:
        raise LoadgenError("--url serves every target: give it or --baseline-url/--spec-url, not both")
    if starts:
        return [Configuration(label, s.url, cmd) for label, cmd in starts]
    if s.baseline_start and s.spec_start:
        return [Configuration("baseline", s.url, s.baseline_start), Configuration("spec", s.url, s.spec_start)]
    raise LoadgenError("--url needs --baseline-start and --spec-start (or --start LABEL=CMD for each "
                       "configuration): loadgen starts each server on that port in turn (for running "
                       "servers give --baseline-url and --spec-url, or --target LABEL=URL)")

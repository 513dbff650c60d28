"""The flags of every front, derived from :mod:`loadgen.settings.knobs`.

In: an argparse parser and a front ("run", "crossover"), or Locust's parser; later the parsed
namespace. Out: the flags registered (each removed old name a one-line error naming its flag),
each front's defaults, and :func:`typed`: the namespace as a typed :class:`Settings`.
"""

from __future__ import annotations

import argparse
from typing import Any

from loadgen.settings.knobs import Knob, Settings, knobs

SECTIONS = {"target": "target", "stages": "stages", "traffic": "traffic", "output": "results",
            "analysis": "analysis", "sim": "embedded simulator"}
SIM_WHEN = {"run": "when --url is omitted", "crossover": "when no URL is given"}
COMMON = {"run": ("url", "protocol", "model", "workload", "ladder", "duration", "max_run_time", "wait_for_server",
                  "out"),
          "crossover": ("baseline_url", "spec_url", "protocol", "model", "workload", "ladder", "duration",
                        "max_run_time", "wait_for_server", "out", "from_")}
"""The flags most runs set, first in --help: where the servers are, how to speak to them, what to send, how
long (a vLLM user needs --protocol chat and --model before anything else; 62 flags came before in field order)."""


def renamed_error(used: str, canonical: str) -> str:
    return f"loadgen: error: {used} was renamed: use {canonical}"


def _renamed(canonical: str) -> type[argparse.Action]:
    """The action of a removed old name: one line naming ``canonical`` and exit status 2 (argparse's
    ``parser.exit``, so Locust's parser and its config files say it the same way), no usage, no traceback."""

    class Renamed(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            parser.exit(2, renamed_error(option_string, canonical) + "\n")

    return Renamed


def _renamed_kwargs(k: Knob) -> dict[str, Any]:
    # A value or none (the error comes either way); hidden from --help and from namespaces.
    return {"dest": "renamed", "default": argparse.SUPPRESS, "help": argparse.SUPPRESS, "nargs": "?",
            "action": _renamed(k.flag)}


def current_names(argv: list[str], front: str) -> list[str]:
    """``argv`` with each removed old name as its flag: the flags a run.json recorded before the names went
    (``--resume`` goes on with them)."""
    new = {old: k.flag for _, k in knobs(front) for old in k.renamed}
    out = []
    for a in argv:
        name, eq, value = a.partition("=")
        out.append(new[name] + eq + value if name in new else a)
    return out


def _kwargs(parser, name: str, k: Knob, front: str) -> dict[str, Any]:
    kw: dict[str, Any] = {"dest": name, "default": k.default_for(front)}
    help_ = k.help_for(front)
    if help_:
        # argparse formats help with %: a literal one (a default of "5%") is doubled
        kw["help"] = (help_.format(default=kw["default"]) if "{default" in help_ else help_).replace("%", "%%")
    if k.action != "store_true":
        if k.type is not None and front != "locust":  # Locust options stay text (its web UI form sends text)
            kw["type"] = k.type
        if k.choices is not None and front != "locust":
            kw["choices"] = k.choices
        if k.metavar:
            kw["metavar"] = k.metavar
    kw["action"] = k.action
    return kw


def register(parser: argparse.ArgumentParser, front: str) -> None:
    """``front``'s flags on ``parser``, in --help groups: the common ones first, then each section's."""
    own = knobs(front)
    first = COMMON.get(front, ())
    by_name = dict(own)
    groups = [("common", [(n, by_name[n]) for n in first if n in by_name])]
    for section, title in SECTIONS.items():  # the groups in this order, each flag in field order
        if section == "sim":
            title += f" ({SIM_WHEN[front]})"
        groups.append((title, [(name, k) for name, k in own if k.section == section and name not in first]))
    for title, mine in groups:
        g = parser.add_argument_group(title) if mine else None
        for name, k in mine:
            g.add_argument(k.flag, **_kwargs(parser, name, k, front))
            if k.renamed:
                g.add_argument(*k.renamed, **_renamed_kwargs(k))


def add_locust_options(parser) -> None:
    """The Locust ramp's options, straight on Locust's parser: LocustArgumentParser.add_argument takes
    include_in_web_ui (its groups do not), and the options then show, editable, in the web UI's start form
    (by dest: the form's field is the option's name with underscores)."""
    for name, k in knobs("locust"):
        parser.add_argument(k.flag, include_in_web_ui=k.web_ui, **_kwargs(parser, name, k, "locust"))
        if k.renamed:
            parser.add_argument(*k.renamed, include_in_web_ui=False, **_renamed_kwargs(k))


def locust_keys() -> tuple[str, ...]:
    """The attributes of Locust's parsed options that loadgen reads back (environment.parsed_options)."""
    return tuple(name for name, _ in knobs("locust"))


def defaults(front: str) -> dict[str, Any]:
    """``front``'s flag defaults by dest: to tell a flag left alone from one given (for --config)."""
    return {name: k.default_for(front) for name, k in knobs(front)}


CHECKED = frozenset({"integer", "number", "seconds", "url", "path", "word", "nonblank", "length"})
"""The knobs' checks (config._Checker's) that a flag's value gets too, after its parse: a flag and its TOML key
refuse the same values (--read-timeout 0s, --sim-time-scale 0, a URL's port 99999), each before any load. The
others are the flag's parse or argparse's choices already."""


def typed(args: argparse.Namespace, front: str) -> Settings:
    """The parsed flags as Settings: ladders as lists, durations in seconds, SLOs, headers.

    A bad value is one LoadgenError naming the canonical flag."""
    from loadgen.settings.config import check_flag

    s = Settings()
    for name, k in knobs(front):
        raw = v = getattr(args, name, None)
        if k.parse is not None and (v is not None or k.parse_none):
            v = k.parse(v, k.flag)
        if v is not None and k.check in CHECKED:
            # a duration is checked as typed ("must be > 0, got '0s'"), the rest as parsed
            check_flag(k, raw if k.check == "seconds" and isinstance(raw, str) else v)
        setattr(s, name, v)
    return s


def typed_defaults(front: str) -> Settings:
    """``front``'s defaults, typed: what a knob left alone reads as (to tell it from one given)."""
    return typed(argparse.Namespace(**defaults(front)), front)

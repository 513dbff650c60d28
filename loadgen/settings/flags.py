"""The flags of every front, derived from :mod:`loadgen.settings.knobs`.

In: an argparse parser and a front ("run", "crossover"), or Locust's parser; later the parsed
namespace. Out: the flags registered (old names as aliases that print one deprecation line),
each front's defaults, and :func:`typed`: the namespace as a typed :class:`Settings`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from loadgen.settings.knobs import Knob, Settings, knobs

SECTIONS = {"target": "target", "stages": "stages", "traffic": "traffic", "output": "results",
            "analysis": "analysis", "sim": "embedded simulator"}
SIM_WHEN = {"run": "when --url is omitted", "crossover": "when no URL is given"}


def note_deprecated(used: str, canonical: str) -> None:
    sys.stderr.write(f"loadgen: note: {used} is deprecated; use {canonical}\n")
    sys.stderr.flush()


def _deprecating(base: type[argparse.Action], canonical: str, aliases: tuple[str, ...]) -> type[argparse.Action]:
    """``base`` (store, store_true, append) that says so when called by one of its old names."""

    class Deprecating(base):  # type: ignore[misc, valid-type]
        def __call__(self, parser, namespace, values, option_string=None):
            if option_string in aliases:
                note_deprecated(option_string, canonical)
            super().__call__(parser, namespace, values, option_string)

    Deprecating.__name__ = f"Deprecating{base.__name__}"
    return Deprecating


def _kwargs(parser, name: str, k: Knob, front: str) -> dict[str, Any]:
    kw: dict[str, Any] = {"dest": name, "default": k.default_for(front)}
    help_ = k.help_for(front)
    if help_:
        kw["help"] = help_.format(default=kw["default"]) if "{default" in help_ else help_
    if k.action != "store_true":
        if k.type is not None and front != "locust":  # Locust options stay text (its web UI form sends text)
            kw["type"] = k.type
        if k.choices is not None and front != "locust":
            kw["choices"] = k.choices
        if k.metavar:
            kw["metavar"] = k.metavar
    base = parser._registry_get("action", k.action)
    kw["action"] = _deprecating(base, k.flag, k.aliases) if k.aliases else k.action
    return kw


def register(parser: argparse.ArgumentParser, front: str) -> None:
    """``front``'s flags on ``parser``, in --help groups."""
    own = knobs(front)
    for section, title in SECTIONS.items():  # the groups in this order, each flag in field order
        if section == "sim":
            title += f" ({SIM_WHEN[front]})"
        mine = [(name, k) for name, k in own if k.section == section]
        g = parser.add_argument_group(title) if mine else None
        for name, k in mine:
            g.add_argument(k.flag, *k.aliases, **_kwargs(parser, name, k, front))


def add_locust_options(parser) -> None:
    """The Locust ramp's options, straight on Locust's parser: LocustArgumentParser.add_argument takes
    include_in_web_ui (its groups do not), and the options then show, editable, in the web UI's start form
    (by dest: the form's field is the option's name with underscores)."""
    for name, k in knobs("locust"):
        parser.add_argument(k.flag, *k.aliases, include_in_web_ui=k.web_ui, **_kwargs(parser, name, k, "locust"))


def locust_keys() -> tuple[str, ...]:
    """The attributes of Locust's parsed options that loadgen reads back (environment.parsed_options)."""
    return tuple(name for name, _ in knobs("locust"))


def defaults(front: str) -> dict[str, Any]:
    """``front``'s flag defaults by dest: to tell a flag left alone from one given (for --config)."""
    return {name: k.default_for(front) for name, k in knobs(front)}


def typed(args: argparse.Namespace, front: str) -> Settings:
    """The parsed flags as Settings: ladders as lists, durations in seconds, SLOs, headers.

    A bad value is one LoadgenError naming the canonical flag."""
    s = Settings()
    for name, k in knobs(front):
        v = getattr(args, name, None)
        if k.parse is not None and (v is not None or k.parse_none):
            v = k.parse(v, k.flag)
        setattr(s, name, v)
    return s

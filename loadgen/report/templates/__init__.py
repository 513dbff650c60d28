"""The page's fixed text as package files: CSS, JavaScript and the HTML templates.

In: a file name here (``page.html``, ``workload.html``, ``run-card.html``, ``report.css``,
``report.js``). Out: its text, read with :mod:`importlib.resources` so it works from a
wheel as well as a checkout. The templates are :meth:`str.format` templates: ``{name}``
is filled in, so they hold no other braces (CSS and JS are filled in, never formatted).
"""

from __future__ import annotations

from importlib import resources


def read(name: str) -> str:
    """The file's text, exactly."""
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


def fragment(name: str) -> str:
    """A template that the page inlines: its text without the file's final newline."""
    return read(name).removesuffix("\n")

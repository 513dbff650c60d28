"""Secrets are sent, never written: the one place that masks them in what loadgen writes.

In: what is about to be written — a results document (dict/list/str), a command line, a URL, a header
table, a line of text, or the terminal streams themselves. Out: the same with every secret
replaced by ``***``:

- header values (``--header "Authorization: Bearer …"`` → ``Authorization: ***``, a ``headers`` or
  ``header`` table → ``{"Authorization": "***"}``): a header's name stays, its value never does;
- the string value of any key naming a credential (``api_key``, ``token``, ``password``, ``secret``,
  ``authorization``, ``cookie``, … — :func:`is_secret_key`, case-insensitive, ``_``/``-`` ignored);
- a URL's ``user:password@`` (``http://***@host:port/path``: scheme, host, port and path stay);
- anywhere in any text, a value seen as a secret in this process (:func:`remember`: the targets'
  credential headers' values (:func:`secret_header`) and URL passwords, a TOML ``api_key``), so an
  echo of one is caught too.

The values themselves stay where they are used (``Target.headers``, ``Target.url``): only what is
serialized — run.json/.csv/.hlog, crossover.json, rates.json, report.html, the Locust UI's JSON,
the terminal (:func:`guard_streams`) — passes through here.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any
from urllib.parse import unquote

MASK = "***"
MIN_SECRET_LEN = 6
"""A remembered value shorter than this is masked where it is structured (a header, a credential key, a URL)
but not searched for in free text: three characters would match inside ordinary words and numbers."""

_SECRET_ENDINGS = ("apikey", "token", "password", "passwd", "passphrase", "secret", "authorization", "auth",
                   "credential", "credentials", "cookie", "privatekey", "accesskey", "secretkey", "sessionid",
                   "bearer")
_HEADER_FLAGS = ("--header",)
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s/@?#'\"<>]+)@")
_known: set[str] = set()


def is_secret_key(name: Any) -> bool:
    """Whether a key names a credential: ``api_key``, ``X-Api-Key``, ``hf_token``, ``password``,
    ``client_secret``, ``Authorization``… (``max_tokens`` or ``token_counts`` do not)."""
    if not isinstance(name, str):
        return False
    norm = re.sub(r"[^a-z0-9]", "", name.lower())
    return bool(norm) and norm.endswith(_SECRET_ENDINGS)


def remember(*values: Any) -> None:
    """Values that must never be written, as this process met them (masked in any text from now on)."""
    for v in values:
        if isinstance(v, str) and v.strip():
            v = v.strip()
            _known.add(v)
            head, _, last = v.rpartition(" ")
            if head and len(last) >= MIN_SECRET_LEN:  # "Bearer sk-…": the token alone too
                _known.add(last)


def secret_header(name: Any) -> bool:
    """A header whose value is a credential (``Authorization``, ``X-Api-Key``, ``Cookie``, ``X-Auth-Token``,
    ``Ocp-Apim-Subscription-Key``…): its value is also searched for in free text. Every header's value is
    masked where headers are written (``--header`` in argv, a ``headers`` table); a plain one's
    (``Accept: application/json``, ``X-Model: default``) is not hunted in other text, where it would
    mask ordinary words."""
    if not isinstance(name, str):
        return False
    norm = re.sub(r"[^a-z0-9]", "", name.lower())
    return is_secret_key(name) or norm.endswith("key") or "auth" in norm


def remember_headers(headers: dict | None) -> None:
    remember(*(v for k, v in (headers or {}).items() if secret_header(k)))


def remember_url(url: Any) -> None:
    """A URL's password (and user), when it carries ``user:password@``."""
    if isinstance(url, str):
        for m in _URL_USERINFO.finditer(url):
            _, _, password = m.group("userinfo").partition(":")
            remember(password, unquote(password))


def url(u: str) -> str:
    """``http://user:pw@host:8000/v1`` → ``http://***@host:8000/v1``."""
    return _URL_USERINFO.sub(lambda m: m.group("scheme") + MASK + "@", u)


def headers(h: dict) -> dict:
    """Every header's value masked, its name kept."""
    return {k: MASK for k in h}


def header_line(line: str) -> str:
    """``Name: value`` → ``Name: ***`` (a line with no ``:`` is all value)."""
    name, sep, _ = line.partition(":")
    return f"{name}: {MASK}" if sep else MASK


def text(s: str) -> str:
    """Any text with URL credentials and remembered secrets masked."""
    if "@" in s:
        s = url(s)
    if _known:
        for v in sorted(_known, key=len, reverse=True):
            if len(v) >= MIN_SECRET_LEN and v in s:
                s = s.replace(v, MASK)
    return s


def argv(args: list) -> list[str]:
    """A command line as it may be written: ``--header`` values masked after their name, the value of
    a flag naming a credential (``--api-key X``) masked, URLs' credentials and remembered secrets masked."""
    out: list[str] = []
    mask_next = None
    for a in map(str, args):
        if mask_next is not None:
            out.append(header_line(a) if mask_next == "header" else MASK)
            mask_next = None
            continue
        flag, eq, value = a.partition("=")
        if a.startswith("--") and (flag in _HEADER_FLAGS or is_secret_key(flag)):
            kind = "header" if flag in _HEADER_FLAGS else "secret"
            if eq:
                out.append(f"{flag}={header_line(value) if kind == 'header' else MASK}")
            else:
                out.append(a)
                mask_next = kind
            continue
        out.append(text(a))
    return out


def document(obj: Any, key: Any = None) -> Any:
    """A JSON-like document (dicts, lists, strings, numbers) with every secret masked: a new object,
    the one given is left as it is (a run's live document keeps its real URLs for the run itself)."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            kk = text(k) if isinstance(k, str) else k
            if isinstance(k, str) and k.lower() in ("headers", "header") and isinstance(v, dict):
                out[kk] = headers(v)
            elif isinstance(k, str) and k == "argv" and isinstance(v, list):
                out[kk] = argv(v)
            elif is_secret_key(k) and isinstance(v, str):
                out[kk] = MASK
            else:
                out[kk] = document(v, k)
        return out
    if isinstance(obj, (list, tuple)):
        return [document(v) for v in obj]
    if isinstance(obj, str):
        return text(obj)
    return obj


class _Guarded:
    """A text stream whose writes are masked (the rest of the stream's face is the stream's)."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def write(self, s: str) -> int:
        self._inner.write(text(s) if isinstance(s, str) else s)
        return len(s)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


def _guard_logging() -> None:
    """Every log record's message masked as it is made, whatever handler writes it (a log file included)."""
    make = logging.getLogRecordFactory()
    if getattr(make, "redacting", False):
        return

    def masked_record(*args, **kwargs):
        rec = make(*args, **kwargs)
        try:
            msg = rec.getMessage()
        except Exception:  # a bad format is the handler's to report, as it would without us
            return rec
        clean = text(msg)
        if clean != msg:
            rec.msg, rec.args = clean, None
        return rec

    masked_record.redacting = True
    logging.setLogRecordFactory(masked_record)


def guard_streams() -> tuple:
    """Mask what is printed and logged from now on: ``sys.stdout`` and ``sys.stderr`` wrapped (once), so
    terminal output and log handlers created afterwards, and every log record's message (a log file's too).
    Returns the streams as they were, for :func:`unguard_streams`."""
    _guard_logging()
    before = (sys.stdout, sys.stderr)
    if not isinstance(sys.stdout, _Guarded) and sys.stdout is not None:
        sys.stdout = _Guarded(sys.stdout)
    if not isinstance(sys.stderr, _Guarded) and sys.stderr is not None:
        sys.stderr = _Guarded(sys.stderr)
    return before


def unguard_streams(before: tuple) -> None:
    sys.stdout, sys.stderr = before

"""``switchboard send``: sign a file and POST it exactly as a producer would."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from switchboard_cairn.source import CairnSource
from switchboard_generic.source import GenericSource
from switchboard_gitea.source import GiteaSource
from switchboard_github.source import GithubSource

#: Exit codes: 0 the target answered 2xx, 1 anything else, 2 the command was misused.
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DEFAULT_TIMEOUT = 10.0


class SigningSource(Protocol):
    """The producer side of a first-party source."""

    name: str

    def sign(self, body: bytes, secret: bytes | None, kind: str | None) -> dict[str, str]:
        """The headers this producer sends with ``body``."""
        ...


SOURCES: dict[str, SigningSource] = {
    s.name: s for s in (CairnSource(), GiteaSource(), GithubSource(), GenericSource())
}


class UsageError(Exception):
    """The command line or its inputs cannot make a request (exit 2)."""


def _rfc3339_now(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def stamp_cairn_body(body: bytes, *, force: bool, now: float | None = None) -> bytes:
    """``body`` with ``event_id`` and ``created_at`` set, as Cairn does when it emits.

    With ``force`` both are replaced; otherwise only missing ones are added and a body
    that has both is returned byte for byte (so its signature is over the file as is).
    """
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"cairn body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise UsageError("cairn body is not a JSON object")
    stamps = {
        "event_id": str(uuid.uuid4()),
        "created_at": _rfc3339_now(time.time() if now is None else now),
    }
    missing = {k: v for k, v in stamps.items() if force or not doc.get(k)}
    if not missing:
        return body
    doc.update(missing)
    # Compact, like Cairn's Go encoder; json keeps big integers exact on the way through.
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _merge_headers(base: dict[str, str], extra: Iterable[tuple[str, str]]) -> dict[str, str]:
    # An explicit --header replaces the producer's header of the same name (any case), so a
    # test can send a forged X-Cairn-Event-Id or a wrong signature on purpose.
    merged = dict(base)
    for name, value in extra:
        for existing in [k for k in merged if k.lower() == name.lower()]:
            del merged[existing]
        merged[name] = value
    return merged


def build_request(
    source: str,
    body: bytes,
    secret: bytes | None,
    event: str | None,
    extra_headers: Mapping[str, str] | Iterable[tuple[str, str]],
    stamp: bool,
    *,
    now: float | None = None,
) -> tuple[bytes, dict[str, str]]:
    """The exact bytes and headers ``source``'s producer would POST for ``body``.

    Cairn bodies are stamped (see :func:`stamp_cairn_body`) before signing; other
    sources send ``body`` unchanged and ignore ``stamp``. ``extra_headers`` are applied
    last and win. Raises :class:`UsageError` for an unknown source or an unstampable body.
    """
    signer = SOURCES.get(source)
    if signer is None:
        raise UsageError(f"unknown source {source!r}; choose from {', '.join(SOURCES)}")
    if source == "cairn":
        body = stamp_cairn_body(body, force=stamp, now=now)
    headers = signer.sign(body, secret, event)
    extra = extra_headers.items() if isinstance(extra_headers, Mapping) else extra_headers
    return body, _merge_headers(headers, extra)


def parse_header(text: str) -> tuple[str, str]:
    """``"Name: value"`` from ``--header``; the value may itself contain colons."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise UsageError(f"--header {text!r} is not NAME:VALUE")
    return name.strip(), value.strip()


def read_secret(spec: str | None) -> bytes | None:
    """``--secret``: the secret itself, or ``@PATH`` to read it from a file (keeps it out of ps)."""
    if not spec:
        return None
    if not spec.startswith("@"):
        return spec.encode("utf-8")
    try:
        text = Path(spec[1:]).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read secret file {spec[1:]!r}: {exc}") from None
    # Editors and `echo` add a trailing newline that is never part of the secret.
    return text.rstrip("\r\n").encode("utf-8")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # Producers never follow redirects (a 3xx is a failed delivery), so neither does send.
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _decode_response(raw: bytes) -> Any:
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, Any]:
    """POST and return (status, parsed response); status 0 when no response arrived."""
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, _decode_response(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, _decode_response(exc.read())
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return 0, f"request failed: {reason}"


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``switchboard send``."""
    parser.add_argument("--url", required=True, help="the webhook's ingest URL")
    parser.add_argument("--source", required=True, choices=sorted(SOURCES))
    parser.add_argument("--secret", help="signing secret, or @FILE to read it from a file")
    parser.add_argument(
        "--event",
        help="event kind header (github/gitea; cairn defaults to the body's kind; "
        "generic sends none: pass --header X-GitHub-Event:KIND instead)",
    )
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="extra header, repeatable; replaces the producer's header of that name",
    )
    parser.add_argument(
        "--stamp",
        action="store_true",
        help="cairn: set a fresh event_id and created_at (added anyway when missing)",
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds")
    parser.add_argument("file", help="the body to send, sent byte for byte")


def _emit(document: dict[str, Any]) -> None:
    print(json.dumps(document, ensure_ascii=False))


async def run(args: argparse.Namespace, runtime: Any = None) -> int:
    """Sign and POST ``args.file``; prints ``{"status", "response"}``; ``runtime`` is unused."""
    try:
        try:
            raw = Path(args.file).read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read {args.file!r}: {exc.strerror or exc}") from None
        secret = read_secret(args.secret)
        extra = [parse_header(h) for h in args.header]
        body, headers = build_request(args.source, raw, secret, args.event, extra, args.stamp)
    except UsageError as exc:
        _emit({"error": str(exc)})
        return EXIT_USAGE
    # urllib blocks; a thread keeps the caller's event loop responsive.
    status, response = await asyncio.to_thread(post, args.url, body, headers, args.timeout)
    _emit({"status": status, "response": response})
    return EXIT_OK if 200 <= status < 300 else EXIT_FAILED

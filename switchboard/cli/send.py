"""``switchboard send``: sign a file and POST it exactly as a producer would."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import re
import sys
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..config import load_config
from ..configcheck import http_url_problem
from ..errors import SwitchboardError
from ..plugins import apply_config, build_registries, make_plugin_manager
from ..registry import SourceRegistry
from ..sources import (
    TRUST_SIGNED,
    Headers,
    Identity,
    ProducerSide,
    identify,
    prepare_body,
    producer_side,
)
from .sendhttp import on_daemon_thread, post

#: Exit codes: 0 the target answered 2xx, 1 anything else, 2 the command was misused.
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DEFAULT_TIMEOUT = 10.0
#: ``--timeout``'s ceiling: a day (a socket cannot wait past the platform's time_t anyway).
MAX_TIMEOUT = 86400.0
#: How long ``send`` waits for the server to record its refused delivery (it does so after
#: answering).
REFUSAL_WAIT = 5.0


class UsageError(Exception):
    """The command line or its inputs cannot make a request (exit 2)."""


@functools.cache
def installed_sources() -> SourceRegistry:
    """The sources every installed plugin registers, for callers that have no runtime.

    Each plugin registers with its section's schema defaults, as it would under a runtime
    with an empty config.
    """
    pm = make_plugin_manager()
    config = load_config(env={})
    apply_config(pm, config)
    return build_registries(pm, config).sources


def signing_sources(registry: SourceRegistry) -> dict[str, ProducerSide]:
    """The sources in ``registry`` that offer a producer side, by name."""
    found = {source.name: producer_side(source) for source in registry}
    return {name: producer for name, producer in found.items() if producer is not None}


@functools.cache
def _installed_signers() -> dict[str, ProducerSide]:
    return signing_sources(installed_sources())


class _InstalledSigners(Mapping[str, ProducerSide]):
    # Loaded on first use: this module is imported while the plugin manager is being built.
    def _signers(self) -> dict[str, ProducerSide]:
        return _installed_signers()

    def __getitem__(self, name: str) -> ProducerSide:
        return self._signers()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._signers())

    def __len__(self) -> int:
        return len(self._signers())


#: The installed plugins' sources that can sign, by name (``build_request``'s default).
SOURCES: Mapping[str, ProducerSide] = _InstalledSigners()


def signer_for(registry: SourceRegistry, name: str) -> ProducerSide:
    """``registry``'s source ``name`` when it can sign; :class:`UsageError` otherwise."""
    signers = signing_sources(registry)
    producer = signers.get(name)
    if producer is not None:
        return producer
    choices = ", ".join(sorted(signers)) or "none"
    why = "cannot sign deliveries" if name in registry else "is not a registered source"
    raise UsageError(f"source {name!r} {why}; choose from {choices}")


def _merge_headers(base: dict[str, str], extra: Iterable[tuple[str, str]]) -> dict[str, str]:
    # An explicit --header replaces the producer's header of the same name (any case), so a
    # test can send a wrong delivery id or signature on purpose.
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
    sources: SourceRegistry | None = None,
) -> tuple[bytes, dict[str, str]]:
    """The exact bytes and headers ``source``'s producer would POST for ``body``.

    ``source`` is looked up in ``sources`` (default: every installed plugin's). The body
    is first prepared by the source (see :class:`switchboard.sources.ProducerSide`;
    ``stamp`` asks for a fresh stamp), then signed. ``extra_headers`` are applied last
    and win. Raises :class:`UsageError` for a source that cannot sign or a body it
    cannot send.
    """
    producer = signer_for(installed_sources() if sources is None else sources, source)
    try:
        body = prepare_body(producer, body, stamp=stamp, now=now)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        headers = producer.sign(body, secret, event)
    except ValueError as exc:  # e.g. the hmac source, whose scheme is each webhook's own
        raise UsageError(str(exc)) from None
    extra = extra_headers.items() if isinstance(extra_headers, Mapping) else extra_headers
    return body, _merge_headers(headers, extra)


#: An HTTP header name (RFC 9110 token).
_HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")


def parse_header(text: str) -> tuple[str, str]:
    """``"Name: value"`` from ``--header``; the value may itself contain colons.

    A name or value HTTP cannot carry is refused here, naming the header, not where the
    request is written."""
    name, sep, value = text.partition(":")
    name, value = name.strip(), value.strip()
    if not sep or not name:
        raise UsageError(f"--header {text!r} is not NAME:VALUE")
    if not _HEADER_NAME.fullmatch(name):
        raise UsageError(
            f"--header {name!r}: a header name is ASCII letters, digits and !#$%&'*+-.^_`|~"
        )
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        raise UsageError(
            f"--header {name}: its value must be Latin-1 text (HTTP sends header values"
            " as single bytes); percent-encode or base64 anything else"
        ) from None
    if any(c in value for c in "\r\n\0"):
        raise UsageError(f"--header {name}: its value has a line break or a NUL character")
    return name, value


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


def ingest_url(text: str) -> str:
    """``--url``: an http(s) URL with a host (urllib would also open ``file:`` URLs)."""
    problem = http_url_problem(text, appended=None)
    if problem is not None:
        raise argparse.ArgumentTypeError(
            f"must be an http:// or https:// URL with a host and a port from 1 to 65535 if"
            f" any ({problem})"
        )
    return text


def timeout_seconds(text: str) -> float:
    """``--timeout``: seconds, above 0 and at most a day."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT:
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds above 0 and at most {MAX_TIMEOUT:.0f} (got {text})"
        )
    return value


def configure(parser: argparse.ArgumentParser, runtime: Any = None) -> None:
    """Arguments of ``switchboard send``.

    With a ``runtime``, ``--source`` offers exactly its registry's sources that can sign
    (a disabled plugin's is not among them). Without one, no registry is built just to
    list choices (a plugin may need its config to register): :func:`run` refuses a source
    that cannot sign, naming those that can.
    """
    parser.add_argument(
        "--url", required=True, type=ingest_url, help="the webhook's ingest URL (http or https)"
    )
    if runtime is not None:
        choices = sorted(signing_sources(runtime.registries.sources))
        parser.add_argument(
            "--source", required=True, choices=choices, metavar="SOURCE",
            help="the producer to sign as: %(choices)s (the enabled sources that can sign)",
        )  # fmt: skip
    else:
        parser.add_argument(
            "--source", required=True, metavar="SOURCE",
            help="the producer to sign as: an enabled source that can sign",
        )  # fmt: skip
    parser.add_argument("--secret", help="signing secret, or @FILE to read it from a file")
    parser.add_argument(
        "--event",
        help="event kind to announce, as the source's producer does (a source may ignore it)",
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
        help="for a source that stamps its bodies: a fresh id and clock "
        "(missing ones are added anyway)",
    )
    parser.add_argument(
        "--timeout",
        type=timeout_seconds,
        default=DEFAULT_TIMEOUT,
        help="seconds the whole exchange may take, connecting to the answer's last byte"
        " (default 10, at most 86400)",
    )
    parser.add_argument("file", help="the body to send, sent byte for byte")


def _emit(document: dict[str, Any]) -> None:
    print(json.dumps(document, ensure_ascii=False))


async def run(args: argparse.Namespace, runtime: Any = None) -> int:
    """Sign and POST ``args.file``; prints ``{"status", "response"}``.

    The source comes from ``runtime``'s registry (so a disabled plugin's is refused);
    without a runtime, from the installed plugins'.
    """
    registry = installed_sources() if runtime is None else runtime.registries.sources
    try:
        try:
            raw = Path(args.file).read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read {args.file!r}: {exc.strerror or exc}") from None
        secret = read_secret(args.secret)
        extra = [parse_header(h) for h in args.header]
        body, headers = build_request(
            args.source, raw, secret, args.event, extra, args.stamp, sources=registry
        )
    except UsageError as exc:
        _warn(f"error: {exc}")  # stderr, as every command's errors (README: exit codes)
        return EXIT_USAGE
    source = registry.get(args.source)
    if not secret and getattr(source, "trust_mode", None) == TRUST_SIGNED:
        _warn(
            f"sending unsigned: {args.source} is a signed source and no --secret was given"
            " (its webhook will refuse this delivery)"
        )
    # urllib blocks; a thread keeps the caller's event loop responsive.
    status, response = await on_daemon_thread(
        functools.partial(post, args.url, body, headers, args.timeout)
    )
    doc: dict[str, Any] = {"status": status, "response": response}
    if status == 401 and runtime is not None:
        refusal = await _recorded_refusal(
            runtime, args.url, identify(source, Headers(headers), body)
        )
        if refusal is not None:
            doc["refusal"] = {k: refusal.get(k) for k in ("reason", "detail", "delivery_id")}
            _warn(f"refused: {refusal['reason']}: {refusal.get('detail') or ''}".rstrip(": "))
    _emit(doc)
    if status == 0:
        _warn(f"error: {response}")  # no complete answer came
    elif not 200 <= status < 300 and "refusal" not in doc:
        _warn(f"error: the server answered {status}")
    return EXIT_OK if 200 <= status < 300 else EXIT_FAILED


def _warn(text: str) -> None:
    print(f"switchboard send: {text}", file=sys.stderr)


def ingest_token(url: str) -> str | None:
    """The ingest token in a ``.../webhooks/w/<token>`` URL, else None."""
    path = urllib.parse.urlsplit(url).path.rstrip("/")
    head, _, token = path.rpartition("/")
    return token if head.endswith("/webhooks/w") and token else None


async def _recorded_refusal(runtime: Any, url: str, found: Identity) -> dict[str, Any] | None:
    """What the server recorded for this refused delivery, by its delivery id.

    Read from the database this command's config names (the server's, for an operator);
    None, with a line on stderr, when it cannot be read or nothing was recorded in time.
    """
    from ..service.refusals import refusal_of_delivery  # the store only after a 401

    token = ingest_token(url)
    if token is None:
        return None
    try:
        await runtime.open_store(migrate=False, create=False)
        deadline = time.monotonic() + REFUSAL_WAIT
        while True:
            refusal: dict[str, Any] | None = await refusal_of_delivery(
                runtime, token, found.delivery_id
            )
            if refusal is not None or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
    except SwitchboardError as exc:
        _warn(f"the server's reason cannot be read here ({exc}): see webhook refusals")
        return None
    if refusal is None:
        _warn("the server recorded no reason for this delivery (see `webhook refusals`)")
    return refusal

"""Log hygiene: no credential reaches a log line, and a repeated traceback is logged once a minute."""

from __future__ import annotations

import logging
import re
import threading
import time
import traceback
from collections.abc import Callable

REDACTED = "«redacted»"

# What a log line may quote that is a credential: the ingest token in a receiver path (the
# only credential of a token-trust webhook), minted tokens and secrets (``sbe_``,
# ``whsec_``, bare 48-hex ingest tokens), bearer credentials and hex signatures. The
# ingest path is matched whatever the token looks like: a probe's garbage token is still
# what a real producer's token would be in that position.
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(/webhooks/w/)[^/?#\s'\"<>]+"), r"\1" + REDACTED),
    (re.compile(r"\b(sbe_|whsec_)[A-Za-z0-9_\-]+"), r"\1" + REDACTED),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]+"), r"\1 " + REDACTED),
    (re.compile(r"(?i)\b(sha(?:1|256|512)=|v\d+[=,])[0-9a-z+/=]{16,}"), r"\1" + REDACTED),
    (re.compile(r"\b[0-9a-f]{48}\b"), REDACTED),
)

#: One full traceback per (exception type, raising line) per this many seconds; the
#: repeats in between are one line each, so a producer cannot flood the log.
TRACEBACK_EVERY_S = 60.0


#: For each pattern, a literal test any match implies, far cheaper than the pattern's own
#: scan (a ``\b``-led pattern is tried at every position: ~10 us a line each, and every
#: delivery logs a line). On the case-folded text where the pattern ignores case: re's
#: IGNORECASE matches "ſ" for "s" and the Kelvin sign for "k", and so does casefold.
_V_DIGIT = re.compile(r"v\d")
_TRIGGERS: tuple[Callable[[str], bool], ...] = (
    lambda t: "/webhooks/w/" in t,
    lambda t: "sbe_" in t or "whsec_" in t,
    lambda t: "bearer" in (f := t.casefold()) or "basic" in f,
    lambda t: "sha" in (f := t.casefold()) or _V_DIGIT.search(f) is not None,
    lambda t: True,
)


def redact(text: str) -> str:
    """``text`` with every credential-looking substring replaced by ``«redacted»``."""
    for (pattern, repl), may_match in zip(_PATTERNS, _TRIGGERS, strict=True):
        if may_match(text):
            text = pattern.sub(repl, text)
    return text


class HygieneFilter(logging.Filter):
    """A handler filter: redacts the message and traceback, rate-limits repeated tracebacks."""

    def __init__(self, every_s: float = TRACEBACK_EVERY_S) -> None:
        super().__init__("switchboard-hygiene")
        self.every_s = every_s
        self._seen: dict[tuple[str, str, int], tuple[float, int]] = {}
        self._lock = threading.Lock()

    def _suppressed(self, record: logging.LogRecord) -> int | None:
        """How many repeats were dropped if this traceback is a repeat, else None."""
        exc_type, exc, tb = record.exc_info or (None, None, None)
        if exc_type is None:
            return None
        frames = traceback.extract_tb(tb) if tb is not None else []
        last = frames[-1] if frames else None
        key = (
            exc_type.__qualname__,
            last.filename if last else "",
            last.lineno or 0 if last else 0,
        )
        now = time.monotonic()
        with self._lock:
            first, repeats = self._seen.get(key, (-self.every_s - 1, 0))
            if now - first > self.every_s:
                self._seen[key] = (now, 0)
                return None
            self._seen[key] = (first, repeats + 1)
            return repeats + 1

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not lose the record
            message = str(record.msg)
        repeats = self._suppressed(record)
        if repeats is not None:
            exc = record.exc_info[1] if record.exc_info else None
            message += (
                f" [{type(exc).__name__}: {exc}; traceback shown once per"
                f" {self.every_s:g} s, repeat {repeats}]"
            )
            record.exc_info = None
            record.exc_text = None
        elif record.exc_info and not record.exc_text:
            record.exc_text = redact("".join(traceback.format_exception(*record.exc_info)).rstrip())
        record.msg = redact(message)
        record.args = None
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


class AccessLine(logging.Filter):
    """Spell Sanic's access record (its fields travel as ``extra``) as a message, so the
    root handlers print it and :class:`HygieneFilter` redacts the ingest token in it."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = ("host", "request", "status", "byte")
        record.msg = " ".join(str(getattr(record, f, "-")) for f in fields)
        record.args = None
        return True


def enable_access_log() -> None:
    """One INFO line per request on ``sanic.access`` (host, request line, status, bytes)."""
    access = logging.getLogger("sanic.access")
    access.setLevel(logging.INFO)
    if not any(isinstance(f, AccessLine) for f in access.filters):
        access.addFilter(AccessLine())


def install(level: int | None = None) -> None:
    """Put the filter on every root handler (configuring one if there is none); idempotent."""
    root = logging.getLogger()
    if not root.handlers:
        # Without a handler Python falls back to ``logging.lastResort``, which no filter sees.
        logging.basicConfig(
            level=level or logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    for handler in root.handlers:
        if not any(isinstance(f, HygieneFilter) for f in handler.filters):
            handler.addFilter(HygieneFilter())

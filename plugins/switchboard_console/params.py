"""What a client sends the console, read without surprises: whole numbers from a query or a
form, and a posted form parsed quietly (a malformed one is an empty form, never a traceback)."""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from switchboard.errors import InvalidArgument

if TYPE_CHECKING:
    # types only: guard imports this module, and a command other than serve must not
    # import Sanic
    from sanic import Request

log = logging.getLogger(__name__)

#: The largest ``last`` window a dry run or a re-route reads.
LAST_MAX = 10000
#: A version number is a PostgreSQL bigint.
VERSION_MAX = 2**63 - 1

# ASCII digits only: str.isdigit() also takes "²" and "٣", which int() refuses or reads.
_DIGITS = re.compile("[0-9]+")


def whole(text: str | None, low: int, high: int) -> int | None:
    """``text`` as a whole number from ``low`` to ``high``, else None: ASCII digits only,
    and never more of them than ``high`` has (int() refuses past 4300 digits)."""
    if text is None or not _DIGITS.fullmatch(text):
        return None
    if len(text.lstrip("0")) > len(str(high)):
        return None
    n = int(text)
    return n if low <= n <= high else None


def version(text: str | None, name: str) -> int | None:
    """A version number picked in a query (None when not picked)."""
    if not text:
        return None
    n = whole(text, 1, VERSION_MAX)
    if n is None:
        raise InvalidArgument(f"{name}: must be a version number")
    return n


def last(text: str | None, default: int) -> int:
    """How many of the newest deliveries a dry run or a re-route reads."""
    n = whole((text or str(default)).strip(), 1, LAST_MAX)
    if n is None:
        raise InvalidArgument(f"last: must be a number from 1 to {LAST_MAX}")
    return n


def parse_form(request: Request) -> None:
    """Parse a posted form before anything reads ``request.form``: as Sanic would, but a
    body that is not a form (no multipart boundary, bytes that are not UTF-8) is an empty
    form and one debug line, where Sanic logs a traceback at ERROR for the client's
    mistake. The CSRF check then refuses the post."""
    from urllib.parse import parse_qs

    from sanic.headers import parse_content_header
    from sanic.request.form import parse_multipart_form
    from sanic.request.parameters import RequestParameters

    if request.parsed_form is not None:
        return
    request.parsed_form, request.parsed_files = RequestParameters(), RequestParameters()
    kind, params = parse_content_header(request.headers.getone("content-type", ""))
    try:
        if kind == "application/x-www-form-urlencoded":
            request.parsed_form = RequestParameters(parse_qs(request.body.decode("utf-8")))
        elif kind == "multipart/form-data":
            boundary = params.get("boundary")
            if not isinstance(boundary, str) or not boundary:
                raise ValueError("multipart/form-data without a boundary")
            request.parsed_form, request.parsed_files = parse_multipart_form(
                request.body, boundary.encode("utf-8", "surrogateescape")
            )
    except Exception as exc:  # whatever the parser trips on: the client's, not ours
        log.debug("%s %s: not a form (%s)", request.method, request.path, type(exc).__name__)

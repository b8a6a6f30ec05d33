"""Bounded request arrival: a request's headers, then its body, each within a total deadline.

Sanic's ``REQUEST_TIMEOUT`` and ``RESPONSE_TIMEOUT`` are inactivity timers, reset by every
byte received: a client sending one byte a second (slowloris) holds its connection, and a
worker's share of sockets and memory, for ever. Here the clock starts at the request's first
byte: the header block must be complete within ``server.header_timeout_ms``, and the body
within ``server.body_timeout_ms`` of the end of the headers, however the bytes trickle in.
Past either, the request is answered ``408`` and its connection closed; a chunked body is
held to the same deadline as a declared length. Every route reads its body before its
handler runs (see :func:`read_bodies_first`), so a trickled body on a ``GET`` is cut the same.

The same protocol stops gracefully: on ``SIGTERM`` Sanic closes the connections it finds
idle at once, then waits ``server.shutdown_grace_s`` for the rest. Here an idle connection
whose next request has already arrived (bytes in its buffer) is answered first (``503`` with
``Connection: close`` while draining), an idle keep-alive connection lingers a moment for a
request already on its way, and the requests still in flight when the grace runs out are
counted in the log as they are cut.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from typing import Any, cast

from sanic.exceptions import (
    BadURL,
    ExpectationFailed,
    PayloadTooLarge,
    RequestTimeout,
    SanicException,
    ServiceUnavailable,
)
from sanic.http import Http, Stage
from sanic.server.protocols.http_protocol import HttpProtocol

from . import admission

#: Where create_app leaves the deadlines (seconds) for the protocol to read.
HEADER_KEY = "SWITCHBOARD_HEADER_TIMEOUT"
BODY_KEY = "SWITCHBOARD_BODY_TIMEOUT"
#: The defaults (README: ``server.header_timeout_ms``, ``server.body_timeout_ms``).
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
#: How long an idle keep-alive connection stays open once the stop began: a request the
#: client sent just before it saw nothing of the stop gets its 503 instead of a reset.
IDLE_LINGER_S = 1.0

log = logging.getLogger("switchboard.app")

#: Requests of this process cut at the end of the shutdown grace (logged when it stops).
_cut_at_stop = [0]


def cut_at_stop() -> int:
    """How many requests in flight this process cut when the shutdown grace ran out."""
    return _cut_at_stop[0]


class ArrivalTimeout(RequestTimeout):
    """A request's headers or body missed its deadline; the message names it and its setting
    (and nothing of the request), so the ``408`` body says it."""


class TargetTooLong(SanicException):
    """A request line that did not end within the head's size limit: RFC 9110's ``414``
    (Sanic answers ``431`` for any head over it; the lowest Sanic we support has no 414)."""

    status_code = 414
    quiet = True


class UnsupportedExpect(ExpectationFailed):
    """An ``Expect`` other than ``100-continue``; the message names the value (escaped, cut
    short), so the ``417`` body says what was wrong."""


#: The exceptions whose message the error body may quote: written here, from the deadline's
#: setting or an escaped ``Expect`` value, never a path (Sanic's own texts quote it).
OWN_WORDS = (ArrivalTimeout, UnsupportedExpect)

#: How much of an unsupported ``Expect`` value the ``417`` body quotes.
EXPECT_SHOWN = 64

#: A ``Content-Length`` (base 10) or a chunk size (base 16): ASCII digits only (RFC 9112),
#: since ``int()`` also reads "٧" as 7, a length a proxy in front would read otherwise.
_NUMBER = {10: re.compile("[0-9]+"), 16: re.compile("[0-9A-Fa-f]+")}


def _late(what: str, seconds: float, setting: str) -> str:
    return f"request {what} not received within {round(seconds * 1000)} ms ({setting})"


def _printable(raw: bytes) -> str:
    """``raw`` as printable ASCII (any other byte, a quote or a backslash ``\\xNN``), at
    most :data:`EXPECT_SHOWN` bytes of it."""
    shown = raw[:EXPECT_SHOWN]
    text = "".join(chr(b) if 0x20 <= b < 0x7F and b not in b'"\\' else f"\\x{b:02x}" for b in shown)
    return text + ("…" if len(raw) > EXPECT_SHOWN else "")


def _head_lines(buf: bytearray) -> list[bytes]:
    """The header block's lines still in ``buf`` (the request line first)."""
    end = buf.find(b"\r\n\r\n")
    return bytes(buf[: end if end != -1 else len(buf)]).split(b"\r\n")


class BoundedHttp(Http):
    """Sanic's HTTP/1.1 state machine with a deadline armed for each request's arrival."""

    __slots__ = ("_deadline",)
    _deadline: asyncio.TimerHandle | None

    def init_for_request(self) -> None:
        super().init_for_request()
        self._disarm()

    @staticmethod
    def _safe_int(value: str, base: int = 10) -> int:
        # Sanic's own refuses a sign or an underscore, and takes any other int() text.
        if not _NUMBER[base].fullmatch(value.strip(" \t")):
            raise ValueError(f"not a base-{base} number")
        return int(value, base)

    def create_empty_request(self) -> None:
        """The stand-in request a refusal before the request was parsed is answered on.

        Sanic builds it from the target the refused request line carried; a target the
        URL parser refuses (a control byte, no leading ``/``) would raise again while the
        ``400`` is prepared, leaving no answer and a traceback in the log. Such a request
        is answered as one with no target.
        """
        try:
            super().create_empty_request()
        except BadURL:
            self.url = None
            super().create_empty_request()

    async def http1_request_header(self) -> None:
        # Called once the request's first bytes are in the buffer.
        protocol = cast("BoundedProtocol", self.protocol)
        # A deadline only for what is still to come: most requests arrive whole, in one
        # read, and would only set a timer to cancel it at once (twice a request).
        if b"\r\n\r\n" not in self.recv_buffer:
            late = _late("headers", protocol.header_timeout, "server.header_timeout_ms")
            self._arm(protocol.header_timeout, late)
        try:
            await super().http1_request_header()
        except PayloadTooLarge:
            if self._request_line_too_long():
                # RFC 9110's 414: the target alone filled the limit (Sanic says 431)
                raise TargetTooLong("Request URI exceeds the size limit") from None
            # A header block over the limit is refused before Sanic reads the request line:
            # read its target here, so the 431 is answered (and, on an ingest URL, logged
            # and counted) under its path, as a 413 is.
            self.url = self.url or self._target()
            raise
        except ExpectationFailed:
            raise UnsupportedExpect(self._unsupported_expect()) from None
        finally:
            self._disarm()
        self._admit()
        if self.request_body and not self._body_in():
            late = _late("body", protocol.body_timeout, "server.body_timeout_ms")
            self._arm(protocol.body_timeout, late)

    def _body_in(self) -> bool:
        """The whole declared body is already in the buffer. Never for a chunked one: its
        length is known only once its last chunk is read (Sanic leaves its
        ``request_bytes_left`` at 0, which would look like a body already in)."""
        left = self.request_bytes_left
        return self.request_body is True and isinstance(left, int) and len(self.recv_buffer) >= left

    def _request_line_too_long(self) -> bool:
        """The request line did not end within the head's size limit."""
        return self.recv_buffer.find(b"\r\n", 0, self.HEADER_MAX_SIZE) == -1

    def _target(self) -> str | None:
        """The request line's target, read from the buffer (None if it is not all there)."""
        line = _head_lines(self.recv_buffer)[0]
        if len(line) >= len(self.recv_buffer):
            return None  # the request line itself never ended
        parts = line.split(b" ")
        return parts[1].decode(errors="surrogateescape") if len(parts) == 3 else None

    def _unsupported_expect(self) -> str:
        """The 417's message, naming the ``Expect`` value (still in the buffer: Sanic refuses
        it before it consumes the header block)."""
        for line in _head_lines(self.recv_buffer)[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"expect":
                shown = _printable(value.strip())
                return f'unsupported Expect: "{shown}" (only "100-continue" is)'
        return 'unsupported Expect (only "100-continue" is)'

    def _admit(self) -> None:
        """Refuse at the headers, before a byte of the body is read (and before routing:
        a check here costs nothing like a Sanic signal's dispatch). A stopping server takes
        no new request (``503``); a declared ``Content-Length`` over the size limit is
        refused (``413``) before Sanic would answer ``Expect: 100-continue`` by inviting the
        client to send it. Either closes the connection after the answer."""
        if getattr(self.protocol.app.ctx, "draining", False):
            self.keep_alive = False
            raise ServiceUnavailable("server shutting down")
        # Sanic read a declared length into request_bytes (a chunked body declares none).
        if self.request_body is True and self.request_bytes > self.protocol.request_max_size:
            self.expecting_continue = False
            self.keep_alive = False
            raise PayloadTooLarge("Request body exceeds the size limit")

    async def read(self) -> bytes | None:
        data = await super().read()
        if not self.request_body:
            self._disarm()  # the whole body is in
        return data

    def _arm(self, seconds: float, message: str) -> None:
        self._deadline = asyncio.get_running_loop().call_later(seconds, self._cut, message)

    def _disarm(self) -> None:
        deadline = getattr(self, "_deadline", None)
        if deadline is not None:
            deadline.cancel()
        self._deadline = None

    def _cut(self, message: str) -> None:
        """Past the deadline and still arriving: answer 408 and close (as Sanic's own
        request timeout does: the connection task is cancelled with the error to send).

        A request answered before its body was read (an unknown path's 404, a 405) has
        Sanic read the rest after the answer, at the client's pace: that is only closed.
        """
        self._deadline = None
        task = self.protocol._task
        if task is None:
            return
        if self.stage is Stage.IDLE and self.request_body:
            self.keep_alive = False
            self.request_body = None
            task.cancel()
            return
        arriving = self.stage is Stage.REQUEST or (
            self.stage is Stage.HANDLER and bool(self.request_body)
        )
        if not arriving:
            return
        self.keep_alive = False
        self.exception = ArrivalTimeout(message)
        # Nothing more is read: Sanic would otherwise drain the rest of the body (at the
        # client's pace) after answering.
        self.request_body = None
        task.cancel()


class BoundedProtocol(HttpProtocol):
    """The HTTP protocol ``serve`` runs: :class:`BoundedHttp` with the app's deadlines, and
    at most so many connections per worker and per client address (:mod:`.admission`)."""

    __slots__ = ("header_timeout", "body_timeout", "_admitted")
    HTTP_CLASS = BoundedHttp

    def _setup(self) -> None:
        super()._setup()
        config: Any = self.app.config
        self.header_timeout = float(config.get(HEADER_KEY, HEADER_TIMEOUT_S))
        self.body_timeout = float(config.get(BODY_KEY, BODY_TIMEOUT_S))
        self._admitted: str | None = None

    def connection_made(self, transport: Any) -> None:
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        if not admission.admit(self.app.config, address):
            # Refused before Sanic sees it: a canned 503, then closed (never a reset).
            transport.write(admission.BUSY)
            transport.close()
            return
        self._admitted = address
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._admitted is None:
            return  # refused at connection_made: Sanic never knew it
        admission.release(self._admitted)
        self._admitted = None
        super().connection_lost(exc)

    def close_if_idle(self) -> bool:
        """Sanic's first step of a stop: close the connection unless a request is on it.

        A connection whose next request has already arrived is left to answer it (it is
        not idle: the server has read it); an idle keep-alive one is closed after
        :data:`IDLE_LINGER_S` unless a request arrives meanwhile.
        """
        http = self.http
        if (http is None or http.stage is Stage.IDLE) and not self.recv_buffer:
            self.loop.call_later(IDLE_LINGER_S, self._close_if_still_idle)
        return False

    def _close_if_still_idle(self) -> None:
        http = self.http
        if (http is None or http.stage is Stage.IDLE) and not self.recv_buffer:
            self.close()

    def abort(self) -> None:
        """Sanic's last step of a stop, for the connections the grace did not see finish."""
        http = self.http
        if self.transport is not None and http is not None and http.stage is not Stage.IDLE:
            _cut_at_stop[0] += 1
        super().abort()


#: Reason phrases Sanic (25.12) lacks for statuses this service answers: its status line
#: said ``421 UNKNOWN`` (a Host or Origin refused by the console or ``/mcp``). RFC 9110's.
REASONS = {421: b"Misdirected Request"}


def name_every_status() -> None:
    """Give Sanic the reason phrases it lacks (:data:`REASONS`): in its table, and in the
    status lines it formatted from that table when imported."""
    from sanic import headers, helpers

    lines = getattr(headers, "_HTTP1_STATUSLINES", None)
    for status, reason in REASONS.items():
        helpers.STATUS_CODES.setdefault(status, reason)
        if isinstance(lines, list) and status < len(lines):
            lines[status] = b"HTTP/1.1 %d %b\r\n" % (status, helpers.STATUS_CODES[status])


def read_bodies_first(app: Any) -> int:
    """Have every route read its request's body before its handler runs; how many routes.

    Sanic's ``GET`` routes ignore a body (``ignore_body``): the handler answers, then Sanic
    reads the body at the client's pace and logs ERROR "body not consumed" for any body at
    all, even a ``Content-Length: 0``. Read first, a body on any route is held to
    ``server.body_timeout_ms`` like a ``POST``'s (``408`` past it), and never logged.
    Called once every route is registered, the plugins' too.
    """
    routes = app.router.routes
    for route in routes:
        route.extra.ignore_body = False
    return len(routes)


def stop_accepting(app: Any) -> int:
    """Shut this worker's listening socket down (in every process at once where they share
    one); how many were shut.

    With several workers on Linux, each listens on a socket of its own (``cli.listeners``):
    this worker's is shut, and a new connection goes to a sibling still listening (answered
    ``503`` while it drains), or is refused once none is. Elsewhere they share the listening
    socket of ``serve``'s main process, which keeps it open until every worker has drained:
    each worker stops accepting, yet the kernel goes on completing handshakes into the
    socket's queue, and those connections are reset when the main process finally closes
    it. ``shutdown(SHUT_RD)`` on a listening socket stops it listening in the kernel (the
    socket, not one process's descriptor), so a new connection is refused at once. A
    process whose listener still watches the socket wakes for it at every turn of its loop
    until that listener closes (uvloop quietly; the stdlib loop would log ``accept``'s
    ``EINVAL`` each time, so only under uvloop): called last in a worker's drain, just
    before Sanic closes its listener, so that lasts only as long as a sibling's drain runs
    behind this one's.
    """
    loop = asyncio.get_running_loop()
    if not type(loop).__module__.startswith("uvloop"):
        return 0
    shut = 0
    for info in getattr(app.state, "server_info", None) or []:
        sock = info.settings.get("sock")
        if sock is None or sock.fileno() < 0:
            # One process (serve --workers 1): its server closes the only listener itself.
            continue
        try:
            sock.shutdown(socket.SHUT_RD)
            shut += 1
        except OSError:  # already shut by a sibling: one shutdown is enough
            pass
    return shut

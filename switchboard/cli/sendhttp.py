"""The HTTP exchange of ``switchboard send``: one POST under one deadline for the whole of
it, run on a thread the process does not wait for (urllib blocks)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http.client
import io
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

_T = TypeVar("_T")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # Producers never follow redirects (a 3xx is a failed delivery), so neither does send.
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _decode_response(raw: bytes) -> Any:
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # shown as the text it is
        return text


class _Deadline:
    """``--timeout`` as one total for the whole exchange: urllib's timeout is each socket
    wait's own, so a server that dribbles its answer a byte at a time held ``send`` for ever.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.message = f"no complete answer within {seconds:g} s (--timeout)"

    def left(self) -> float:
        """The seconds left, for the next socket wait; :class:`TimeoutError` if none are."""
        left = self.at - time.monotonic()
        if left <= 0:
            raise TimeoutError(self.message)
        return left

    def passed(self) -> bool:
        return time.monotonic() >= self.at


class _DeadlineReader(io.RawIOBase):
    """A response's socket reads (status line, headers, body), each given only the time
    left: the buffered reader above it may ask for many."""

    def __init__(self, sock: socket.socket, deadline: _Deadline) -> None:
        super().__init__()
        self._sock = sock
        # makefile, not the bare socket: the file holds the socket open after urllib
        # closes the connection, until the response is closed (http.client's own way).
        self._file = sock.makefile("rb", buffering=0)
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int | None:
        self._sock.settimeout(self._deadline.left())
        return self._file.readinto(buffer)

    def close(self) -> None:
        self._file.close()
        super().close()


class _DeadlineResponse(http.client.HTTPResponse):
    def __init__(self, sock: socket.socket, *args: Any, deadline: _Deadline, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp.close()  # http.client's own file, which reads under a fixed timeout
        self.fp = io.BufferedReader(_DeadlineReader(sock, deadline))


class _DeadlineHTTP(http.client.HTTPConnection):
    """Connecting (TLS included), sending and the answer (see :class:`_DeadlineResponse`)
    within one deadline."""

    def __init__(self, *args: Any, deadline: _Deadline, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadline = deadline
        # http.client makes each response (a proxy's CONNECT answer too) from this.
        self.response_class = functools.partial(  # type: ignore[assignment]
            _DeadlineResponse, deadline=deadline
        )

    def connect(self) -> None:
        self.timeout = self.deadline.left()
        super().connect()

    def send(self, data: Any) -> None:
        if self.sock is not None:  # else send connects first, under the time left
            self.sock.settimeout(self.deadline.left())
        super().send(data)


class _DeadlineHTTPS(_DeadlineHTTP, http.client.HTTPSConnection):
    pass


class _DeadlineHandler(urllib.request.AbstractHTTPHandler):
    connection: type[_DeadlineHTTP]

    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self.deadline = deadline

    def do_open(self, http_class: Any, req: Any, **http_conn_args: Any) -> Any:
        deadlined = functools.partial(self.connection, deadline=self.deadline)
        return super().do_open(deadlined, req, **http_conn_args)


class _DeadlineHTTPHandler(_DeadlineHandler, urllib.request.HTTPHandler):
    connection = _DeadlineHTTP


class _DeadlineHTTPSHandler(_DeadlineHandler, urllib.request.HTTPSHandler):
    connection = _DeadlineHTTPS


def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, Any]:
    """POST and return (status, parsed response); status 0 when no complete response arrived.

    ``timeout`` bounds the whole exchange: connecting, sending, and the answer to its last
    byte.
    """
    deadline = _Deadline(timeout)
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    opener = urllib.request.build_opener(
        _NoRedirect, _DeadlineHTTPHandler(deadline), _DeadlineHTTPSHandler(deadline)
    )
    try:
        try:
            with opener.open(request, timeout=timeout) as response:
                return response.status, _decode_response(response.read())
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, _decode_response(exc.read())
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        # Every socket wait was given only the time left: any timeout is the deadline's.
        if isinstance(reason, TimeoutError) or deadline.passed():
            return 0, f"request failed: {deadline.message}"
        return 0, f"request failed: {reason}"


async def on_daemon_thread(fn: Callable[[], _T]) -> _T:
    """``fn()`` on a thread of its own that the process does not wait for at exit.

    ``asyncio.to_thread``'s executor is joined when ``asyncio.run`` ends and again at
    exit, so Ctrl-C during a blocked read waited for that read (up to ``--timeout``).
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[_T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        # The loop is closed once the command was interrupted: nobody waits any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(lambda: None if done.done() else outcome())

    def work() -> None:
        try:
            result = fn()
        except BaseException as exc:  # handed to the awaiting task, which raises it
            settle(functools.partial(done.set_exception, exc))
        else:
            settle(functools.partial(done.set_result, result))

    threading.Thread(target=work, name="switchboard-send", daemon=True).start()
    return await done

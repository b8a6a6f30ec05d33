"""The listening sockets: the address serve's main process takes, and each worker's own listener.

Workers that share one listening socket do not share its connections: the worker that
wakes first accepts every connection waiting (libuv accepts until none is left), so a
burst of keep-alive connections (a load client's, a producer's pool) lands mostly on one
worker, which then saturates its core while the others idle. Measured with
``bench/ingest.py`` at 32 clients on two workers: 2,585 deliveries on one, 723 on the other,
whose batches held one or two deliveries each. On Linux each worker therefore listens on a
socket of its own, bound to the same address with ``SO_REUSEPORT``, and the kernel spreads
new connections among them by a hash of each connection's addresses. The main process keeps
the address bound (not listening, so it takes no connection of its own) for as long as it
serves, which is how the workers know to make their own.
"""

from __future__ import annotations

import socket
import sys
from typing import Any

#: The listening socket's backlog (Sanic's default).
LISTEN_BACKLOG = 100

#: Where ``SO_REUSEPORT`` spreads connections among listeners (elsewhere, BSD and macOS,
#: the last one bound takes them all): the workers' own listeners only there.
SPREADS = sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def listen(host: str, port: int, *, workers: int) -> socket.socket:
    """The address, taken: a listening socket for one worker (or where listeners do not
    spread), else the main process's reservation the workers listen beside.

    Either way the address is first bound as Sanic binds it, without ``SO_REUSEPORT``: a
    port another process listens on fails here (``OSError``) even when that process set
    ``SO_REUSEPORT`` too (an earlier multi-worker ``serve``), where a reservation alone would
    bind beside it and share its connections.
    """
    from sanic.server.socket import bind_socket

    sock = bind_socket(host, port, backlog=LISTEN_BACKLOG)
    if workers == 1 or not SPREADS:
        return sock
    address, family, v6only = sock.getsockname(), sock.family, _v6only(sock)
    sock.close()  # a listener that accepted nothing: the address is free again at once
    return _bound(family, address, v6only)


def reserved(sock: socket.socket) -> bool:
    """``sock`` is the main process's reservation (see :func:`listen`): bound with
    ``SO_REUSEPORT`` and not listening, so a worker listens on a socket of its own."""
    if not SPREADS or sock.type != socket.SOCK_STREAM:
        return False
    reuse = sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT)
    return bool(reuse) and not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)


def listen_in_the_worker(kwargs: dict[str, Any]) -> None:
    """Sanic's worker arguments (``worker_serve``'s) given this worker's own socket where
    they hold the main process's reservation: the one its server listens on, and the one
    its drain shuts (``arrival.stop_accepting``). The worker's copy of the reservation is
    closed."""
    reservation = kwargs.get("sock")
    if reservation is None or not reserved(reservation):
        return
    own = _bound(reservation.family, reservation.getsockname(), _v6only(reservation))
    kwargs["sock"] = own
    for infos in (kwargs.get("server_info") or {}).values():
        for info in infos:
            if info.settings.get("sock") is reservation:
                info.settings["sock"] = own
    reservation.close()


def _bound(family: int, address: tuple[object, ...], v6only: bool | None) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if v6only is not None:  # as the first bind had it: dual-stack stays dual-stack
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, int(v6only))
        sock.bind(address)
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _v6only(sock: socket.socket) -> bool | None:
    if sock.family != socket.AF_INET6:
        return None
    return bool(sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY))

"""Several workers each listen on serve's address (``SO_REUSEPORT``, Linux): a burst of
keep-alive connections is spread among them, not taken by whichever worker wakes first, and
the main process, which keeps the address, takes none of them.

Real processes and sockets: ``serve --workers 2``, 64 client connections opened at once,
and the kernel's own table of who holds each one (psutil)."""

from __future__ import annotations

import socket
import time
from typing import Any

import psutil
import pytest
from sbtest import sanic_workers

from switchboard.cli import listeners

pytestmark = pytest.mark.skipif(
    not listeners.SPREADS, reason="SO_REUSEPORT spreads connections on Linux only"
)

#: Connections opened at once, and the fewest either of two workers may hold. The kernel
#: hashes each connection's addresses, so a worker's share is Binomial(64, 1/2): below 12
#: one time in ten million. One shared listening socket gave one worker nearly all.
CONNECTIONS = 64
FEWEST = 12


def _tcp(proc: psutil.Process) -> list[Any]:
    # Process.net_connections from psutil 6 on, connections before (the lowest pins 5.9)
    get = getattr(proc, "net_connections", None) or proc.connections
    return list(get(kind="tcp"))


def _held(proc: psutil.Process, port: int, status: str) -> int:
    return sum(1 for c in _tcp(proc) if c.status == status and c.laddr and c.laddr.port == port)


def _workers(srv: Any) -> tuple[psutil.Process, list[psutil.Process]]:
    assert srv.proc is not None
    main = psutil.Process(srv.proc.pid)
    workers = sanic_workers(main)
    assert len(workers) == 2, [p.cmdline() for p in main.children()]
    return main, workers


def _every_worker_listens(workers: list[psutil.Process], port: int) -> None:
    # serve is healthy once one worker answers; the other may still be starting
    deadline = time.monotonic() + 30
    while not all(_held(w, port, psutil.CONN_LISTEN) for w in workers):
        assert time.monotonic() < deadline, "a worker never listened"
        time.sleep(0.05)


def _answered(sock: socket.socket) -> bytes:
    sock.settimeout(10)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        assert chunk, "the server closed the connection unanswered"
        head += chunk
    return head.split(b"\r\n", 1)[0]


def test_a_burst_of_keep_alive_connections_is_spread_among_the_workers(
    server_factory: Any, dsn: str
) -> None:
    srv = server_factory(dsn, "--workers", "2")
    main, workers = _workers(srv)
    _every_worker_listens(workers, srv.port)
    # The main process keeps the address bound, not listening: a connection queued there
    # would wait for an accept that never comes.
    assert _held(main, srv.port, psutil.CONN_LISTEN) == 0

    socks = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(CONNECTIONS)]
    try:
        # Every connection answered (none waits in a backlog nobody accepts from), and
        # held open (keep-alive) while the kernel's table is read.
        assert {_answered(s) for s in socks} == {b"HTTP/1.1 200 OK"}
        held = [_held(w, srv.port, psutil.CONN_ESTABLISHED) for w in workers]
    finally:
        for s in socks:
            s.close()
    assert sum(held) == CONNECTIONS, held
    assert min(held) >= FEWEST, f"connections by worker: {held}"


def test_one_worker_listens_on_the_socket_serve_bound(server_factory: Any, dsn: str) -> None:
    # No reservation for a single worker: the process serve started listens itself
    srv = server_factory(dsn)
    assert srv.proc is not None
    assert _held(psutil.Process(srv.proc.pid), srv.port, psutil.CONN_LISTEN) == 1


def _loopback6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_each_worker_listens_beside_the_reservation_on_its_address(host: str) -> None:
    """In process, as serve and its workers do: the reservation is bound, not listening;
    each worker's own socket binds the same address (IPv6 too) and takes connections."""
    if host == "::1" and not _loopback6():
        pytest.skip("no IPv6 loopback here")
    reservation = listeners.listen(host, 0, workers=2)
    mine: list[socket.socket] = []
    try:
        assert listeners.reserved(reservation)
        port = reservation.getsockname()[1]
        for _ in range(2):
            kwargs: dict[str, Any] = {"sock": reservation.dup()}  # each worker's inherited copy
            listeners.listen_in_the_worker(kwargs)
            own = kwargs["sock"]
            mine.append(own)
            assert own.getsockname()[:2] == (host, port)
            own.listen()
        with socket.create_connection((host, port), timeout=5):
            pass  # accepted into one of the two backlogs
        assert not listeners.reserved(mine[0])  # listening: a worker keeps it as it is
    finally:
        for s in (reservation, *mine):
            s.close()


def test_one_worker_gets_a_listening_socket_and_no_reservation() -> None:
    sock = listeners.listen("127.0.0.1", 0, workers=1)
    with sock:
        assert not listeners.reserved(sock)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        kwargs: dict[str, Any] = {"sock": sock}
        listeners.listen_in_the_worker(kwargs)
        assert kwargs["sock"] is sock

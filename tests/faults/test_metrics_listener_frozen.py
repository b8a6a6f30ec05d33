"""The ``[metrics] addr`` listener's counts on a database that froze (SIGSTOP) between
answering the connection and answering the read: each read gives up on time on this side
(the server's own ``statement_timeout`` never fires once it is frozen), the gauges keep
their last values, and one warning says so per outage."""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from sbfaults import PrivatePostgres

from switchboard.scrape import _ListenerCounts
from switchboard.store.migrate import NoAnswer
from switchboard.store.pending import pending_counts_sync
from switchboard.store.reroute import held_count_sync
from switchboard.store.todos import todo_counts_sync

pytestmark = pytest.mark.slow  # a frozen server: the fault tests' envs run it

TIMEOUT_S = 1.0
#: Connecting and the statement each have the deadline: a read ends within both, and
#: this test's own wait (past it the read is taken for blocked) is well beyond.
READ_BOUND_S = 2 * TIMEOUT_S + 0.5
GIVE_UP_S = 10.0


class FreezeAtFirstQuery:
    """A TCP proxy in front of ``pg`` that, once armed, freezes the whole server as the
    first query of the next connection it accepts arrives (then forwards it, to nobody
    who answers). Not an earlier connection's next message: its goodbye comes late.

    A read on a fresh connection to a server frozen beforehand meets it at connecting,
    which libpq's ``connect_timeout`` bounds; one that froze after connecting waited for
    ever on a blocking read.
    """

    def __init__(self, pg: PrivatePostgres, dsn: str) -> None:
        self.pg = pg
        info = conninfo_to_dict(dsn)
        host, port = str(info.get("host") or "/tmp"), int(info.get("port") or 5432)
        self.upstream: Any = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.dsn = make_conninfo(
            dsn, host="127.0.0.1", hostaddr="127.0.0.1", port=self.listener.getsockname()[1],
            sslmode="disable", gssencmode="disable",
        )  # fmt: skip
        self.armed, self.stopped = threading.Event(), threading.Event()
        self.froze = 0
        self.freeze = contextlib.ExitStack()
        self.threads = [threading.Thread(target=self._accept, name="proxy", daemon=True)]
        self.threads[0].start()

    def arm(self) -> None:
        self.armed.set()

    def thaw(self) -> None:
        self.freeze.close()

    def close(self) -> None:
        self.thaw()
        self.stopped.set()
        for thread in self.threads:
            thread.join(5)
        self.listener.close()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            armed = self.armed.is_set()
            self.armed.clear()
            thread = threading.Thread(target=self._pump, args=(client, armed), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _pump(self, client: socket.socket, armed: bool) -> None:
        family = socket.AF_UNIX if isinstance(self.upstream, str) else socket.AF_INET
        with client, socket.socket(family) as server, selectors.DefaultSelector() as sel:
            client.settimeout(5)
            server.settimeout(5)
            server.connect(self.upstream)
            sel.register(client, selectors.EVENT_READ)
            sel.register(server, selectors.EVENT_READ)
            answered, ready = b"", False
            while not self.stopped.is_set():
                for key, _ in sel.select(0.2):
                    try:
                        data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    except OSError:
                        return
                    if not data:
                        return
                    if key.fileobj is server:
                        if not ready:
                            answered += data
                            ready = _ready_for_query(answered)
                        client.sendall(data)
                        continue
                    if ready and armed:
                        armed = False
                        self.freeze.enter_context(self.pg.frozen())
                        self.froze += 1
                    server.sendall(data)


def _ready_for_query(answered: bytes) -> bool:
    """Whether the server's start-up messages so far end the start-up (ReadyForQuery)."""
    at = 0
    while at + 5 <= len(answered):
        if answered[at : at + 1] == b"Z":
            return True
        at += 1 + int.from_bytes(answered[at + 1 : at + 5], "big")
    return False


@pytest.fixture
def proxy(private_pg: PrivatePostgres, private_dsn: str) -> Iterator[FreezeAtFirstQuery]:
    proxied = FreezeAtFirstQuery(private_pg, private_dsn)
    try:
        yield proxied
    finally:
        proxied.close()


def timed(call: Callable[[], Any]) -> tuple[float, BaseException | None]:
    """``call()`` on a thread of its own: how long it took, and what it raised. A call
    still blocked after :data:`GIVE_UP_S` fails the test (it is left to the thaw)."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, name="frozen-read", daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(GIVE_UP_S)
    assert not thread.is_alive(), f"still blocked after {GIVE_UP_S:g} s"
    return time.monotonic() - started, raised[0] if raised else None


@pytest.mark.parametrize("read", [todo_counts_sync, pending_counts_sync, held_count_sync])
def test_each_count_read_gives_up_on_time_when_the_database_freezes(
    proxy: FreezeAtFirstQuery, read: Callable[[str, float], Any]
) -> None:
    read(proxy.dsn, TIMEOUT_S)  # answers while the server does
    proxy.arm()
    elapsed, raised = timed(lambda: read(proxy.dsn, TIMEOUT_S))
    proxy.thaw()
    assert proxy.froze == 1
    assert isinstance(raised, NoAnswer), raised
    assert elapsed < READ_BOUND_S, elapsed


def test_the_listener_keeps_its_last_counts_and_warns_once_per_outage(
    proxy: FreezeAtFirstQuery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="switchboard.metrics")
    counts = _ListenerCounts(proxy.dsn, TIMEOUT_S)
    counts._read()
    before = counts.last
    assert before is not None and before[3] == 0

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]

    for outage in (1, 2):  # each said once however many scrapes it lasts
        caplog.clear()
        proxy.arm()
        # the first read meets the freeze at its query, the next at connecting
        for _ in range(2):
            elapsed, raised = timed(counts._read)
            assert raised is None and elapsed < READ_BOUND_S, (raised, elapsed)
        proxy.thaw()
        assert proxy.froze == outage
        assert counts.last is before
        assert warnings() == [
            "metrics: todo counts unavailable: the database gave no answer within 1 s"
            " (server.database_timeout_ms); the gauges keep their last values"
        ]
        assert "Traceback" not in caplog.text
        counts._read()
        assert counts.last is not None and counts.last[0] > before[0]
        assert caplog.messages[-1] == "metrics: todo counts read again"
        before = counts.last

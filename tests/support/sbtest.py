"""Helpers the tests share: the real CLI and server as child processes."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

# The installed console script, never `python -m` from a checkout: tests exercise the
# package exactly as pip installed it.
SWITCHBOARD = [str(Path(sys.executable).with_name("switchboard"))]


#: Every credential the suite was shown (endpoint tokens, ingest tokens, signing secrets):
#: no server log may contain any of them (checked when each server stops).
SHOWN_SECRETS: set[str] = set()

#: Shapes no log line may carry whatever test produced them: minted secrets, signatures.
_SECRET_SHAPES = re.compile(rb"(sbe_|whsec_)[0-9a-f]{8}|sha256=[0-9a-f]{64}")


#: A scrape's samples, by name and sorted labels.
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """Every sample of a scrape of ``url`` (a /metrics address), by name and sorted labels."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    resp = httpx.get(url, timeout=10)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/plain")
    out: Samples = {}
    for family in text_string_to_metric_families(resp.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def remember_secrets(doc: Any) -> None:
    """Note every credential in a CLI or MCP answer (``token``, ``signing_secret``, URLs)."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key in ("token", "signing_secret") and isinstance(value, str):
                SHOWN_SECRETS.add(value)
            elif key == "ingest_url" and isinstance(value, str):
                SHOWN_SECRETS.add(value.rsplit("/", 1)[-1])
            else:
                remember_secrets(value)
    elif isinstance(doc, list):
        for value in doc:
            remember_secrets(value)


def assert_log_has_no_secrets(log: Path) -> None:
    """No credential the suite saw, nor any secret-shaped string, is in ``log``."""
    text = log.read_bytes() if log.exists() else b""
    leaked = sorted(s for s in SHOWN_SECRETS if s.encode() in text)
    assert not leaked, f"{log} contains credentials: {leaked[:3]}"
    shape = _SECRET_SHAPES.search(text)
    assert shape is None, f"{log} contains a secret-shaped string: {shape[0]!r}"


@contextlib.contextmanager
def database_refusing(pg_server: Any, dsn: str) -> Iterator[None]:
    """The database of ``dsn`` goes away: its sessions are killed and new ones refused."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    name = conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,)
        )
    try:
        yield
    finally:
        with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
            conn.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_env(dsn: str | None, data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env["SWITCHBOARD_DATA_DIR"] = str(data_dir)
    env["SWITCHBOARD_SECRET_KEY"] = "test-secret-key-0123456789"
    if dsn:
        env["SWITCHBOARD_DATABASE_URL"] = dsn
    env.update(extra)
    return env


def run_in_process(
    args: tuple[str, ...], env: dict[str, str], input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``switchboard ARGS`` through the command's own ``main``, in this process.

    The same parser, runtime and service calls as the console script, without the second
    of interpreter start-up and imports a child process costs: for the many variations a
    verb is checked with, once a test has run that verb through the real script. The
    environment is ``env`` for the call's duration; stdin, stdout and stderr are strings.
    """
    from switchboard.cli.main import main
    from switchboard.logsetup import CHATTY

    saved = dict(os.environ)
    # main configures logging (a stderr handler, levels): undone after, so one call's
    # handler does not outlive its captured stderr and pytest's capture keeps its level.
    loggers = [logging.getLogger(name) for name in ("", *CHATTY)]
    logging_state = [(lg, lg.level, list(lg.handlers)) for lg in loggers]
    out, err = io.StringIO(), io.StringIO()
    stdin = sys.stdin
    os.environ.clear()
    os.environ.update(env)
    sys.stdin = io.StringIO(input or "")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            # On a thread of its own: main runs its own event loop, which an async test's
            # running loop would refuse.
            with ThreadPoolExecutor(1) as pool:
                code = pool.submit(_exit_code, main, list(args)).result()
    finally:
        sys.stdin = stdin
        os.environ.clear()
        os.environ.update(saved)
        for lg, level, handlers in logging_state:
            lg.setLevel(level)
            lg.handlers[:] = handlers
    return subprocess.CompletedProcess(["switchboard", *args], code, out.getvalue(), err.getvalue())


def _exit_code(main: Any, argv: list[str]) -> int:
    try:
        code: int = main(argv)
        return code
    except SystemExit as exc:  # argparse: --help, or a refused flag (exit 2)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)


class CLI:
    """Runs the real ``switchboard`` command against one database.

    ``in_process=True`` runs it through :func:`run_in_process` instead of the console script.
    """

    def __init__(self, env: dict[str, str], *, in_process: bool = False) -> None:
        self.env = env
        self.in_process = in_process

    def fast(self) -> CLI:
        """The same command and database, run in this process."""
        return CLI(self.env, in_process=True)

    def run(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        if self.in_process:
            proc = run_in_process(args, self.env, input)
        else:
            proc = subprocess.run(
                [*SWITCHBOARD, *args],
                env=self.env,
                capture_output=True,
                text=True,
                input=input,
                timeout=120,
            )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"switchboard {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}"
            )
        return proc

    def json(self, *args: str) -> Any:
        doc = json.loads(self.run(*args).stdout)
        remember_secrets(doc)
        return doc


def session_of(sid: int) -> list[int]:
    """The processes still running in session ``sid`` (a command's or serve's, and their
    children: a worker, an evaluator)."""
    left = []
    for pid in psutil.pids():
        with contextlib.suppress(OSError, psutil.Error):
            if os.getsid(pid) == sid and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
    return left


def as_a_terminal_job() -> None:
    """``preexec_fn`` for a child a test will Ctrl-C: SIGINT at its default, as a shell's
    foreground job has it. pytest-xdist's workers ignore SIGINT, and a child inherits that
    (Python then installs no KeyboardInterrupt handler: Ctrl-C would do nothing), unless a
    test run earlier in the worker happened to restore it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def sanic_workers(main: psutil.Process) -> list[psutil.Process]:
    """The Sanic workers of ``serve``'s main process ``main`` (not the resource tracker nor
    the manager of its shared state)."""
    return [p for p in main.children() if p.environ().get("SANIC_WORKER_NAME")]


def stop_process_group(proc: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    """SIGTERM ``proc`` (started with ``start_new_session=True``), then SIGKILL its group.

    A multi-worker server's workers are its children: whatever of the group outlives the
    main process (a worker caught mid-start) is killed, so no test leaves a process behind.
    """
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Server:
    """A real ``switchboard serve`` child process on a free port."""

    def __init__(self, env: dict[str, str], port: int, log: Path) -> None:
        self.env = env
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *extra: str, timeout: float = 60.0) -> Server:
        """Start serving; one worker unless ``extra`` says ``--workers`` (serve's own
        default, a worker per CPU, would only make the suite's many servers slower)."""
        self._fh = open(self.log, "ab")
        if "--workers" not in extra:
            extra = ("--workers", "1", *extra)
        self.proc = subprocess.Popen(
            [*SWITCHBOARD, "serve", "--port", str(self.port), *extra],
            env=self.env,
            stdout=self._fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        import urllib.request

        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited early:\n{self.log.read_text()}")
            try:
                with urllib.request.urlopen(self.base_url + "/healthz", timeout=1) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"server did not become healthy:\n{self.log.read_text()}")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process_group(self.proc)
            self._fh.close()
            assert_log_has_no_secrets(self.log)
        self.proc = None


#: The third-party fixture distribution (the README's "Writing a plugin" example, tested).
HELLO = Path(__file__).resolve().parents[1] / "plugins" / "hello"


def install_hello(root: Path) -> Path:
    """pip-install a copy of the fixture distribution into ``root/site``; return that directory."""
    return install_distribution(HELLO, root)


def install_plugin_module(dist: str, module: str, code: str, root: Path) -> Path:
    """pip-install a plugin distribution ``dist`` of one package, ``module`` (its entry
    point, named after it), whose ``__init__.py`` is ``code``, into ``root/site``
    (:func:`install_distribution`); return that site."""
    source = root / "source"
    (source / module).mkdir(parents=True)
    (source / "pyproject.toml").write_text(
        "[build-system]\n"
        'requires = ["setuptools>=68"]\n'
        'build-backend = "setuptools.build_meta"\n\n'
        "[project]\n"
        f'name = "{dist}"\n'
        'version = "0.1"\n'
        'dependencies = ["switchboard"]\n\n'
        "[project.entry-points.switchboard]\n"
        f'{module.removeprefix("switchboard_")} = "{module}"\n'
    )
    (source / module / "__init__.py").write_text(code)
    return install_distribution(source, root / "install")


def install_distribution(source: Path, root: Path) -> Path:
    """pip-install a copy of the distribution at ``source`` into ``root/site``; return it.

    Built from a copy, so no build output lands in the source tree, and installed into a
    directory of its own, so only processes given it on ``PYTHONPATH`` (or ``sys.path``) see
    the plugin: test runs sharing the venv never do. Removing the directory uninstalls it.
    """
    src = shutil.copytree(
        source, root / "src", ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    site = root / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--disable-pip-version-check",
            "-q",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-compile",
            "--target",
            str(site),
            str(src),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return site

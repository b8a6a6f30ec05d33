"""The ``switchboard`` command: load config and plugins, then run one registered command."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .. import __version__, loghygiene, logsetup
from ..config import base_url_mismatch, load_config
from ..errors import ConfigError, InvalidArgument, StoreUnavailable, SwitchboardError
from ..runtime import Runtime
from ..store.dsn import stopped_answering


def emit(doc: Any) -> None:
    """Write one JSON document to stdout (what scripts read)."""
    print(json.dumps(doc, indent=2, sort_keys=False, default=str))


#: Exit codes (README, "Operating it"): 1 when the command could not be done (not found,
#: refused, conflict, the store or server unavailable), 2 when what was asked is wrong
#: (usage, config, a bad flag value or input file): fix the command, not the world. 141
#: (128 + SIGPIPE, as a shell reports a Unix tool the signal stopped) when the reader of
#: its output went away.
EXIT_RUNTIME, EXIT_USAGE, EXIT_PIPE = 1, 2, 141
#: 128 + SIGTERM: stopped by SIGTERM before anything of its own (serve's server) took it.
EXIT_TERM = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, taken as Ctrl-C is: the command unwinds (its ``finally`` blocks run), so an
    embedded PostgreSQL it started is stopped, not left running as it was when the signal
    killed the process outright (``serve`` in its start, before Sanic takes the signal)."""


def _terminated(signum: int, frame: object) -> None:
    raise Terminated


def _sigterm_as_ctrl_c() -> Callable[[], object]:
    """SIGTERM raises :class:`Terminated` from now on; returns what puts the previous
    handler back. Only in the main thread: a caller running commands on another thread (the
    tests, in process) keeps its own, as Python allows no other."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGTERM, _terminated)
    return lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def exit_code(exc: BaseException) -> int:
    """2 for a usage, config or input error (fix what was typed), else 1."""
    return EXIT_USAGE if isinstance(exc, ConfigError | InvalidArgument) else EXIT_RUNTIME


def warn_default_base_url(rt: Runtime) -> None:
    """One line on stderr when the URLs about to be printed come from the default
    ``base_url`` but the configured listen address (``addr``) is on another port."""
    if rt.config.base_url_written:
        return  # written on purpose (a proxy's public URL, say): serve checks it at start
    mismatch = base_url_mismatch(rt.config, rt.config.port)
    if mismatch:
        print(f"switchboard: warning: {mismatch}", file=sys.stderr)


def version_line() -> str:
    return f"switchboard {__version__}"


def build_parser(rt: Runtime | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="switchboard",
        description="Switchboard: verified webhook deliveries in, routed todos out.",
    )
    parser.add_argument("--config", metavar="PATH", help="TOML config file (or SWITCHBOARD_CONFIG)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    parser.add_argument(
        "--version", action="version", version=version_line(), help="print the version and exit"
    )
    parser.add_argument(
        "--log-level",
        metavar="LEVEL",
        type=str.lower,
        choices=logsetup.LEVELS,
        help="log level (overrides [log] level; default: info for serve, warning otherwise)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    if rt is not None:
        for cmd in sorted(rt.registries.commands, key=lambda c: c.name):
            p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
            # Also after the command (``switchboard serve --log-level debug``).
            p.add_argument(
                "--log-level",
                metavar="LEVEL",
                type=str.lower,
                choices=logsetup.LEVELS,
                default=argparse.SUPPRESS,
                help="log level (overrides [log] level)",
            )
            # configure(parser) or configure(parser, runtime): the runtime lets a command
            # offer what is installed and enabled (send's --source choices).
            if len(inspect.signature(cmd.configure).parameters) >= 2:
                cmd.configure(p, rt)
            else:
                cmd.configure(p)
            p.set_defaults(_command=cmd)
    return parser


async def _run_async(rt: Runtime, cmd: Any, args: argparse.Namespace) -> int:
    try:
        if cmd.needs_store:
            await rt.open_store(create=cmd.may_create_database(args))
        code: int = await cmd.run(args, rt)
        return code
    finally:
        await rt.shutdown()


def _configure_logging(rt: Runtime, command: str, args: argparse.Namespace) -> None:
    """Level: ``--log-level``, else ``-v`` (debug), else ``[log] level``, else info for
    ``serve`` (its start-up and delivery lines) and warning for the other commands."""
    section = rt.config.section("log")
    if args.log_level:
        name = args.log_level
    elif args.verbose:
        name = "debug"
    else:
        name = section.get("level") or ("info" if command == "serve" else "warning")
    fmt = logsetup.resolve_format(section.get("format"))
    logsetup.configure(logsetup.level_number(name), fmt)
    if command == "serve":
        # serve's workers are fresh processes: they read what was resolved here.
        os.environ[logsetup.LEVEL_ENV], os.environ[logsetup.FORMAT_ENV] = name, fmt


@contextlib.contextmanager
def driver_warnings_quiet() -> Iterator[None]:
    """psycopg's and its pool's warnings hidden for the block, unless at debug level.

    A command says a database failure in its own error line, and exits 130 on Ctrl-C:
    their warnings on the way (a cancel a frozen server never answered, a connection
    discarded, a reconnect that timed out) only repeat it, as JSON lines on a pipe.
    serve's log keeps them once it serves.
    """
    driver = logging.getLogger("psycopg")
    level = driver.level
    if not driver.isEnabledFor(logging.DEBUG):
        driver.setLevel(logging.ERROR)
    try:
        yield
    finally:
        driver.setLevel(level)


def _where_unavailable(rt: Runtime, exc: SwitchboardError) -> SwitchboardError:
    """The store's bare "database unavailable" (a statement with no answer in time, a
    connection lost), said with which database and why, as a refused connection is."""
    if isinstance(exc, StoreUnavailable) and rt.dsn and str(exc) == str(StoreUnavailable()):
        return stopped_answering(rt.dsn, rt.database_url_from(), exc)
    return exc


def printable(text: str, escape: Callable[[str], str], keep: str = "\n") -> str:
    """``text`` with each character that is neither printable nor in ``keep`` written as
    ``escape(c)``: nothing stored or quoted may steer the terminal it is printed on."""
    rest = text
    for c in keep:
        rest = rest.replace(c, "")
    if rest.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else escape(c) for c in text)


def terminal_safe(text: str) -> str:
    """``text`` with each character that is not printable, but a line break, written as
    its Python escape (``\\x1b``, ``\\u202e``): a message quoting a rule's name or a
    producer's kind must not steer the terminal it is printed on."""
    return printable(text, lambda c: c.encode("unicode_escape").decode("ascii"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    pre.add_argument("-v", "--verbose", action="store_true")
    # Before the config is read: the version is printed even where the config is broken.
    pre.add_argument("--version", action="version", version=version_line())
    pre.add_argument("--log-level", type=str.lower, choices=logsetup.LEVELS)
    known, _ = pre.parse_known_args(argv)
    loghygiene.install(logging.DEBUG if known.verbose else logging.WARNING)
    try:
        if known.config == "":  # not "no file": a variable that expanded to nothing, say
            raise ConfigError("--config: must be the path of a TOML file (got an empty string)")
        rt = Runtime(load_config(known.config))
    except SwitchboardError as exc:
        print(f"switchboard: error: {terminal_safe(str(exc))}", file=sys.stderr)
        return 2
    args = build_parser(rt).parse_args(argv)
    cmd = args._command
    _configure_logging(rt, cmd.name, args)
    restore = _sigterm_as_ctrl_c()  # from here on, something may need stopping
    try:
        if inspect.iscoroutinefunction(cmd.run):
            with driver_warnings_quiet():
                result: int = asyncio.run(_run_async(rt, cmd, args))
        else:
            result = cmd.run(args, rt)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at the interpreter's exit
        return result
    except BrokenPipeError:
        # the reader went away (`| head`): the rest of the output is dropped, silently, as a
        # Unix tool killed by SIGPIPE drops it; the exit status says so the same way
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE
    except SwitchboardError as exc:
        exc = _where_unavailable(rt, exc)
        code = getattr(exc, "code", None)
        prefix = f"{code}: " if code and code not in str(exc) else ""
        print(f"switchboard: error: {prefix}{terminal_safe(str(exc))}", file=sys.stderr)
        return exit_code(exc)
    except KeyboardInterrupt as exc:
        return EXIT_TERM if isinstance(exc, Terminated) else 130
    finally:
        rt.stop_embedded()
        restore()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

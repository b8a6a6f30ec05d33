"""``switchboard send``: requests built exactly as each producer builds them, and one real POST."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sbtest import CLI, SWITCHBOARD, as_a_terminal_job, free_port, make_env
from sbworld import World
from switchboard_cairn.source import CairnSource, parse_rfc3339
from switchboard_generic.source import GenericSource
from switchboard_gitea.source import GiteaSource
from switchboard_github.source import GithubSource

from switchboard.cli import send as send_module
from switchboard.cli.send import UsageError, build_request, configure, run
from switchboard.config import load_config
from switchboard.registry import SourceRegistry
from switchboard.runtime import Runtime
from switchboard.sources import (
    TRUST_SIGNED,
    Delivery,
    Headers,
    Verification,
    hmac_sha256_hex,
    producer_side,
)

SECRET = b"send-secret-0123456789abcdef0123456789"
NOW = datetime(2026, 9, 11, 17, 4, 5, tzinfo=UTC).timestamp()
SOURCES = {s.name: s for s in (CairnSource(), GiteaSource(), GithubSource(), GenericSource())}


def verify(source: str, body: bytes, headers: dict[str, str], now: float = NOW) -> Any:
    return SOURCES[source].verify(Delivery(Headers(headers), body), SECRET, now)


@pytest.mark.parametrize(
    "source,fixture,event,expected",
    [
        ("github", "github_issues_opened", "issues", {"X-GitHub-Event": "issues"}),
        ("gitea", "gitea_issues_label_updated", "issue_label", {"X-Gitea-Event": "issues"}),
        ("generic", "generic_alert", "ignored", {"Content-Type": "application/json"}),
    ],
)
def test_build_request_verifies(
    recorded: Any, source: str, fixture: str, event: str, expected: dict[str, str]
) -> None:
    original = recorded(fixture).body
    body, headers = build_request(source, original, SECRET, event, {}, stamp=True)
    assert body == original  # only cairn bodies are ever rewritten
    assert expected.items() <= headers.items()
    assert verify(source, body, headers).ok


def test_cairn_body_with_stamps_is_sent_byte_for_byte(recorded: Any) -> None:
    original = recorded("cairn_artifact_created").body
    body, headers = build_request("cairn", original, SECRET, None, [], stamp=False)
    assert body == original
    assert headers["X-Cairn-Event-Id"] == "6f1c1f0e-7f5b-4b8e-9a51-3f7f2c1d9b20"
    assert verify("cairn", body, headers).ok


def test_cairn_stamp_replaces_id_and_clock(recorded: Any) -> None:
    original = recorded("cairn_artifact_created").body
    later = NOW + 86_400
    body, headers = build_request("cairn", original, SECRET, None, [], stamp=True, now=later)
    doc = json.loads(body)
    assert doc["event_id"] != "6f1c1f0e-7f5b-4b8e-9a51-3f7f2c1d9b20"
    assert doc["created_at"] == "2026-09-12T17:04:05Z"
    assert headers["X-Cairn-Event-Id"] == doc["event_id"]
    assert headers["X-Cairn-Event"] == "artifact.created"
    assert headers["User-Agent"] == "cairn-outboundhook/1"
    assert verify("cairn", body, headers, now=later).ok
    assert doc["data"] == json.loads(original)["data"]


def test_cairn_missing_stamps_are_added_without_stamp() -> None:
    original = b'{"kind": "artifact.created", "data": {"n": 12345678901234567890123}}'
    body, headers = build_request("cairn", original, SECRET, None, [], stamp=False, now=NOW)
    doc = json.loads(body)
    assert parse_rfc3339(doc["created_at"]) is not None
    assert doc["data"]["n"] == 12345678901234567890123
    assert verify("cairn", body, headers).ok


@pytest.mark.parametrize("body", [b"not json", b"[1]"])
def test_cairn_body_that_cannot_be_stamped(body: bytes) -> None:
    with pytest.raises(UsageError):
        build_request("cairn", body, SECRET, None, [], stamp=False)


def test_extra_headers_replace_the_producers_in_any_case() -> None:
    body, headers = build_request(
        "cairn",
        b'{"kind":"k","event_id":"e1","created_at":"2026-09-11T17:04:05Z"}',
        SECRET,
        None,
        [("x-cairn-event-id", "forged")],
        stamp=False,
    )
    assert headers["x-cairn-event-id"] == "forged" and "X-Cairn-Event-Id" not in headers
    assert not verify("cairn", body, headers).ok


def test_unknown_source() -> None:
    with pytest.raises(UsageError):
        build_request("no-such-source", b"{}", SECRET, None, [], stamp=False)


# --------------------------------------------------------------------------------------
# --source offers exactly the runtime's sources that can sign
# --------------------------------------------------------------------------------------


class WidgetSource:
    """A third party's source with a producer side."""

    name = "widget"
    trust_mode = TRUST_SIGNED

    def verify(self, delivery: Delivery, secret: bytes | None, now: float) -> Verification:
        return Verification(ok=True, verified=True)

    def sign(self, body: bytes, secret: bytes | None, kind: str | None) -> dict[str, str]:
        return {"X-Widget-Mac": hmac_sha256_hex(secret or b"", body)}


class ListenerSource:
    """A third party's source that only verifies: nothing to sign as."""

    name = "listener"
    trust_mode = TRUST_SIGNED

    def verify(self, delivery: Delivery, secret: bytes | None, now: float) -> Verification:
        return Verification(ok=True, verified=True)


def runtime_from(tmp_path: Path, toml: str = "") -> Runtime:
    path = tmp_path / "switchboard.toml"
    path.write_text(toml)
    return Runtime(load_config(env=make_env(None, tmp_path / "data", SWITCHBOARD_CONFIG=str(path))))


def third_party_runtime() -> Any:
    sources = SourceRegistry()
    sources.current_plugin = "third-party"
    sources.add(WidgetSource())
    sources.add(ListenerSource())
    return SimpleNamespace(registries=SimpleNamespace(sources=sources))


def offered(runtime: Any) -> list[str]:
    """The ``--source`` choices ``send --help`` lists for ``runtime``."""
    parser = argparse.ArgumentParser()
    configure(parser, runtime)
    text = " ".join(parser.format_help().split())
    return text.split("the producer to sign as: ", 1)[1].split(" (", 1)[0].split(", ")


def refused(runtime: Any, source: str, capsys: pytest.CaptureFixture[str]) -> str:
    """argparse's error for ``--source source``."""
    parser = argparse.ArgumentParser()
    configure(parser, runtime)
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["--url", "http://x/", "--source", source, "body.json"])
    assert info.value.code == 2
    return capsys.readouterr().err


def test_source_choices_are_the_installed_sources_that_sign(tmp_path: Path) -> None:
    rt = runtime_from(tmp_path)
    signers = sorted(s.name for s in rt.registries.sources if producer_side(s) is not None)
    assert {"cairn", "generic", "gitea", "github"} <= set(signers)
    assert offered(rt) == signers
    parser = argparse.ArgumentParser()
    configure(parser, rt)
    for name in signers:
        assert parser.parse_args(["--url", "http://x/", "--source", name, "f"]).source == name


def test_without_a_runtime_no_registry_is_built_for_choices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A plugin may need its config to register; only run() looks the source up.
    def unexpected() -> None:
        raise AssertionError("configure built a registry")

    monkeypatch.setattr("switchboard.cli.send.installed_sources", unexpected)
    parser = argparse.ArgumentParser()
    configure(parser)
    assert (
        parser.parse_args(["--url", "http://x/", "--source", "anything", "f"]).source == "anything"
    )


def test_installed_sources_register_with_their_config_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[Any] = []
    real = send_module.build_registries

    def spy(pm: Any, config: Any = None) -> Any:
        seen.append(config)
        return real(pm, config)

    monkeypatch.setattr(send_module, "build_registries", spy)
    send_module.installed_sources.cache_clear()
    try:
        assert "cairn" in send_module.installed_sources()
    finally:
        send_module.installed_sources.cache_clear()
    (config,) = seen
    assert config.plugin("cairn") == {"freshness_seconds": 300}


def test_a_disabled_source_is_not_offered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rt = runtime_from(tmp_path, 'disabled_plugins = ["gitea"]\n')
    assert "gitea" not in offered(rt) and "github" in offered(rt)
    error = refused(rt, "gitea", capsys)
    assert "invalid choice: 'gitea'" in error
    assert "'gitea'" not in error.rpartition("choose from")[2]


def test_a_third_party_source_that_signs_is_offered(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rt = third_party_runtime()
    assert offered(rt) == ["widget"]  # the listener has no producer side
    assert "invalid choice: 'listener'" in refused(rt, "listener", capsys)
    assert "invalid choice: 'github'" in refused(rt, "github", capsys)


# --------------------------------------------------------------------------------------
# The command end to end, against a local HTTP server
# --------------------------------------------------------------------------------------


class _Receiver(BaseHTTPRequestHandler):
    received: list[tuple[dict[str, str], bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.received.append((dict(self.headers.items()), body))
        ok = self.path == "/ok"
        payload = json.dumps({"accepted": ok}).encode() if ok else b"nope"
        self.send_response(202 if ok else 401)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    _Receiver.received = []
    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def send(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure(parser)
    return parser.parse_args(list(argv))


def test_send_posts_signed_body(
    receiver: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body_file = tmp_path / "issue.json"
    body_file.write_bytes(b'{"action":"opened"}')
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET.decode() + "\n")
    args = send(
        "--url", f"{receiver}/ok", "--source", "github", "--secret", f"@{secret_file}",
        "--event", "issues", "--header", "X-Trace: a:b", str(body_file),
    )  # fmt: skip
    assert asyncio.run(run(args, None)) == 0
    assert json.loads(capsys.readouterr().out) == {"status": 202, "response": {"accepted": True}}
    ((headers, body),) = _Receiver.received
    assert body == b'{"action":"opened"}'
    assert headers["X-Trace"] == "a:b"
    assert verify("github", body, headers).ok


def test_send_non_2xx_exits_1(
    receiver: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body_file = tmp_path / "alert.json"
    body_file.write_bytes(b"{}")
    args = send("--url", f"{receiver}/no", "--source", "generic", str(body_file))
    assert asyncio.run(run(args, None)) == 1
    out = capsys.readouterr()
    assert json.loads(out.out) == {"status": 401, "response": "nope"}
    assert out.err == "switchboard send: error: the server answered 401\n"


def test_send_to_an_unreachable_server_exits_1_saying_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body_file = tmp_path / "alert.json"
    body_file.write_bytes(b"{}")
    port = free_port()  # nothing listens there
    args = send("--url", f"http://127.0.0.1:{port}/", "--source", "generic", str(body_file))
    assert asyncio.run(run(args, None)) == 1
    out = capsys.readouterr()
    assert json.loads(out.out)["status"] == 0
    assert out.err.startswith("switchboard send: error: request failed: ")


#: A whole answer, which the dribbling server below sends a byte at a time.
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 40\r\n\r\n"
DRIBBLE_S = 0.2


@contextlib.contextmanager
def dribbling(at_once: bytes, dribbled: bytes) -> Iterator[tuple[str, threading.Event]]:
    """A server that reads one request, sends ``at_once``, then ``dribbled`` a byte every
    :data:`DRIBBLE_S` (each recv of the client's is quick: a per-read timeout never fires);
    its URL, and an event set once the request is read."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    asked, stop = threading.Event(), threading.Event()

    def serve() -> None:
        with contextlib.suppress(OSError), listener.accept()[0] as conn:
            conn.settimeout(10)
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                request += chunk
            asked.set()
            conn.sendall(at_once)
            for byte in dribbled:
                if stop.wait(DRIBBLE_S):
                    return
                conn.sendall(bytes([byte]))  # OSError once the client is gone

    thread = threading.Thread(target=serve, name="dribbler", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/", asked
    finally:
        stop.set()
        listener.close()
        thread.join(10)


TIMED_OUT = "request failed: no complete answer within 1 s (--timeout)"


@pytest.mark.parametrize(
    ("at_once", "dribbled"),
    [(b"", HEAD + b"x" * 40), (HEAD, b"x" * 40)],
    ids=["headers", "body"],
)
def test_send_timeout_is_a_deadline_for_the_whole_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], at_once: bytes, dribbled: bytes
) -> None:
    body_file = tmp_path / "alert.json"
    body_file.write_bytes(b"{}")
    with dribbling(at_once, dribbled) as (url, asked):
        args = send("--url", url, "--source", "generic", "--timeout", "1", str(body_file))
        started = time.monotonic()
        code = asyncio.run(run(args, None))
        elapsed = time.monotonic() - started
        assert asked.is_set()
    assert 1 <= elapsed < 2, elapsed
    assert code == 1
    out = capsys.readouterr()
    assert json.loads(out.out) == {"status": 0, "response": TIMED_OUT}
    assert out.err == f"switchboard send: error: {TIMED_OUT}\n"


def test_ctrl_c_ends_send_while_an_answer_dribbles_in(tmp_path: Path) -> None:
    body_file = tmp_path / "alert.json"
    body_file.write_bytes(b"{}")
    with dribbling(HEAD, b"x" * 40) as (url, asked):
        proc = subprocess.Popen(
            [*SWITCHBOARD, "send", "--source", "generic", "--url", url, "--timeout", "60",
             str(body_file)],
            env=make_env(None, tmp_path / "data"), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, preexec_fn=as_a_terminal_job,
        )  # fmt: skip
        try:
            assert asked.wait(30), "send never asked"
            time.sleep(DRIBBLE_S * 2)  # in the body's reads
            os.kill(proc.pid, signal.SIGINT)
            started = time.monotonic()
            _, err = proc.communicate(timeout=30)
            elapsed = time.monotonic() - started
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=10)
    assert (proc.returncode, "Traceback" in err) == (130, False), err
    assert elapsed < 1, elapsed


@pytest.mark.parametrize("problem", ["missing file", "unreadable secret", "bad header"])
def test_send_usage_errors_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], problem: str
) -> None:
    body_file = tmp_path / "body.json"
    body_file.write_bytes(b"{}")
    argv = ["--url", "http://127.0.0.1:9/", "--source", "github", str(body_file)]
    if problem == "missing file":
        argv[-1] = str(tmp_path / "absent.json")
    elif problem == "unreadable secret":
        argv[-1:-1] = ["--secret", f"@{tmp_path / 'no-secret'}"]
    else:
        argv[-1:-1] = ["--header", "no-colon"]
    assert asyncio.run(run(send(*argv), None)) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("switchboard send: error: ")


URL_FORM = "must be an http:// or https:// URL with a host and a port from 1 to 65535 if any"


@pytest.mark.parametrize(
    ("flag", "value", "error"),
    [
        ("--url", "notaurl", f"{URL_FORM} (it has no scheme)"),
        ("--url", "http://[::1", f"{URL_FORM} (it is not a URL)"),
        ("--url", "file:///etc/hostname", f'{URL_FORM} (the scheme is "file")'),
        ("--url", "http:///webhooks/w/x", f"{URL_FORM} (it has no host)"),
        (
            "--url",
            "http://127.0.0.1:99999/",
            f"{URL_FORM} (the port is not a number from 1 to 65535)",
        ),
        ("--url", "http://a b/", f"{URL_FORM} (it has a space or a control character)"),
        ("--timeout", "-1", "must be a number of seconds above 0 and at most 86400 (got -1)"),
        ("--timeout", "0", "must be a number of seconds above 0 and at most 86400 (got 0)"),
        ("--timeout", "nan", "must be a number of seconds above 0 and at most 86400 (got nan)"),
        ("--timeout", "inf", "must be a number of seconds above 0 and at most 86400 (got inf)"),
        ("--timeout", "1e10", "must be a number of seconds above 0 and at most 86400 (got 1e10)"),
        ("--timeout", "soon", "'soon' is not a number of seconds"),
    ],
)
def test_send_refuses_a_url_or_timeout_it_cannot_use(
    tmp_path: Path, flag: str, value: str, error: str
) -> None:
    body_file = tmp_path / "body.json"
    body_file.write_bytes(b"{}")
    argv = {"--url": "http://127.0.0.1:9/", "--timeout": "5"} | {flag: value}
    proc = subprocess.run(
        [*SWITCHBOARD, "send", "--source", "generic", str(body_file),
         "--url", argv["--url"], "--timeout", argv["--timeout"]],
        env=make_env(None, tmp_path / "data"), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr.splitlines()[-1] == f"switchboard send: error: argument {flag}: {error}"
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("header", "error"),
    [
        (
            "X-Note: caf\u00e9 \u20ac",
            "--header X-Note: its value must be Latin-1 text (HTTP sends header values as"
            " single bytes); percent-encode or base64 anything else",
        ),
        (
            "X-Note: \udcff",  # a byte that is not UTF-8 on the command line
            "--header X-Note: its value must be Latin-1 text (HTTP sends header values as"
            " single bytes); percent-encode or base64 anything else",
        ),
        ("X-Note: a\nb", "--header X-Note: its value has a line break or a NUL character"),
        (
            "X Note: a",
            "--header 'X Note': a header name is ASCII letters, digits and !#$%&'*+-.^_`|~",
        ),
    ],
)
def test_send_refuses_a_header_http_cannot_carry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], header: str, error: str
) -> None:
    body_file = tmp_path / "body.json"
    body_file.write_bytes(b"{}")
    args = send("--url", "http://127.0.0.1:9/", "--source", "generic", "--header", header,
                str(body_file))  # fmt: skip
    assert asyncio.run(run(args, None)) == 2
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", f"switchboard send: error: {error}\n")


def test_the_real_command_line_offers_only_enabled_signing_sources(tmp_path: Path) -> None:
    config = tmp_path / "sb.toml"
    config.write_text('disabled_plugins = ["gitea"]\n')
    env = {**make_env(None, tmp_path / "data"), "SWITCHBOARD_CONFIG": str(config)}
    shown = subprocess.run(
        [*SWITCHBOARD, "send", "--help"], env=env, capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    assert "cairn, generic, github" in " ".join(shown.stdout.split())
    refused = subprocess.run(
        [*SWITCHBOARD, "send", "--url", "http://127.0.0.1:9/", "--source", "gitea", "f"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "invalid choice: 'gitea'" in refused.stderr


# --------------------------------------------------------------------------------------
# A refused delivery: the reason the server recorded, looked up by its delivery id
# --------------------------------------------------------------------------------------


def test_send_shows_the_reason_the_server_recorded(
    server_factory: Any, dsn: str, tmp_path: Path
) -> None:
    srv = server_factory(dsn)
    w = World(CLI(srv.env), prefix="send-", direct=True)
    w.human("alice")
    w.endpoint("alice", "owner", queues="inbox", webhook_queues="inbox", sources="github")
    hook = w.webhook("owner", "github", "inbox")
    body_file = tmp_path / "issue.json"
    body_file.write_bytes(b'{"action":"opened"}')
    wrong = tmp_path / "wrong-secret"
    wrong.write_text("not-the-webhook-secret-0000\n")
    cli = CLI(srv.env).fast()

    refused = cli.run(
        "send", "--url", hook["ingest_url"], "--source", "github", "--secret", f"@{wrong}",
        "--event", "issues", str(body_file), check=False,
    )  # fmt: skip
    assert refused.returncode == 1, refused.stderr
    doc = json.loads(refused.stdout)
    # the producer's answer stays generic; the operator gets the recorded reason
    assert doc["status"] == 401
    assert doc["response"] == {"error": "signature verification failed", "code": "unauthenticated"}
    assert doc["refusal"]["reason"] == "mismatch"
    assert "does not match" in doc["refusal"]["detail"]
    assert "refused: mismatch: X-Hub-Signature-256 does not match the body" in refused.stderr
    assert "sending unsigned" not in refused.stderr

    unsigned = cli.run(
        "send", "--url", hook["ingest_url"], "--source", "github", str(body_file), check=False
    )  # fmt: skip
    assert "sending unsigned: github is a signed source and no --secret was given" in (
        unsigned.stderr
    )
    assert json.loads(unsigned.stdout)["refusal"]["reason"] == "missing_header"


def test_send_warns_only_when_unsigned_to_a_signed_source(
    receiver: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body_file = tmp_path / "alert.json"
    body_file.write_bytes(b"{}")
    asyncio.run(run(send("--url", f"{receiver}/ok", "--source", "generic", str(body_file)), None))
    assert "unsigned" not in capsys.readouterr().err
    asyncio.run(run(send("--url", f"{receiver}/no", "--source", "github", str(body_file)), None))
    captured = capsys.readouterr()
    assert "sending unsigned: github is a signed source" in captured.err
    assert "refusal" not in json.loads(captured.out)  # no runtime: nothing to look up

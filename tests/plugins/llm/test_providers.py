"""The first-party providers on their own: ``openai`` against the fake OpenAI-compatible
server (request shape, errors, timeouts, the key), ``static`` from its config."""

from __future__ import annotations

import gzip
import json
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeai import FakeAI
from sbtest import CLI, free_port, make_env
from switchboard_llm.providers import (
    MAX_ANSWER_BYTES,
    OpenAIProvider,
    ProviderError,
    StaticProvider,
)

from switchboard.config import load_config
from switchboard.errors import ConfigError
from switchboard.runtime import Runtime

SCHEMA = {"type": "object", "properties": {"queue": {"type": "string", "enum": ["a"]}}}
ANSWER = {"queue": "a", "confidence": 0.5, "reason": "r"}


def _openai(url: str, **spec: Any) -> OpenAIProvider:
    return OpenAIProvider({"type": "openai", "name": "t", "base_url": url, **spec})


async def test_the_request_is_a_chat_completion_with_the_schema(
    fake_ai: FakeAI, monkeypatch: Any
) -> None:
    monkeypatch.setenv("SB_TEST_KEY_A", "sk-a")
    model = fake_ai.on("shape", ANSWER)
    text = await _openai(fake_ai.base_url + "/", api_key_env="SB_TEST_KEY_A").complete(
        model, "sys", "user", SCHEMA, 5
    )
    assert json.loads(text) == ANSWER
    [req] = fake_ai.requests(model)
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == "Bearer sk-a"
    assert req.body == {
        "model": "shape",
        "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "user"}],
        "temperature": 0.0,
        "max_tokens": 512,
        "stream": False,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "triage_answer", "strict": True, "schema": SCHEMA},
        },
    }


@pytest.mark.parametrize("mode", ["json_object", "none"])
async def test_structured_output_can_be_relaxed_for_older_servers(
    fake_ai: FakeAI, mode: str
) -> None:
    model = fake_ai.on(f"mode-{mode}", ANSWER)
    await _openai(fake_ai.base_url, response_format=mode, max_tokens=64, temperature=0.2).complete(
        model, "s", "u", SCHEMA, 5
    )
    [req] = fake_ai.requests(model)
    assert "authorization" not in req.headers  # no api_key_env: no key sent
    assert req.body["max_tokens"] == 64 and req.body["temperature"] == 0.2
    if mode == "json_object":
        assert req.body["response_format"] == {"type": "json_object"}
    else:
        assert "response_format" not in req.body


async def test_failures_are_errors_that_never_carry_the_key(
    fake_ai: FakeAI, monkeypatch: Any
) -> None:
    monkeypatch.setenv("SB_TEST_KEY_B", "sk-secret-b")
    provider = _openai(fake_ai.base_url, api_key_env="SB_TEST_KEY_B")
    cases = {
        fake_ai.on("e500", status=500): "HTTP 500 from ",
        fake_ai.on("e429", status=429): "HTTP 429 from ",
        fake_ai.on("garbage", raw_body=b"<html>"): "the response is not a chat completion",
        fake_ai.on(
            "nocontent", raw_body=b'{"choices": [{"message": {"content": null}}]}'
        ): "the completion has no text",
        fake_ai.on(
            "refused", raw_body=b'{"choices": [{"message": {"refusal": "no"}}]}'
        ): "the model refused",
        "unknown-model": "HTTP 404 from ",
    }
    for model, message in cases.items():
        with pytest.raises(ProviderError) as caught:
            await provider.complete(model, "s", "u", SCHEMA, 5)
        assert str(caught.value).startswith(message), model
        assert "sk-secret-b" not in str(caught.value)
    closed = _openai(f"http://127.0.0.1:{free_port()}/v1", api_key_env="SB_TEST_KEY_B")
    with pytest.raises(ProviderError, match='^ConnectError from "http://127.0.0.1'):
        await closed.complete("m", "s", "u", SCHEMA, 5)


async def test_a_slow_answer_is_a_timeout(fake_ai: FakeAI) -> None:
    model = fake_ai.on("slow-provider", ANSWER, delay=2)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await _openai(fake_ai.base_url).complete(model, "s", "u", SCHEMA, 0.3)
    assert time.monotonic() - started < 1.5


async def test_a_missing_key_is_an_error_before_any_request(
    fake_ai: FakeAI, monkeypatch: Any
) -> None:
    monkeypatch.delenv("SB_TEST_KEY_UNSET", raising=False)
    model = fake_ai.on("keyless", ANSWER)
    with pytest.raises(ProviderError, match="environment variable SB_TEST_KEY_UNSET is not set"):
        await _openai(fake_ai.base_url, api_key_env="SB_TEST_KEY_UNSET").complete(
            model, "s", "u", SCHEMA, 5
        )
    assert fake_ai.requests(model) == []


async def test_the_static_provider_answers_from_its_config() -> None:
    static = StaticProvider(
        {
            "type": "static",
            "answers": {"a": ANSWER, "raw": "text"},
            "answer": {"queue": "b", "confidence": 1, "reason": ""},
        }
    )
    assert static.name == "static"
    assert json.loads(await static.complete("a", "s", "u", SCHEMA, 1)) == ANSWER
    assert await static.complete("raw", "s", "u", SCHEMA, 1) == "text"
    assert json.loads(await static.complete("other", "s", "u", SCHEMA, 1))["queue"] == "b"
    silent = StaticProvider({"type": "static", "name": "quiet", "answers": {"a": ANSWER}})
    with pytest.raises(ProviderError, match="has no answer for 'b'"):
        await silent.complete("b", "s", "u", SCHEMA, 1)
    slow = StaticProvider({"type": "static", "answer": ANSWER, "delay_ms": 200})
    assert await slow.complete("x", "s", "u", SCHEMA, 1)
    with pytest.raises(TimeoutError):
        await slow.complete("x", "s", "u", SCHEMA, 0.1)


def test_providers_come_from_the_operators_config(tmp_path: Any) -> None:
    path = tmp_path / "sb.toml"
    path.write_text(
        '[[plugins.llm.providers]]\ntype = "openai"\nname = "litellm"\n'
        'base_url = "http://127.0.0.1:4000/v1"\n'
        '[[plugins.llm.providers]]\ntype = "openai"\nname = "ollama"\n'
        'base_url = "http://127.0.0.1:11434/v1"\nresponse_format = "json_object"\n'
        '[[plugins.llm.providers]]\ntype = "static"\n'
    )
    rt = Runtime(load_config(path, env={}))
    assert rt.registries.llm_providers.names() == ["litellm", "ollama", "static"]
    assert {rt.registries.llm_providers.owner(n) for n in ("litellm", "static")} == {"llm"}
    for bad in (
        '[[plugins.llm.providers]]\ntype = "anthropic"\n',
        '[[plugins.llm.providers]]\ntype = "openai"\nbase_url = "ftp://x"\n',
        "[plugins.llm]\nmax_timeout_ms = 10\n",
        '[[plugins.llm.providers]]\ntype = "static"\n[[plugins.llm.providers]]\ntype = "static"\n',
    ):
        path.write_text(bad)
        with pytest.raises(Exception) as caught:
            Runtime(load_config(path, env={}))
        assert isinstance(caught.value, ConfigError) or "registered twice" in str(caught.value)


@pytest.mark.parametrize(
    ("toml", "told"),
    [
        (
            '[[plugins.llm.providers]]\ntype = "openai"\nname = "p1"\n',
            "plugins.llm.providers[0].base_url: is required",
        ),
        (
            '[[plugins.llm.providers]]\ntype = "static"\n'
            '[[plugins.llm.providers]]\ntype = "openai"\nbase_url = "http://x"\n'
            'max_tokens = "many"\n',
            'plugins.llm.providers[1].max_tokens: must be an integer (got "many")',
        ),
        (
            '[[plugins.llm.providers]]\ntype = "anthropic"\n',
            "plugins.llm.providers[0]: matches none of the allowed forms:"
            ' type must be "static"; or type must be "openai"',
        ),
    ],
)
def test_a_bad_provider_names_its_field(tmp_path: Path, toml: str, told: str) -> None:
    # The provider's oneOf is told by the branch its "type" picks, never as a Python dict.
    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as caught:
        Runtime(load_config(path, env={}))
    assert str(caught.value) == f"config file {path}: {told}"


#: How a refused URL is shown when it is not as written: a query or fragment may hold a key.
_SHOWN = {
    "http://example.com/v1?key=1": '"http://example.com/v1?…"',
    "http://example.com/v1#top": '"http://example.com/v1#…"',
}

_URL_FORM = (
    "must be an http:// or https:// URL with a host, a port from 1 to 65535 if any,"
    " and no query or fragment"
)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:99999/v1", "the port is not a number from 1 to 65535"),
        ("http://127.0.0.1:0/v1", "the port is not a number from 1 to 65535"),
        ("http://example.com:abc/v1", "the port is not a number from 1 to 65535"),
        ("http://exa mple.com/v1", "it has a space or a control character"),
        ("http://example.com:8000 /v1", "it has a space or a control character"),
        ("http://example.com\t/v1", "it has a space or a control character"),
        ("http://ex%20ample.com/v1", "the host has a character no host name has"),
        ("http:///v1", "it has no host"),
        ("http://:8000/v1", "it has no host"),
        ("ftp://example.com/v1", 'the scheme is "ftp"'),
        ("example.com/v1", "it has no scheme"),
        ("http://[::1/v1", "it is not a URL"),
        ("http://example.com/v1?key=1", "the path would end in its query or fragment"),
        ("http://example.com/v1#top", "the path would end in its query or fragment"),
    ],
)
def test_a_base_url_no_request_could_use_is_refused_at_start(
    tmp_path: Path, url: str, why: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[[plugins.llm.providers]]\ntype = "static"\n'
        f'[[plugins.llm.providers]]\ntype = "openai"\nbase_url = {json.dumps(url)}\n'
    )
    with pytest.raises(ConfigError) as caught:
        Runtime(load_config(path, env={}))
    told = str(caught.value)
    assert told.startswith(
        f"config file {path}: plugins.llm.providers[1].base_url: {_URL_FORM}"
        f" (got {_SHOWN.get(url, json.dumps(url))}: {why}"
    ), told
    assert "\n" not in told


@pytest.mark.parametrize(
    "url",
    ["http://me:hunter2@127.0.0.1:99999/v1", "http://me:hun@ter2@127.0.0.1:99999/v1"],
)
def test_credentials_in_a_refused_base_url_are_not_shown(tmp_path: Path, url: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'[[plugins.llm.providers]]\ntype = "openai"\nbase_url = "{url}"\n')
    with pytest.raises(ConfigError) as caught:
        Runtime(load_config(path, env={}))
    assert '(got "http://…@127.0.0.1:99999/v1": ' in str(caught.value)
    assert "ter2" not in str(caught.value) and "me:" not in str(caught.value)


def test_a_well_formed_base_url_starts_even_when_nothing_answers(tmp_path: Path) -> None:
    # An unreachable server is no config mistake: a model server may start later.
    urls = [
        f"http://127.0.0.1:{free_port()}/v1",
        "http://[::1]:8000/v1",
        "https://api.example.com/v1/",
        "HTTP://LOCALHOST",
        "http://my_host.internal:4000",
        "http://bücher.example/v1",
    ]
    path = tmp_path / "c.toml"
    path.write_text(
        "".join(
            f'[[plugins.llm.providers]]\ntype = "openai"\nname = "p{i}"\nbase_url = "{url}"\n'
            for i, url in enumerate(urls)
        )
    )
    rt = Runtime(load_config(path, env={}))
    assert rt.registries.llm_providers.names() == [f"p{i}" for i in range(len(urls))]


@pytest.mark.parametrize(
    ("toml", "told"),
    [
        (
            '[[plugins.llm.providers]]\ntype = "static"\n'
            '[[plugins.llm.providers]]\ntype = "static"\n',
            "plugins.llm.providers[1]: a second provider named 'static'"
            " (providers[0] has that name; one without a name is named after its type);"
            " give each a distinct name",
        ),
        (
            '[[plugins.llm.providers]]\ntype = "openai"\nname = "local"\n'
            'base_url = "http://127.0.0.1:11434/v1"\n'
            '[[plugins.llm.providers]]\ntype = "static"\n'
            '[[plugins.llm.providers]]\ntype = "static"\nname = "local"\n',
            "plugins.llm.providers[2].name: a second provider named 'local'"
            " (providers[0] has that name); give each a distinct name",
        ),
    ],
)
def test_two_providers_of_one_name_are_refused_naming_both(
    tmp_path: Path, toml: str, told: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as caught:
        Runtime(load_config(path, env={}))
    assert str(caught.value) == f"config file {path}: {told}"


@pytest.mark.parametrize("command", ["serve", "plugins"])
def test_the_command_exits_2_with_one_line(tmp_path: Path, command: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[[plugins.llm.providers]]\ntype = "openai"\nbase_url = "http://127.0.0.1:99999/v1"\n'
    )
    env = make_env(None, tmp_path / "data", SWITCHBOARD_CONFIG=str(path))
    proc = CLI(env).run(command, check=False)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"switchboard: error: config file {path}: plugins.llm.providers[0].base_url:"
        f' {_URL_FORM} (got "http://127.0.0.1:99999/v1": the port is not a number'
        " from 1 to 65535)"
    ]
    assert proc.stdout == "" and not (tmp_path / "data").exists()


async def test_a_request_that_never_left_says_so(fake_ai: FakeAI, monkeypatch: Any) -> None:
    # What the stage reads to give a prompt back: sent is False only when nothing was sent.
    monkeypatch.setenv("SB_TEST_KEY_C", "sk-c")
    monkeypatch.delenv("SB_TEST_KEY_UNSET", raising=False)
    closed = _openai(f"http://127.0.0.1:{free_port()}/v1")
    keyless = _openai(fake_ai.base_url, api_key_env="SB_TEST_KEY_UNSET")
    failing = _openai(fake_ai.base_url, api_key_env="SB_TEST_KEY_C")
    for provider, model, sent in (
        (closed, "m", False),
        (keyless, "m", False),
        (failing, fake_ai.on("sent-e500", status=500), True),
    ):
        with pytest.raises(ProviderError) as caught:
            await provider.complete(model, "s", "u", SCHEMA, 5)
        assert caught.value.sent is sent, model


def _completion(padding: int = 0) -> bytes:
    """A valid chat completion answering ANSWER, padded with ``padding`` spaces (still
    valid JSON: only its size is wrong)."""
    head = json.dumps({"choices": [{"message": {"content": json.dumps(ANSWER)}}]})
    return head[:-1].encode() + b" " * padding + b"}"


@pytest.fixture(scope="module")
def wire_ai() -> Iterator[FakeAI]:
    """The fake server, sending a raw body that starts ``@CODING:`` with that
    Content-Encoding, and one that starts ``@drip:`` a byte at a time (headers at once)."""
    fake = FakeAI()
    answers: Any = fake._server.RequestHandlerClass

    class Handler(answers):  # type: ignore[misc,valid-type]
        def _send(self, status: int, payload: bytes) -> None:
            if not payload.startswith(b"@"):
                super()._send(status, payload)
                return
            coding, _, body = payload[1:].partition(b":")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                if coding != b"drip":
                    self.send_header("Content-Encoding", coding.decode())
                self.end_headers()
                if coding != b"drip":
                    self.wfile.write(body)
                    return
                for i in range(len(body)):
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:
                pass  # the client gave up, as it should

    fake._server.RequestHandlerClass = Handler
    fake.start()
    yield fake
    fake.stop()


async def test_a_password_in_the_base_url_never_reaches_an_error(fake_ai: FakeAI) -> None:
    host = fake_ai.base_url.removeprefix("http://")
    provider = _openai(f"http://svc:pw-SECRET@{host}")
    model = fake_ai.on("e500-cred", status=500)
    with pytest.raises(ProviderError) as caught:
        await provider.complete(model, "s", "u", SCHEMA, 5)
    assert str(caught.value) == f'HTTP 500 from "http://…@{host}/chat/completions"'
    closed = _openai(f"http://svc:pw-SECRET@127.0.0.1:{free_port()}/v1")
    with pytest.raises(ProviderError) as caught:
        await closed.complete("m", "s", "u", SCHEMA, 5)
    assert str(caught.value).startswith('ConnectError from "http://…@127.0.0.1:')
    assert "SECRET" not in str(caught.value) and "svc" not in str(caught.value)


async def test_an_answer_past_the_limit_is_refused_unread(fake_ai: FakeAI, wire_ai: FakeAI) -> None:
    too_big = f"the answer is larger than {MAX_ANSWER_BYTES} bytes"
    bomb = gzip.compress(_completion(32 * MAX_ANSWER_BYTES))  # 32 KiB that inflate to 32 MiB
    cases = [
        (fake_ai, fake_ai.on("huge", raw_body=_completion(2 * MAX_ANSWER_BYTES)), too_big),
        (wire_ai, wire_ai.on("bomb", raw_body=b"@gzip:" + bomb), too_big),
        (
            wire_ai,
            wire_ai.on("brotli", raw_body=b"@br:" + _completion()),
            "the answer's content encoding 'br' is not one of gzip, x-gzip, deflate",
        ),
        (
            wire_ai,
            wire_ai.on("broken", raw_body=b"@gzip:" + b"not gzip at all"),
            "the answer's gzip encoding is broken",
        ),
    ]
    for fake, model, message in cases:
        with pytest.raises(ProviderError) as caught:
            await _openai(fake.base_url).complete(model, "s", "u", SCHEMA, 5)
        assert str(caught.value).startswith(message), model
    # What is held is the limit, not the answer: it is never inflated past it.
    tracemalloc.start()
    try:
        with pytest.raises(ProviderError, match=too_big):
            await _openai(wire_ai.base_url).complete("bomb", "s", "u", SCHEMA, 5)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * MAX_ANSWER_BYTES, peak
    # A compressed answer within the limit is read as any other.
    model = wire_ai.on("small", raw_body=b"@gzip:" + gzip.compress(_completion(1000)))
    assert json.loads(await _openai(wire_ai.base_url).complete(model, "s", "u", SCHEMA, 5)) == (
        ANSWER
    )


async def test_an_answer_dripped_a_byte_at_a_time_is_cut_at_the_timeout(wire_ai: FakeAI) -> None:
    # Each byte comes well within the timeout; the whole answer (about 5 s) does not.
    model = wire_ai.on("drip", raw_body=b"@drip:" + _completion())
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await _openai(wire_ai.base_url).complete(model, "s", "u", SCHEMA, 0.5)
    assert time.monotonic() - started < 1.5

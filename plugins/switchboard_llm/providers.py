"""The first-party LLM providers the operator lists in ``[plugins.llm] providers``.

``static`` answers from its config (tests, demos, a dry run of the whole path without a
model); ``openai`` speaks the chat-completions API any OpenAI-compatible server offers
(LiteLLM, vLLM, Ollama, llama.cpp's server, OpenAI itself). A third party's provider is a
plugin implementing ``switchboard_register_llm_providers`` with the same two members.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import zlib
from typing import TYPE_CHECKING, Any

from switchboard.plugin import Completion, LLMProvider, shown_url

from .settings import DEFAULT_PROVIDER_IN_FLIGHT

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("switchboard.llm")

#: The most a provider's answer may hold, decoded: a valid one is a chat completion around a
#: short JSON answer (kilobytes). Past it the answer is refused, not read, so a provider can
#: make the stage hold no more than this per call, however it pads or compresses.
MAX_ANSWER_BYTES = 1 << 20
#: The content codings an answer may come in, undone here a bounded piece at a time (httpx's
#: own decoders inflate each piece the network gives whole: a 64 KiB gzip read is 64 MiB).
#: Auto-detected gzip or zlib header: some servers label one as the other.
_CODINGS = {
    "gzip": zlib.MAX_WBITS | 32,
    "x-gzip": zlib.MAX_WBITS | 32,
    "deflate": zlib.MAX_WBITS | 32,
}


class ProviderError(Exception):
    """A transport or server failure, with a message fit for the routing trace.

    ``sent`` is False when the request never left (no connection, no key): nothing reached
    the model, so the stage gives the call's prompt back to the budget. A third party's
    provider may set the same attribute on what it raises.
    """

    def __init__(self, message: str, *, sent: bool = True) -> None:
        super().__init__(message)
        self.sent = sent


class ConnectTimeout(TimeoutError):
    """No connection within the timeout: a timeout whose request never left."""

    sent = False


class StaticProvider:
    """Answers from config: ``answers[model]``, else ``answer``; no answer is an error."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.name: str = spec.get("name") or "static"
        self.answers: dict[str, Any] = dict(spec.get("answers") or {})
        self.answer: Any = spec.get("answer")
        self.delay = int(spec.get("delay_ms", 0)) / 1000
        self.max_in_flight = int(spec.get("max_in_flight", DEFAULT_PROVIDER_IN_FLIGHT))

    async def complete(
        self, model: str, system: str, prompt: str, schema: dict[str, Any], timeout: float
    ) -> str:
        answer = self.answers.get(model, self.answer)
        if answer is None:
            raise ProviderError(f"static provider {self.name!r} has no answer for {model!r}")
        if self.delay:
            if self.delay >= timeout:
                await asyncio.sleep(timeout)
                raise TimeoutError
            await asyncio.sleep(self.delay)
        return answer if isinstance(answer, str) else json.dumps(answer)


class OpenAIProvider:
    """``POST {base_url}/chat/completions`` with the answer's JSON Schema as the response
    format; the API key, when any, comes from the environment variable ``api_key_env``."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.name: str = spec.get("name") or "openai"
        self.url = str(spec["base_url"]).rstrip("/") + "/chat/completions"
        #: The URL as messages show it (a trace is read more widely than the config).
        self.shown_url = shown_url(self.url)
        self.api_key_env: str | None = spec.get("api_key_env")
        self.response_format: str = spec.get("response_format", "json_schema")
        self.max_tokens = int(spec.get("max_tokens", 512))
        self.temperature = float(spec.get("temperature", 0))
        self.max_in_flight = int(spec.get("max_in_flight", DEFAULT_PROVIDER_IN_FLIGHT))
        if self.api_key_env and not os.environ.get(self.api_key_env):
            log.warning(
                "LLM provider %r: environment variable %s is not set", self.name, self.api_key_env
            )

    def _headers(self) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Accept-Encoding": ", ".join(_CODINGS),
        }
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise ProviderError(
                    f"environment variable {self.api_key_env} is not set", sent=False
                )
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def request_body(
        self, model: str, system: str, prompt: str, schema: dict[str, Any]
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": prompt},
            ],
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "stream": False,
        }
        if self.response_format == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "triage_answer", "strict": True, "schema": schema},
            }
        elif self.response_format == "json_object":
            body["response_format"] = {"type": "json_object"}
        return body

    async def complete(
        self, model: str, system: str, prompt: str, schema: dict[str, Any], timeout: float
    ) -> str:
        import httpx  # here, not at the top: every CLI command loads this plugin

        body = self.request_body(model, system, prompt, schema)
        headers = self._headers()
        try:
            # httpx's timeout bounds each step (connect, each read), not the sum: a body
            # dripped a byte at a time would hold the call for ever without this one.
            async with asyncio.timeout(timeout):
                # A client per call: a provider serves every worker's event loop, and at
                # triage volume a connection's setup is nothing next to the model's latency.
                async with httpx.AsyncClient(timeout=timeout) as client:
                    async with client.stream("POST", self.url, json=body, headers=headers) as resp:
                        if resp.status_code != 200:
                            raise ProviderError(f"HTTP {resp.status_code} from {self.shown_url}")
                        raw = await _read_capped(resp)
        except httpx.ConnectTimeout:
            raise ConnectTimeout from None
        except httpx.TimeoutException:
            raise TimeoutError from None
        except httpx.HTTPError as exc:
            # A failed connect (refused, a name that does not resolve) sent nothing.
            sent = not isinstance(exc, httpx.ConnectError)
            raise ProviderError(f"{type(exc).__name__} from {self.shown_url}", sent=sent) from None
        try:
            doc = json.loads(raw)
            message = doc["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError, RecursionError):
            raise ProviderError("the response is not a chat completion") from None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            refusal = message.get("refusal") if isinstance(message, dict) else None
            raise ProviderError("the model refused" if refusal else "the completion has no text")
        return Completion(content, _usage(doc.get("usage")))


async def _read_capped(resp: httpx.Response) -> bytes:
    """The answer's body, its content coding undone, refused past :data:`MAX_ANSWER_BYTES`
    (on the wire or decoded) before any more of it is read or inflated."""
    too_big = ProviderError(
        f"the answer is larger than {MAX_ANSWER_BYTES} bytes, the most a provider's answer may be"
    )
    coding = resp.headers.get("content-encoding", "").strip().lower()
    inflater = None
    if coding not in ("", "identity"):
        if coding not in _CODINGS:
            raise ProviderError(
                f"the answer's content encoding {coding[:40]!r} is not one of"
                f" {', '.join(_CODINGS)} (the ones asked for)"
            )
        inflater = zlib.decompressobj(_CODINGS[coding])
    out = bytearray()
    wire = 0
    async for piece in resp.aiter_raw():
        wire += len(piece)
        if wire > MAX_ANSWER_BYTES:
            raise too_big
        if inflater is None:
            out += piece
        else:
            try:
                # At most one byte past the cap is ever inflated (0 would mean no limit,
                # which the check below never lets it reach).
                while piece and len(out) <= MAX_ANSWER_BYTES:
                    out += inflater.decompress(piece, MAX_ANSWER_BYTES + 1 - len(out))
                    piece = inflater.unconsumed_tail
            except zlib.error:
                raise ProviderError(f"the answer's {coding} encoding is broken") from None
        if len(out) > MAX_ANSWER_BYTES:
            raise too_big
    return bytes(out)


def _usage(doc: Any) -> dict[str, int] | None:
    """The completion's ``usage`` token counts, when it reports them as integers."""
    if not isinstance(doc, dict):
        return None
    counts = {k: doc.get(k) for k in ("prompt_tokens", "completion_tokens")}
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts.values()):
        return None
    return {k: int(v) for k, v in counts.items() if v is not None}


def build_provider(spec: dict[str, Any]) -> LLMProvider:
    """The provider one ``[[plugins.llm.providers]]`` entry describes (already validated)."""
    if spec["type"] == "static":
        return StaticProvider(spec)
    return OpenAIProvider(spec)

"""The schemas of LLM triage: the operator's ``[plugins.llm]``, an endpoint's ``llm_triage``
and the model's answer. The only place their defaults and ceilings are written."""

from __future__ import annotations

import copy
from typing import Any

from jsonschema import Draft202012Validator

from switchboard.plugin import (
    HTTP_URL_FORM,
    ConfigError,
    InvalidArgument,
    first_schema_problem,
    http_url_problem,
    shown_url,
)

_NAME = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"}
#: Model calls at once to one provider, across every serve on the database (deferred mode).
DEFAULT_PROVIDER_IN_FLIGHT = 8
_PROVIDER_IN_FLIGHT = {
    "type": "integer",
    "minimum": 1,
    "maximum": 4096,
    "default": DEFAULT_PROVIDER_IN_FLIGHT,
    "description": "model calls at once to this provider across every serve process on"
    " the database (deferred mode; counted in PostgreSQL); the excess stays pending",
}
#: An answer a static provider gives: the JSON object (serialized) or raw text as is.
_STATIC_ANSWER = {"type": ["object", "string"]}

STATIC_PROVIDER: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["type"],
    "properties": {
        "type": {"const": "static"},
        "name": {**_NAME, "description": "the provider's name (default: static)"},
        "answers": {
            "type": "object",
            "additionalProperties": _STATIC_ANSWER,
            "description": "model name -> the answer that model gives",
        },
        "answer": {**_STATIC_ANSWER, "description": "the answer of any other model"},
        "delay_ms": {
            "type": "integer",
            "minimum": 0,
            "maximum": 600000,
            "description": "answer after this long (to demonstrate timeouts)",
        },
        "max_in_flight": _PROVIDER_IN_FLIGHT,
    },
}

OPENAI_PROVIDER: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["type", "base_url"],
    "properties": {
        "type": {"const": "openai"},
        "name": {**_NAME, "description": "the provider's name (default: openai)"},
        "base_url": {
            "type": "string",
            # What a request can be sent to is checked by check_providers, naming the fault.
            "description": "the API root (http or https, a host, a port from 1 to 65535 if"
            " any, no query or fragment); POST {base_url}/chat/completions",
        },
        "api_key_env": {
            "type": "string",
            "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
            "description": "the environment variable holding the API key",
        },
        "response_format": {
            "enum": ["json_schema", "json_object", "none"],
            "description": "how structured output is requested (default json_schema)",
        },
        "max_tokens": {"type": "integer", "minimum": 16, "maximum": 32768},
        "max_in_flight": _PROVIDER_IN_FLIGHT,
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    },
}

#: ``[plugins.llm]``: the providers the operator offers and the ceilings on every endpoint.
CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "providers": {
            "type": "array",
            "items": {"oneOf": [STATIC_PROVIDER, OPENAI_PROVIDER]},
            "default": [],
        },
        "max_prompt_budget_per_minute": {
            "type": "integer",
            "minimum": 1,
            "maximum": 100000,
            "default": 60,
        },
        "max_prompt_budget_per_day": {
            "type": "integer",
            "minimum": 1,
            "maximum": 10000000,
            "default": 5000,
        },
        "max_timeout_ms": {"type": "integer", "minimum": 100, "maximum": 120000, "default": 15000},
        "mode": {
            "enum": ["deferred", "inline"],
            "default": "deferred",
            "description": "deferred: the producer gets its 202 at once and the triage worker"
            " of every serve asks the model; inline: the model is asked inside the"
            " producer's request (which waits for it)",
        },
        "max_in_flight": {
            "type": "integer",
            "minimum": 1,
            "maximum": 256,
            "default": 4,
            "description": "model calls at once per serve process (deferred mode)",
        },
        "max_attempts": {
            "type": "integer",
            "minimum": 1,
            "maximum": 20,
            "default": 3,
            "description": "claims of a pending event before it takes the default (llm_error)",
        },
        "allow_include_payload": {"type": "boolean", "default": True},
        "max_payload_bytes": {
            "type": "integer",
            "minimum": 0,
            "maximum": 1048576,
            "default": 16384,
        },
    },
}

#: An endpoint's ``llm_triage`` (opt-in; absent means no triage).
TRIAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["provider", "model", "queues"],
    "properties": {
        "provider": {"type": "string", "minLength": 1, "maxLength": 64},
        "model": {"type": "string", "minLength": 1, "maxLength": 256},
        "queues": {
            "type": "array",
            "minItems": 1,
            "maxItems": 32,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "description"],
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": 64},
                    "description": {"type": "string", "minLength": 1, "maxLength": 1000},
                },
            },
        },
        "min_confidence": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.7},
        "prompt_budget_per_minute": {"type": "integer", "minimum": 1, "default": 10},
        "prompt_budget_per_day": {"type": "integer", "minimum": 1, "default": 500},
        "token_budget_per_minute": {"type": "integer", "minimum": 1},
        "on_budget": {"enum": ["default", "wait"], "default": "default"},
        "token_budget_per_day": {"type": "integer", "minimum": 1},
        "include_payload": {"type": "boolean", "default": False},
        "timeout_ms": {"type": "integer", "minimum": 100, "default": 5000},
    },
}

TRIAGE_DEFAULTS: dict[str, Any] = {
    k: v["default"] for k, v in TRIAGE_SCHEMA["properties"].items() if "default" in v
}

#: What the model must answer, checked strictly (the queue is checked against the
#: offered, granted queues afterwards: an unknown queue is its own fallback cause).
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["queue", "confidence", "reason"],
    "properties": {
        "queue": {"type": "string"},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "reason": {"type": "string"},
    },
}

_TRIAGE = Draft202012Validator(TRIAGE_SCHEMA)
ANSWER = Draft202012Validator(ANSWER_SCHEMA)


def answer_schema(queues: list[str]) -> dict[str, Any]:
    """The schema handed to the provider: the answer, its queue one of ``queues``."""
    schema = copy.deepcopy(ANSWER_SCHEMA)
    schema["properties"]["queue"]["enum"] = list(queues)
    return schema


def check_triage(
    doc: Any, settings: dict[str, Any], granted: list[str], providers: list[str]
) -> dict[str, Any]:
    """``doc`` validated (schema, operator ceilings, providers, grant), defaults filled.

    Raises :class:`InvalidArgument` naming the first offending key.
    """
    problem = first_schema_problem(_TRIAGE.iter_errors(doc))
    if problem is not None:
        raise InvalidArgument(f"{problem.where('llm_triage')}: {problem.problem}")
    out: dict[str, Any] = {**copy.deepcopy(TRIAGE_DEFAULTS), **copy.deepcopy(doc)}
    if out["provider"] not in providers:
        offered = ", ".join(providers) or "none: the operator has configured no provider"
        raise InvalidArgument(
            f"llm_triage.provider: unknown provider {out['provider']!r} (offered: {offered})"
        )
    ceilings = (
        ("prompt_budget_per_minute", "max_prompt_budget_per_minute"),
        ("prompt_budget_per_day", "max_prompt_budget_per_day"),
        ("timeout_ms", "max_timeout_ms"),
    )
    for key, ceiling in ceilings:
        if out[key] > settings[ceiling]:
            raise InvalidArgument(
                f"llm_triage.{key}: at most {settings[ceiling]} (the operator's {ceiling})"
            )
    if out["include_payload"] and not settings["allow_include_payload"]:
        raise InvalidArgument(
            "llm_triage.include_payload: the operator does not allow payloads in prompts"
        )
    seen: set[str] = set()
    for i, queue in enumerate(out["queues"]):
        name = queue["name"]
        if name in seen:
            raise InvalidArgument(f"llm_triage.queues[{i}].name: {name!r} is listed twice")
        seen.add(name)
        if name not in granted:
            raise InvalidArgument(
                f"llm_triage.queues[{i}].name: {name!r} is not a queue this endpoint's "
                f"webhooks may route to (granted: {', '.join(granted) or 'none'}): its"
                " webhook queues (`switchboard endpoint vend --webhook-queues`) and the queues"
                " its human's other endpoints drain (`switchboard endpoint vend --queues`)",
                code="not_granted",
            )
    return out


_SECTION = "[plugins.llm]"


def check_providers(specs: list[dict[str, Any]]) -> None:
    """``[plugins.llm] providers`` (schema-valid already) as the providers will use them:
    each name once, and each ``base_url`` a URL a request can be sent to.

    Raises :class:`ConfigError` naming the entry, at start: a URL the provider could never
    send to would otherwise fail every delivery it triages (one well formed but not
    answering is no config mistake: a model server may start later).
    """
    first: dict[str, int] = {}
    for i, spec in enumerate(specs):
        name = spec.get("name") or spec["type"]
        if name in first:
            where, unnamed = f"providers[{i}].name", ""
            if not spec.get("name"):
                where, unnamed = f"providers[{i}]", "; one without a name is named after its type"
            raise ConfigError(
                f"invalid config: {_SECTION} {where}: a second provider named {name!r}"
                f" (providers[{first[name]}] has that name{unnamed}); give each a distinct name"
            )
        first[name] = i
        if "base_url" in spec:
            problem = base_url_problem(str(spec["base_url"]))
            if problem is not None:
                raise ConfigError(
                    f"invalid config: {_SECTION} providers[{i}].base_url: {HTTP_URL_FORM}"
                    f" (got {shown_url(str(spec['base_url']))}: {problem})"
                )


def base_url_problem(url: str) -> str | None:
    """Why no request could be sent to ``url`` + ``/chat/completions``, or None."""
    return http_url_problem(url, appended="/chat/completions")

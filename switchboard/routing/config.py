"""Save-time validation of a webhook's routing configuration: structure, actions, params, grant.

The host checks everything any stage relies on; each enabled stage then checks its own
part through :class:`switchboard.contract.ValidatingStage` (the rules stage
compiles every expression in its sandbox). Dry runs validate the same way.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from switchboard.contract.schemaerrors import SchemaProblem, first_schema_problem
from switchboard.errors import RuleValidationError, clip
from switchboard.pgtext import unstorable
from switchboard.routing.decide import resolve
from switchboard.routing.envelope import deeper_than
from switchboard.routing.model import ON_FAULT, Grant, RoutingConfig, ValidatingStage
from switchboard.routing.trace import validator

MAX_RULES = 32
#: The deepest a routing configuration nests (its rules, actions and params need ~5).
MAX_CONFIG_DEPTH = 64
#: A storage bound on any stage's expression text; stages may refuse more.
MAX_EXPR_BYTES = 4096
MAX_NAME_BYTES = 128
MAX_ENDPOINTS = 16
MAX_PARAMS_BYTES = 16 * 1024
#: Where a webhook's granted queues come from (see ``routing.route.grant_for``).
_QUEUE_HINT = (
    "a webhook may route to its target queue, its owner endpoint's webhook queues"
    " (`switchboard endpoint vend --webhook-queues`) and the queues its human's other"
    " endpoints drain (`switchboard endpoint vend --queues`)"
)
_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# One message whatever the endpoint (no existence oracle), naming what makes it a target.
_NOT_TARGET = (
    "endpoint is not a delivery target of this webhook: route the webhook to it first"
    " (`switchboard webhook route add` or the MCP tool add_webhook_route; another human's"
    " endpoint also needs `switchboard friend add OWNER OTHER`)"
)

__all__ = [
    "ACTION_FLAGS",
    "MAX_EXPR_BYTES",
    "MAX_RULES",
    "RuleValidationError",
    "check_structure",
    "mint_rule_id",
    "rule_error",
    "validate_config",
]


def mint_rule_id(rule: Mapping[str, Any], taken: set[str]) -> str:
    """An id for a rule given without one: ``rule_`` and 24 hex characters, derived from the
    rule's content and the ids already taken, so that validating the same config twice (a
    diff, then the save it gates) mints the same ids and the candidate's hash is the save's.
    Two identical rules get different ids (the first free one of a counted sequence)."""
    content = json.dumps(
        [rule.get("name"), rule.get("expr"), rule.get("action")],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=repr,  # an invalid action is refused later, naming its field
    )
    for n in itertools.count():
        # surrogatepass: a name or expr holding a lone surrogate is refused after the id
        # is minted, naming its field, not by an encoding error here
        digest = hashlib.sha256(f"{n}:{content}".encode("utf-8", "surrogatepass")).hexdigest()[:24]
        if "rule_" + digest not in taken:
            return "rule_" + digest
    raise AssertionError("unreachable")  # pragma: no cover - itertools.count never ends


class _Where:
    def __init__(self, index: int | None, rule_id: str | None, name: str | None) -> None:
        self.index, self.rule_id, self.name = index, rule_id, name

    def label(self) -> str:
        if self.index is None:
            return "default_action"
        parts = [
            f"id {clip(self.rule_id)}" if self.rule_id else None,
            f"name {clip(self.name)}" if self.name else None,
        ]
        inner = ", ".join(p for p in parts if p)
        return f"rule {self.index} ({inner})" if inner else f"rule {self.index}"

    def fail(self, code: str, problem: str) -> RuleValidationError:
        return RuleValidationError(
            code, f"{self.label()}: {problem}", index=self.index, rule_id=self.rule_id,
            rule_name=self.name,
        )  # fmt: skip


#: Flags a queue action may set (ADR-0025). A drop refuses them: it delivers nothing, so a
#: flag there could only mislead whoever reads the rule.
ACTION_FLAGS = ("exclusive", "once", "work_order")


def rule_error(index: int, rule: dict[str, Any], code: str, problem: str) -> RuleValidationError:
    """The error a stage raises about rule ``index`` of a normalized config."""
    return _Where(index, rule.get("id"), rule.get("name")).fail(code, problem)


def _check_action(action: Any, where: _Where, grant: Grant | None) -> dict[str, Any]:
    if not isinstance(action, dict):
        raise where.fail("invalid_rule", "action must be an object")
    if ("queue" in action) == ("drop" in action):
        raise where.fail("invalid_rule", "action must have exactly one of queue or drop")
    if "drop" in action:
        flags = [flag for flag in ACTION_FLAGS if flag in action]
        if flags:
            raise where.fail(
                "invalid_rule",
                f"a drop action cannot set {flags[0]!r}"
                " (exclusive, once and work_order apply to queue actions)",
            )
        if "endpoints" in action:
            raise where.fail("invalid_rule", "a drop action cannot list endpoints")
        if action["drop"] is not True:
            raise where.fail("invalid_rule", "drop must be true")
    endpoints = action.get("endpoints")
    if endpoints is not None:
        if not isinstance(endpoints, list) or not all(isinstance(e, str) for e in endpoints):
            raise where.fail("invalid_rule", "endpoints must be a list of endpoint ids")
        if len(endpoints) > MAX_ENDPOINTS:
            raise where.fail("invalid_rule", f"at most {MAX_ENDPOINTS} endpoints per action")
        if len(set(endpoints)) != len(endpoints):
            raise where.fail("invalid_rule", "endpoints must not repeat")
    problem = first_schema_problem(validator("action").iter_errors(action))
    if problem is not None:
        raise where.fail("invalid_rule", _action_message(problem))
    if grant is not None and "queue" in action:
        queue = action["queue"]
        if queue != grant.target_queue and queue not in grant.queues:
            raise where.fail(
                "not_granted",
                f"queue {clip(repr(queue))} is not granted to this webhook"
                f" ({', '.join(grant.queues)}): {_QUEUE_HINT}",
            )
        targets = set(grant.endpoint_ids)
        if endpoints is not None and any(e not in targets for e in endpoints):
            raise where.fail("not_granted", _NOT_TARGET)  # one message: no existence oracle
        if action.get("exclusive") is True and resolve(action, grant) is None:
            # Exclusive delivery needs a target that drains the queue: a pack names queues,
            # never endpoints, so a missing lane endpoint must fail the save, not the work.
            raise where.fail(
                "not_granted",
                f"exclusive: no delivery target drains queue"
                f" {queue!r}; route the webhook to an endpoint vended with"
                f" `--queues {queue}` first",
            )
    return dict(action)


def _action_message(problem: SchemaProblem) -> str:
    if problem.unknown:
        return f"invalid action: unknown field {str(problem.path[-1])!r}"
    return f"{problem.where('action')} {problem.problem}"


def _check_params(params: Any) -> dict[str, Any]:
    def fail(problem: str) -> RuleValidationError:
        return RuleValidationError("invalid_params", f"params: {problem}")

    if params is None:
        return {}
    if not isinstance(params, dict):
        raise fail("must be an object")
    try:
        size = len(json.dumps(params, separators=(",", ":"), allow_nan=False).encode())
    except (TypeError, ValueError) as exc:
        raise fail(f"not serializable as JSON ({clip(exc)})") from None
    if size > MAX_PARAMS_BYTES:
        raise fail(f"over {MAX_PARAMS_BYTES} bytes serialized")
    problem = unstorable(params, "params")
    if problem is not None:
        raise fail(problem)
    for key, value in params.items():
        if not _scalar(value) and not _homogeneous_list(value):
            raise fail(
                f"{clip(repr(key))} must be a string, number, boolean or a list of only strings "
                "or only numbers"
            )
    return dict(params)


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool)


def _homogeneous_list(value: Any) -> bool:
    if not isinstance(value, list):
        return False
    if all(isinstance(v, str) for v in value):
        return True
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "a list" if isinstance(value, list) else "an object"


def _check_rule(
    rule: Any, index: int, grant: Grant | None, seen: set[str], given: set[str]
) -> dict[str, Any]:
    if not isinstance(rule, dict):
        raise _Where(index, None, None).fail("invalid_rule", "a rule must be an object")
    rid = rule.get("id")
    name = rule.get("name")
    # a name PostgreSQL cannot store is refused below, and not echoed in the meantime
    named = name if isinstance(name, str) and unstorable(name, "name") is None else None
    where = _Where(index, rid if isinstance(rid, str) else None, named)
    unknown = sorted(set(rule) - {"id", "name", "expr", "action"})
    if unknown:
        raise where.fail("invalid_rule", f"unknown field {unknown[0]!r}")
    if rid is None:
        rid = mint_rule_id(rule, seen | given)
        where.rule_id = rid
    elif not isinstance(rid, str) or not _ID_RE.match(rid):
        raise where.fail("invalid_rule", "id must be 1-64 characters of A-Z, a-z, 0-9, _ or -")
    if rid in seen:
        raise where.fail("invalid_rule", f"duplicate rule id {rid!r}")
    seen.add(rid)
    if name is not None and not isinstance(name, str):
        raise where.fail("invalid_rule", "name must be a string")
    if name is not None and name != named:
        raise where.fail("invalid_rule", f"name {unstorable(name, 'name')}")
    if name is not None and len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise where.fail("invalid_rule", f"name is over {MAX_NAME_BYTES} bytes")
    if "expr" not in rule:
        raise where.fail("invalid_expression", "expr is missing")
    expr = rule["expr"]
    if not isinstance(expr, str):
        raise where.fail("invalid_expression", f"expr must be a string (got {_kind(expr)})")
    if not expr.strip():
        raise where.fail("invalid_expression", "expr is empty")
    problem = unstorable(expr, "expr")
    if problem is not None:
        raise where.fail("invalid_expression", f"expr {problem}")
    if len(expr.encode("utf-8")) > MAX_EXPR_BYTES:
        raise where.fail("invalid_expression", f"expression is over {MAX_EXPR_BYTES} bytes")
    if "action" not in rule:
        raise where.fail("invalid_rule", "action is required")
    action = _check_action(rule["action"], where, grant)
    out: dict[str, Any] = {"id": rid, "expr": expr, "action": action}
    if name is not None:
        out["name"] = name
    return out


def check_structure(config: Any, grant: Grant | None) -> RoutingConfig:
    """Validate everything but what a stage owns; return the normalized config (ids minted).

    ``grant`` None skips the grant checks (queues and endpoints).
    """
    if isinstance(config, RoutingConfig):
        config = config.to_json()
    if not isinstance(config, dict):
        raise RuleValidationError("invalid_rule", "routing configuration must be an object")
    if deeper_than(config, MAX_CONFIG_DEPTH):
        # before anything walks it: a value parsed by a Python whose JSON parser nests
        # deeper than the checks below may recurse (an id minted from a rule's JSON)
        raise RuleValidationError(
            "invalid_rule",
            f"routing configuration: nested deeper than {MAX_CONFIG_DEPTH} levels",
        )
    unknown = sorted(set(config) - {"rules", "default_action", "params", *POLICY_FIELDS})
    if unknown:
        raise RuleValidationError("invalid_rule", f"unknown field {unknown[0]!r}")
    rules = config.get("rules")
    if rules is None:
        rules = []
    if not isinstance(rules, list):
        raise RuleValidationError("invalid_rule", "rules must be a list")
    if len(rules) > MAX_RULES:
        raise RuleValidationError("too_many_rules", f"at most {MAX_RULES} rules (got {len(rules)})")
    seen: set[str] = set()
    # a minted id never takes an id given further down the list
    given = {r["id"] for r in rules if isinstance(r, dict) and isinstance(r.get("id"), str)}
    normalized = [_check_rule(rule, i, grant, seen, given) for i, rule in enumerate(rules)]
    default = config.get("default_action")
    if default is not None:
        default = _check_action(default, _Where(None, None, None), grant)
    params = _check_params(config.get("params"))
    on_fault = config.get("on_fault")
    if on_fault is None:
        on_fault = "default"
    if on_fault not in ON_FAULT:
        raise RuleValidationError(
            "invalid_rule", f"on_fault: one of {', '.join(ON_FAULT)} (got {clip(repr(on_fault))})"
        )
    return RoutingConfig(
        rules=tuple(normalized),
        default_action=default,
        params=params,
        on_fault=on_fault,
        lanes=_check_lanes(config.get("lanes"), grant),
        events_days=_check_events_days(config.get("events_days")),
    )


#: The fields of a routing config beside its rules, default action and params.
POLICY_FIELDS = ("on_fault", "lanes", "events_days")
#: The longest a webhook may keep its events: a hundred years (as ``[retention]``).
MAX_EVENTS_DAYS = 36500


def _check_events_days(days: Any) -> int | None:
    """``events_days``: 1..MAX_EVENTS_DAYS days; 0 or null inherit ``[retention] events_days``."""
    if days is None or (type(days) is int and days == 0):
        return None
    if not isinstance(days, int) or isinstance(days, bool) or not 1 <= days <= MAX_EVENTS_DAYS:
        raise RuleValidationError(
            "invalid_rule",
            f"events_days: an integer of days, 1 to {MAX_EVENTS_DAYS} (0 or null: the"
            f" server's [retention] events_days) (got {clip(repr(days))})",
        )
    return days


#: The longest a once claim's TTL may be: a year.
MAX_ONCE_TTL_S = 365 * 86400


def _check_lanes(lanes: Any, grant: Grant | None) -> dict[str, dict[str, Any]]:
    """``lanes``: per granted queue, ``{"once_ttl_s": 1..MAX_ONCE_TTL_S}``."""
    if lanes is None:
        return {}
    if not isinstance(lanes, dict):
        raise RuleValidationError("invalid_rule", "lanes must be an object of queue names")
    out: dict[str, dict[str, Any]] = {}
    for queue, lane in lanes.items():
        where = f"lanes.{clip(queue)}"
        if grant is not None and queue not in {grant.target_queue, *grant.queues}:
            raise RuleValidationError(
                "not_granted", f"{where}: queue {clip(repr(queue))} is not granted to this webhook"
            )
        if not isinstance(lane, dict):
            raise RuleValidationError("invalid_rule", f"{where} must be an object")
        unknown = sorted(set(lane) - {"once_ttl_s"})
        if unknown:
            raise RuleValidationError("invalid_rule", f"{where}: unknown field {unknown[0]!r}")
        ttl = lane.get("once_ttl_s")
        if ttl is not None and (
            not isinstance(ttl, int) or isinstance(ttl, bool) or not 1 <= ttl <= MAX_ONCE_TTL_S
        ):
            raise RuleValidationError(
                "invalid_rule",
                f"{where}.once_ttl_s: an integer of seconds, 1 to {MAX_ONCE_TTL_S}"
                f" (got {clip(repr(ttl))})",
            )
        if lane:
            out[str(queue)] = dict(lane)
    return out


def _takes_webhook(method: Any) -> bool:
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
    return "webhook" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


async def validate_config(
    config: Any,
    grant: Grant | None,
    stages: Iterable[object],
    webhook: Mapping[str, Any] | None = None,
) -> RoutingConfig:
    """``check_structure``, then every enabled stage's own ``validate`` (in stage order).

    ``webhook`` (the row the config is for) reaches the stages whose ``validate`` takes it.
    """
    normalized = check_structure(config, grant)
    for stage in stages:
        if isinstance(stage, ValidatingStage):
            if _takes_webhook(stage.validate):
                await stage.validate(normalized, webhook=dict(webhook or {}))  # type: ignore[call-arg]
            else:
                await stage.validate(normalized)
    return normalized

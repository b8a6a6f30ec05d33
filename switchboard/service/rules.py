"""The seven rule verbs: list, set, add, update, move, remove and the dry-run test; every
save is a version (:mod:`.versions`)."""

from __future__ import annotations

from typing import Any, Callable

from ..errors import Conflict, InvalidArgument, NotFound
from ..routing.config import validate_config
from ..routing.dryrun import dry_run
from ..routing.model import Grant, RoutingConfig
from ..routing.replay import raw_body, sample_envelope, stored_envelope
from ..routing.route import config_of, grant_for
from ..runtime import Runtime
from ..store import Row
from . import once, versions
from .common import clip
from .webhooks import owned_webhook, reach_warnings

#: The mutable form a verb edits: ``RoutingConfig.to_json()``.
Config = dict[str, Any]

#: ``test_rules(llm=...)``: whether a dry run runs the ``llm`` triage stage.
LLM_CHOICES = ("skip", "run")


async def _grant(rt: Runtime, webhook_id: str) -> Grant:
    resolved = await rt.store.resolve_webhook_by_id(webhook_id)
    if resolved is None:
        raise NotFound(f"webhook {clip(webhook_id)} not found")
    return grant_for(resolved)


async def _view(
    rt: Runtime, webhook_id: str, config: RoutingConfig, grant: Grant, version: int
) -> dict[str, Any]:
    """The config, its version and hash, the grant it was validated against, and
    ``warnings``: its routes that would put todos in a queue a target does not drain
    (saved anyway: the grant allows it)."""
    doc = config.to_json()
    return {
        "webhook_id": webhook_id,
        **doc,
        "version": version,
        "config_hash": versions.config_hash(doc),
        "grant": grant.to_json(),
        "warnings": await reach_warnings(rt, config, grant),
    }


async def list_rules(rt: Runtime, caller: Row | None, webhook_id: str) -> dict[str, Any]:
    row = await owned_webhook(rt, caller, webhook_id)
    version = int(row["routing_version"])  # read with the rules (store.webhooks)
    return await _view(rt, row["id"], config_of(row), await _grant(rt, row["id"]), version)


def expected_version(value: Any) -> int | None:
    """A caller's ``expect_version`` (None: not given), checked."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument("expect_version: must be a version number (0: never saved)")
    return value


async def _gate(
    rt: Runtime, webhook_id: str, candidate_hash: str, diffed: Any, *, required: bool
) -> None:
    """``diffed`` names the candidate the caller diffed: checked whenever it is given (a
    guard the caller passed is never ignored); ``required`` (a save that changes routing),
    ``[routing] require_diff`` asks for a recent diff of this very candidate over enough
    stored deliveries."""
    if diffed is not None and diffed != candidate_hash:
        raise InvalidArgument(
            f"diffed: {clip(repr(diffed))} is not this candidate's hash ({candidate_hash}); "
            "run diff_webhook_rules on the config you save",
            code="diff_mismatch",
        )
    section = rt.config.section("routing")
    if not required or not section.get("require_diff"):
        return
    wanted = int(section.get("min_diff_events") or 1)
    ttl = float(section.get("diff_ttl_seconds") or 3600)
    stored = await rt.store.history_count(webhook_id, limit=wanted)
    needed = min(wanted, stored)
    diff = await rt.store.last_diff(webhook_id, candidate_hash)
    if versions.fresh(diff, ttl) and diff is not None and int(diff["evaluated"]) >= needed:
        return
    raise Conflict(
        "[routing] require_diff: run diff_webhook_rules (CLI: switchboard rules diff) with "
        f"this candidate over at least {needed} stored deliveries first (candidate_hash "
        f"{candidate_hash}; a diff counts for {int(ttl)} s)",
        code="diff_required",
        candidate_hash=candidate_hash,
    )


async def save_config(
    rt: Runtime,
    caller: Row | None,
    webhook_id: str,
    change: Callable[[Config], Config],
    *,
    expect_version: Any = None,
    diffed: Any = None,
    note: Any = None,
    gated: bool = True,
) -> dict[str, Any]:
    """Read-modify-validate-write under the webhook's row lock: no edit is ever lost, and
    each save is a new version. ``expect_version`` refuses with ``conflict`` when the
    current version is another (someone saved meanwhile); ``gated`` False (a rollback to a
    config that was live before, a policy save that routes nothing differently) skips
    ``[routing] require_diff``, never the check of a ``diffed`` given."""
    expected = expected_version(expect_version)
    note = versions.checked_note(note)
    await owned_webhook(rt, caller, webhook_id)
    resolved = await rt.store.resolve_webhook_by_id(webhook_id)
    if resolved is None:
        raise NotFound(f"webhook {clip(webhook_id)} not found")
    grant = grant_for(resolved)
    async with rt.store.db.tx() as conn:
        row = await rt.store.lock_webhook(conn, webhook_id)
        if row is None:
            raise NotFound(f"webhook {clip(webhook_id)} not found")
        current = await rt.store.routing_version(conn, webhook_id)
        if expected is not None and expected != current:
            raise Conflict(
                f"webhook {clip(webhook_id)} is at version {current}, not {expected}: someone "
                "saved meanwhile; read it again (list_webhook_rules) and retry",
                current_version=current,
            )
        candidate = change(config_of(row).to_json())
        normalized = await validate_config(candidate, grant, rt.stages, resolved)
        doc = normalized.to_json()
        digest = versions.config_hash(doc)
        await _gate(rt, webhook_id, digest, diffed, required=gated)
        await rt.store.save_routing(conn, webhook_id, normalized)
        saved = await rt.store.add_routing_version(
            conn,
            webhook_id,
            version=current + 1,
            config=doc,
            config_hash=digest,
            author=versions.author_of(caller),
            note=note,
        )
    versions.logged(webhook_id, saved, normalized)
    return await _view(rt, webhook_id, normalized, grant, int(saved["version"]))


async def rollback_rules(
    rt: Runtime,
    caller: Row | None,
    webhook_id: str,
    version: Any,
    *,
    expect_version: Any = None,
    note: Any = None,
) -> dict[str, Any]:
    """Save version ``version``'s config again, as a new version (validated against the
    grant as it is today: a queue no longer granted refuses the rollback). Not gated by
    ``[routing] require_diff``: that config was live before, and an undo must not wait."""
    old = await versions.get_version(rt, caller, webhook_id, version)
    config = old["config"]
    return await save_config(
        rt,
        caller,
        webhook_id,
        lambda _current: config,
        expect_version=expect_version,
        note=versions.checked_note(note) or f"rollback to version {old['version']}",
        gated=False,
    )


def _index_of(config: Config, rule_id: str) -> int:
    for i, rule in enumerate(config["rules"]):
        if rule.get("id") == rule_id:
            return i
    raise NotFound(f"rule {clip(repr(rule_id))} not found", code="rule_not_found")


def _position(value: Any, upper: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= upper:
        raise InvalidArgument(f"position: must be an integer from 0 to {upper}")
    return value


#: ``set_rules(params=KEEP)``: leave the stored params as they are.
KEEP: Any = type("Keep", (), {"__repr__": lambda self: "KEEP"})()


async def set_rules(
    rt: Runtime,
    caller: Row | None,
    webhook_id: str,
    rules: Any,
    default_action: Any = None,
    params: Any = KEEP,
    *,
    on_fault: Any = KEEP,
    lanes: Any = KEEP,
    events_days: Any = KEEP,
    expect_version: Any = None,
    diffed: Any = None,
    note: Any = None,
) -> dict[str, Any]:
    """Replace the rules and default action; ``params`` omitted (``KEEP``) keeps the stored
    params, so re-saving rules never silently drops an allowlist; None clears them (and
    so for ``on_fault`` and ``lanes``: None is their default).
    ``expect_version`` and ``diffed`` guard the save (:func:`save_config`, :func:`_gate`)."""

    def change(old: Config) -> Config:
        kept = old.get("params") if params is KEEP else params
        doc = {"rules": rules, "default_action": default_action, "params": kept}
        return _with_policy(doc, old, on_fault=on_fault, lanes=lanes, events_days=events_days)

    return await save_config(
        rt, caller, webhook_id, change, expect_version=expect_version, diffed=diffed, note=note
    )


#: The parts of a routing config beside its rules that a rules save keeps.
POLICY_KEYS = ("on_fault", "lanes", "events_days")


def _with_policy(doc: Config, old: Config, **values: Any) -> Config:
    """``doc`` with each of :data:`POLICY_KEYS` as asked: ``KEEP`` keeps ``old``'s (if
    any), None leaves it out (its default), anything else is set."""
    for key, value in values.items():
        if value is KEEP:
            if key in old:
                doc[key] = old[key]
        elif value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


async def set_policy(
    rt: Runtime,
    caller: Row | None,
    webhook_id: str,
    *,
    on_fault: Any = KEEP,
    lanes: Any = KEEP,
    events_days: Any = KEEP,
    expect_version: Any = None,
    diffed: Any = None,
    note: Any = None,
) -> dict[str, Any]:
    """Set the webhook's fault policy (``on_fault``), its ``lanes`` (a lane's
    ``once_ttl_s``) and/or its ``events_days`` (retention), keeping its rules; an argument
    omitted (``KEEP``) keeps what is saved, None resets it to the default (0 days too:
    the server's ``[retention] events_days``). A new version. Gated like any save when it
    changes routing: a hold changes where faulted deliveries go, so ``diff_webhook_rules
    {on_fault, lanes}`` (no rules) diffs it and answers the ``candidate_hash`` that
    ``diffed`` names; ``events_days`` alone routes nothing differently and is not gated
    (a ``diffed`` given is checked all the same)."""
    if on_fault is KEEP and lanes is KEEP and events_days is KEEP:
        raise InvalidArgument("give on_fault or lanes or events_days (or several)")

    def change(old: Config) -> Config:
        return _with_policy(dict(old), old, on_fault=on_fault, lanes=lanes, events_days=events_days)

    routes = on_fault is not KEEP or lanes is not KEEP
    return await save_config(
        rt,
        caller,
        webhook_id,
        change,
        expect_version=expect_version,
        diffed=diffed,
        note=note,
        gated=routes,
    )


async def add_rule(
    rt: Runtime,
    caller: Row | None,
    webhook_id: str,
    *,
    expr: Any,
    action: Any,
    id: str | None = None,
    name: str | None = None,
    position: int | None = None,
) -> dict[str, Any]:
    rule: dict[str, Any] = {"expr": expr, "action": action}
    if id is not None:
        rule["id"] = id
    if name is not None:
        rule["name"] = name

    def change(config: Config) -> Config:
        rules = config["rules"]
        at = len(rules) if position is None else _position(position, len(rules))
        rules.insert(at, rule)
        return config

    return await save_config(rt, caller, webhook_id, change)


async def update_rule(
    rt: Runtime,
    caller: Row | None,
    webhook_id: str,
    rule_id: str,
    *,
    name: str | None = None,
    expr: str | None = None,
    action: Any = None,
) -> dict[str, Any]:
    def change(config: Config) -> Config:
        rule = config["rules"][_index_of(config, rule_id)]
        for key, value in (("name", name), ("expr", expr), ("action", action)):
            if value is not None:
                rule[key] = value
        return config

    return await save_config(rt, caller, webhook_id, change)


async def move_rule(
    rt: Runtime, caller: Row | None, webhook_id: str, rule_id: str, position: int
) -> dict[str, Any]:
    def change(config: Config) -> Config:
        rules = config["rules"]
        rule = rules.pop(_index_of(config, rule_id))
        rules.insert(_position(position, len(rules)), rule)
        return config

    return await save_config(rt, caller, webhook_id, change)


async def remove_rule(
    rt: Runtime, caller: Row | None, webhook_id: str, rule_id: str
) -> dict[str, Any]:
    def change(config: Config) -> Config:
        config["rules"].pop(_index_of(config, rule_id))
        return config

    return await save_config(rt, caller, webhook_id, change)


async def test_rules(
    rt: Runtime,
    caller: Row | None,
    webhook_id: str,
    *,
    event_id: str | None = None,
    payload: Any = None,
    headers: dict[str, str] | None = None,
    rules: Any = None,
    default_action: Any = None,
    params: Any = None,
    llm: str = "skip",
) -> dict[str, Any]:
    """Dry-run saved or candidate rules against a stored event or a sample; saves nothing.

    ``llm`` is ``"skip"`` (the default: the ``llm`` triage stage is not run, so a dry run
    calls no model and spends no budget) or ``"run"`` (it runs as it would live, and its
    call counts against the owner's triage budget).
    """
    if llm not in LLM_CHOICES:
        raise InvalidArgument(
            f"llm: must be one of {', '.join(LLM_CHOICES)} (got {clip(repr(llm))})"
        )
    row = await owned_webhook(rt, caller, webhook_id)
    grant = await _grant(rt, row["id"])
    config = config_of(row).to_json()
    if rules is not None:
        config = {"rules": rules, "default_action": default_action, "params": params}
    else:
        if default_action is not None:
            config["default_action"] = default_action
        if params is not None:
            config["params"] = params
    if (event_id is None) == (payload is None):
        raise InvalidArgument("give exactly one of event_id or payload")
    if event_id is not None:
        event = await rt.store.get_event(event_id)
        if event is None or event["webhook_id"] != row["id"]:
            raise NotFound(f"event {clip(event_id)} not found")
        envelope = stored_envelope(rt.registries.projections, event, row["id"])
    else:
        if headers is not None and not isinstance(headers, dict):
            raise InvalidArgument("headers: must be an object of header names to values")
        envelope = sample_envelope(
            rt.registries.projections,
            sources=rt.registries.sources,
            source=row["source_type"],
            trust_mode=row["trust_mode"],
            webhook_id=row["id"],
            body=raw_body(payload),
            headers={str(k): str(v) for k, v in (headers or {}).items()},
        )
    result = await dry_run(
        rt.stages, config, envelope, grant, row, runtime=rt, skip=("llm",) if llm == "skip" else ()
    )
    del result["config"]
    await once.dry_run_claim(rt, row, result, event_id)
    return result


# Not a pytest test, whatever its name says.
test_rules.__test__ = False  # type: ignore[attr-defined]

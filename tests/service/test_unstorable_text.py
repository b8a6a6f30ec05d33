"""Caller text PostgreSQL cannot store (NUL, a lone surrogate) is refused naming its field,
never an ``internal`` error; out-of-range and echoed arguments likewise."""

from __future__ import annotations

from typing import Any

import pytest
from sbworld import vended_endpoint

from switchboard.errors import (
    ECHO_MAX,
    InvalidArgument,
    NotFound,
    RuleValidationError,
    clip,
    mcp_code,
)
from switchboard.pgtext import unstorable
from switchboard.runtime import Runtime
from switchboard.service import history, identity, once, rules, todos, versions, webhooks
from switchboard.service.identity import EXPIRES_MAX_S
from switchboard.service.ingest import ingest
from switchboard.service.reroute import release_held, reroute_events
from switchboard.sources import Headers

RULE = {"id": "r1", "expr": ".payload.n >= 0", "action": {"queue": "inbox"}}
#: A scheme the hmac source takes (as tests/plugins/presets has it).
SCHEME = {
    "signature_header": "X-Acme-Signature",
    "signed": "{body}",
    "delivery_id": [{"pointer": "/id"}],
}


async def _owner(rt: Runtime) -> tuple[Any, str]:
    """alice's router endpoint and a generic webhook of it with one delivery."""
    await identity.add_human(rt, "alice")
    owner = await vended_endpoint(
        rt, "alice", "owner", ["inbox"], webhook_queues=["inbox"],
        source_types=["generic", "hmac"], webhook_max=3,
    )  # fmt: skip
    created = await webhooks.create_webhook(rt, owner, "generic", "inbox")
    token = str(created["ingest_url"]).rsplit("/", 1)[1]
    reply = await ingest(rt, token, Headers({"X-Delivery-Id": "d1"}), b'{"n": 1}', None)
    assert reply.status == 202
    return owner, str(created["webhook_id"])


def test_the_helper_names_where_in_the_value_the_text_is() -> None:
    assert unstorable("fine", "note") is None
    assert unstorable({"a": ["b", 1, None, {"c": "d"}]}, "result") is None
    assert unstorable("a\x00b", "note") == "must not contain NUL (U+0000)"
    assert unstorable({"a": {"b": "x\x00"}}, "result") == (
        "a string at result.a.b contains NUL (U+0000), which PostgreSQL cannot store"
    )
    assert unstorable({"a": [1, {"k\x00": 1}]}, "result") == (
        "a key in result.a[1] contains NUL (U+0000), which PostgreSQL cannot store"
    )
    assert unstorable("n\udcff", "name") == (
        "must not contain U+DCFF, a lone surrogate (text that is not valid UTF-8)"
    )
    # nested deeper than Python's recursion limit: walked, not a RecursionError
    deep: Any = "\x00"
    for _ in range(5000):
        deep = [deep]
    assert "contains NUL" in str(unstorable(deep, "result"))
    assert clip("x" * 500) == "x" * ECHO_MAX + "…" and clip("short") == "short"


async def test_nul_in_agent_text_is_refused_naming_the_field(runtime: Runtime) -> None:
    rt = runtime
    owner, hook = await _owner(rt)

    with pytest.raises(InvalidArgument) as refused:
        await rules.set_rules(rt, owner, hook, [RULE], note="a\x00b")
    assert str(refused.value) == "note: must not contain NUL (U+0000)"
    with pytest.raises(InvalidArgument, match=r"^note: must not contain NUL"):
        await rules.set_policy(rt, owner, hook, on_fault="hold", note="\x00")

    with pytest.raises(RuleValidationError) as bad_rule:
        await rules.set_rules(rt, owner, hook, [{**RULE, "name": "n\x00"}])
    assert bad_rule.value.code == "invalid_rule"
    assert str(bad_rule.value) == "rule 0 (id r1): name must not contain NUL (U+0000)"
    with pytest.raises(RuleValidationError, match="name must not contain U\\+DCFF"):
        await rules.add_rule(rt, owner, hook, expr="true", action={"drop": True}, name="\udcff")
    with pytest.raises(RuleValidationError) as bad_expr:
        await rules.set_rules(rt, owner, hook, [{**RULE, "expr": "true\x00"}])
    assert bad_expr.value.code == "invalid_expression"

    with pytest.raises(RuleValidationError) as bad_params:
        await rules.set_rules(rt, owner, hook, [RULE], params={"p": ["ok", "a\x00b"]})
    assert bad_params.value.code == "invalid_params"
    assert str(bad_params.value) == (
        "params: a string at params.p[1] contains NUL (U+0000), which PostgreSQL cannot store"
    )

    for lane, subject, field in (("in\x00box", "s", "lane"), ("inbox", "s\x00", "subject")):
        with pytest.raises(InvalidArgument) as bad_once:
            await once.release_once_claim(rt, owner, lane, subject, hook)
        assert str(bad_once.value) == f"{field}: must not contain NUL (U+0000)"

    # nothing was saved by any of them
    assert (await versions.list_versions(rt, owner, hook))["current_version"] == 0

    with pytest.raises(InvalidArgument) as bad_config:
        await webhooks.create_webhook(
            rt, owner, "hmac", "inbox", source_config={**SCHEME, "signed": "{body}\x00"}
        )
    assert str(bad_config.value) == (
        "source_config: a string at source_config.signed contains NUL (U+0000),"
        " which PostgreSQL cannot store"
    )


async def test_a_result_with_nul_is_refused_and_the_todo_stays_held(runtime: Runtime) -> None:
    rt = runtime
    owner, _hook = await _owner(rt)
    held = (await todos.claim_next(rt, owner, owner="w"))["todo"]
    for result, where in (
        ({"out": {"text": "bin\x00ary"}}, "a string at result.out.text"),
        ({"ok": [{"k\x00": 1}]}, "a key in result.ok[0]"),
    ):
        for verb in (todos.complete, todos.fail):
            with pytest.raises(InvalidArgument) as refused:
                await verb(rt, owner, held["id"], owner="w", result=result)
            assert mcp_code(refused.value) == "invalid_argument"
            assert str(refused.value) == (
                f"result: {where} contains NUL (U+0000), which PostgreSQL cannot store"
            )
    with pytest.raises(InvalidArgument, match=r"^result: must not contain NUL"):
        await todos.complete(rt, owner, held["id"], owner="w", result="\x00")
    done = await todos.complete(rt, owner, held["id"], owner="w", result={"text": "binary"})
    assert done["todo"]["state"] == "done" and done["todo"]["result"] == {"text": "binary"}


async def test_names_that_are_not_utf8_are_invalid_names(runtime: Runtime) -> None:
    """argv bytes that are not UTF-8 reach us surrogate-escaped (``$'\\xff'``)."""
    rt = runtime
    with pytest.raises(InvalidArgument) as refused:
        await identity.add_human(rt, "\udcff\udcfe")
    assert str(refused.value).startswith("name: must not contain U+DCFF, a lone surrogate")
    await identity.add_human(rt, "alice")
    with pytest.raises(InvalidArgument, match=r"^name: must not contain U\+DCFF"):
        await identity.vend_endpoint(rt, owner="alice", name="n\udcff")
    with pytest.raises(InvalidArgument, match=r"^owner: must not contain U\+DCFF"):
        await identity.vend_endpoint(rt, owner="\udcff", name="q")
    with pytest.raises(InvalidArgument, match=r"^name: must not contain NUL"):
        await identity.add_human(rt, "a\x00")
    with pytest.raises(InvalidArgument, match=r"^to: must not contain U\+DCFF"):
        await identity.add_friend(rt, "alice", "\udcff")
    with pytest.raises(InvalidArgument, match=r"^owner: must not contain NUL"):
        await webhooks.list_all_webhooks(rt, owner="\x00")
    assert [h["name"] for h in (await identity.list_humans(rt))["humans"]] == ["alice"]


async def test_expires_in_has_an_upper_bound_named_in_the_error(runtime: Runtime) -> None:
    rt = runtime
    await identity.add_human(rt, "alice")
    for seconds in (999999999999, 10**20, 0, -1, EXPIRES_MAX_S + 1):
        with pytest.raises(InvalidArgument) as refused:
            await identity.vend_endpoint(rt, owner="alice", name="e", expires_in_seconds=seconds)
        assert str(refused.value).startswith(
            f"expires_in: a number of seconds from 1 to {EXPIRES_MAX_S} (100 years)"
        ), seconds
    made = await identity.vend_endpoint(
        rt, owner="alice", name="e", expires_in_seconds=EXPIRES_MAX_S
    )
    assert made["endpoint_id"]


async def test_a_bad_changes_cursor_is_named_as_changes_cursor(runtime: Runtime) -> None:
    rt = runtime
    owner, hook = await _owner(rt)
    await rules.set_rules(rt, owner, hook, [RULE])
    calls = (
        lambda **kw: history.diff_rules(rt, owner, hook, rules=[RULE], **kw),
        lambda **kw: reroute_events(rt, owner, hook, **kw),
        lambda **kw: release_held(rt, owner, hook, **kw),
    )
    for call in calls:
        for bad in ("bogus", 7):
            with pytest.raises(InvalidArgument) as refused:
                await call(changes_cursor=bad)
            assert str(refused.value) == "changes_cursor: not a cursor this tool returned"
            with pytest.raises(InvalidArgument) as as_cursor:
                await call(cursor=bad)
            assert str(as_cursor.value) == "cursor: not a cursor this tool returned"


async def test_a_wrong_diffed_is_refused_when_only_events_days_changes(
    runtime: Runtime,
) -> None:
    rt = runtime
    owner, hook = await _owner(rt)
    with pytest.raises(InvalidArgument) as refused:
        await rules.set_policy(rt, owner, hook, events_days=7, diffed="sha256:bogus")
    assert refused.value.code == "diff_mismatch"
    assert str(refused.value).startswith("diffed: 'sha256:bogus' is not this candidate's hash")
    assert (await versions.list_versions(rt, owner, hook))["current_version"] == 0
    # the right hash (the refusal names it, as a diff of this candidate would) saves, and
    # no hash saves: events_days alone is not gated
    good = str(refused.value).split("(", 1)[1].split(")", 1)[0]
    saved = await rules.set_policy(rt, owner, hook, events_days=7, diffed=good)
    assert saved["version"] == 1 and saved["config_hash"] == good
    assert (await rules.set_policy(rt, owner, hook, events_days=8))["version"] == 2


async def test_echoed_ids_are_cut_and_a_route_target_must_be_an_endpoint_id(
    runtime: Runtime,
) -> None:
    rt = runtime
    owner, hook = await _owner(rt)
    huge = "x" * 600_000
    for call in (
        lambda: rules.list_rules(rt, owner, huge),
        lambda: rules.remove_rule(rt, owner, hook, huge),
        lambda: todos.complete(rt, owner, huge, owner="w"),
        lambda: rules.set_policy(rt, owner, hook, events_days=7, diffed=huge),
        lambda: rules.set_rules(rt, owner, hook, [{**RULE, "id": None, "name": huge}]),
        lambda: rt.store.get_endpoint(huge),  # the store's own messages too
    ):
        with pytest.raises((NotFound, InvalidArgument, RuleValidationError)) as refused:
            await call()
        assert len(str(refused.value)) < 400, str(refused.value)[:200]
    with pytest.raises(InvalidArgument) as bad_target:
        await webhooks.remove_route(rt, owner, hook, huge)
    text = str(bad_target.value)
    assert text.startswith("target_endpoint_id: not an endpoint id (a UUID)") and len(text) < 300
    # another human's webhook is not found whatever the target (no existence oracle)
    await identity.add_human(rt, "bob")
    bob = await identity.vend_endpoint(rt, owner="bob", name="b", queues=["inbox"])
    bob_row = await rt.store.get_endpoint(bob["endpoint_id"])
    with pytest.raises(NotFound):
        await webhooks.remove_route(rt, bob_row, hook, huge)
    gone = await webhooks.remove_route(rt, owner, hook, bob["endpoint_id"])
    assert gone == {"webhook_id": hook, "target_endpoint_id": bob["endpoint_id"], "removed": False}

"""Every MCP tool refuses arguments it does not take, naming them, before anything runs."""

from __future__ import annotations

from typing import Any

import httpx

UNKNOWN = "zz_not_an_argument"


async def test_every_tool_refuses_an_unknown_argument(people: Any, connect: Any) -> None:
    ep = await people.vend(people.alice, "walker")
    registered = {t.name for t in people.rt.registries.mcp_tools}
    async with connect(people.url, ep["token"]) as a:
        tools = (await a.session.list_tools()).tools
        assert {t.name for t in tools} == registered
        for tool in tools:
            assert tool.input_schema.get("additionalProperties") is False, tool.name
            result = await a.session.call_tool(tool.name, {UNKNOWN: 1})
            assert result.is_error, tool.name
            text = result.content[0].text  # type: ignore[union-attr]
            assert text.startswith("invalid_argument: "), (tool.name, text)
            assert repr(UNKNOWN) in text and tool.name in text, text


async def test_a_known_call_with_an_extra_key_changes_nothing(people: Any, connect: Any) -> None:
    ep = await people.vend(people.alice, "owner")
    async with connect(people.url, ep["token"]) as a:
        hook = await a.call("create_webhook", source_type="generic", target_queue="inbox")
        rules = [{"id": "r1", "expr": '.kind == "push"', "action": {"queue": "inbox"}}]
        err = await a.fails(
            "set_webhook_rules", webhook_id=hook["webhook_id"], rules=rules, on_fault="hold"
        )
        assert err.code == "invalid_argument"
        assert "'on_fault'" in err.text and "set_webhook_rules takes:" in err.text
        listed = await a.call("list_webhook_rules", webhook_id=hook["webhook_id"])
        assert listed["rules"] == []
        # Two unknown keys are both named, sorted.
        err = await a.fails("list_webhooks", b_extra=1, a_extra=2)
        assert "unknown arguments 'a_extra', 'b_extra'" in err.text


async def _delivered(people: Any, connect: Any, token: str, n: int) -> str:
    """A generic webhook made over MCP, with ``n`` deliveries posted to it."""
    async with connect(people.url, token) as a:
        hook = await a.call("create_webhook", source_type="generic", target_queue="inbox")
    async with httpx.AsyncClient(timeout=30) as http:
        for i in range(n):
            sent = await http.post(
                hook["ingest_url"], content=b'{"n": %d}' % i, headers={"X-Delivery-Id": f"d{i}"}
            )
            assert sent.status_code == 202, sent.text
    return str(hook["webhook_id"])


async def test_a_plan_that_is_not_a_boolean_is_refused_and_reroutes_nothing(
    people: Any, connect: Any
) -> None:
    owner = await people.vend(people.alice, "router")
    pool = await people.vend(people.alice, "pool")
    wid = await _delivered(people, connect, owner["token"], 2)
    async with connect(people.url, owner["token"]) as a, connect(people.url, pool["token"]) as p:
        # The route is added after the deliveries: an applied re-route gives the pool both.
        await a.call("add_webhook_route", webhook_id=wid, target_endpoint_id=pool["endpoint_id"])
        for plan, got in (
            ("no", "a string"),
            ("false", "a string"),
            (0, "an integer"),
            (None, "null"),
        ):
            err = await a.fails("reroute_webhook_events", webhook_id=wid, plan=plan)
            assert err.text == f"invalid_argument: plan: must be a boolean (got {got})", plan
        assert (await p.call("list_todos"))["todos"] == []
        # plan: true, and plan: false, still do what they say.
        await a.call("reroute_webhook_events", webhook_id=wid, plan=True)
        assert (await p.call("list_todos"))["todos"] == []
        await a.call("reroute_webhook_events", webhook_id=wid, plan=False)
        assert len((await p.call("list_todos"))["todos"]) == 2


# (tool, argument, value, what the refusal says it must be, what it got)
MISTYPED = [
    ("list_webhook_events", "limit", "2", "an integer", "a string"),
    ("list_webhook_events", "limit", True, "an integer", "a boolean"),
    ("list_webhook_events", "limit", 1.5, "an integer", "a number"),
    ("list_webhook_refusals", "limit", "2", "an integer", "a string"),
    ("list_todos", "limit", False, "an integer", "a boolean"),
    ("list_todos", "unreachable", "yes", "a boolean", "a string"),
    ("list_todos", "unreachable", 1, "a boolean", "an integer"),
    ("claim_next", "lease_ttl_seconds", "5", "a number", "a string"),
    ("claim_next", "lease_ttl_seconds", True, "a number", "a boolean"),
    ("reroute_webhook_events", "last", "5", "an integer", "a string"),
    ("create_webhook", "source_config", "{}", "an object", "a string"),
    ("reroute_webhook_events", "event_ids", '["x"]', "a list", "a string"),
]


async def test_a_value_of_another_json_type_is_refused_never_converted(
    people: Any, connect: Any
) -> None:
    """The schema's types are JSON Schema's: a boolean is no number, "2" no integer, a string
    holding JSON text no list; 1.0 is an integer, as JSON Schema says, and 30 a number."""
    ep = await people.vend(people.alice, "strict")
    wid = await _delivered(people, connect, ep["token"], 2)
    async with connect(people.url, ep["token"]) as a:
        for tool, name, value, want, got in MISTYPED:
            args: dict[str, Any] = {name: value}
            if tool in ("list_webhook_events", "list_webhook_refusals", "reroute_webhook_events"):
                args["webhook_id"] = wid
            if tool == "create_webhook":
                args.update(source_type="generic", target_queue="inbox")
            err = await a.fails(tool, **args)
            assert err.text == f"invalid_argument: {name}: must be {want} (got {got})", args
        # Nothing ran: no webhook made, no todo claimed.
        assert len((await a.call("list_webhooks"))["webhooks"]) == 1
        todos = (await a.call("list_todos"))["todos"]
        assert [t["state"] for t in todos] == ["pending", "pending"]

        # The same arguments, well typed, still work.
        assert len((await a.call("list_webhook_events", webhook_id=wid, limit=1))["events"]) == 1
        assert len((await a.call("list_webhook_events", webhook_id=wid, limit=1.0))["events"]) == 1
        assert (await a.call("list_todos", unreachable=False))["todos"] == todos
        claimed = (await a.call("claim_next", lease_ttl_seconds=30))["todo"]
        # A string stays the string it is, even one that reads as JSON.
        done = (await a.call("complete", id=claimed["id"], result="[1, 2]"))["todo"]
        assert done["result"] == "[1, 2]"


async def test_text_postgresql_cannot_store_is_refused_naming_the_argument(
    people: Any, connect: Any
) -> None:
    """A NUL in an agent's text is that argument's error, never
    ``internal``; and a refused result leaves the todo held, to be completed after."""
    ep = await people.vend(people.alice, "nul", sources="generic,hmac")
    wid = await _delivered(people, connect, ep["token"], 1)
    rule = {"id": "r1", "expr": "true", "action": {"queue": "inbox"}}
    scheme = {"signature_header": "X-Sig", "signed": "{body}\u0000", "delivery_id": []}
    nul = "NUL (U+0000)"
    stored = f"contains {nul}, which PostgreSQL cannot store"
    async with connect(people.url, ep["token"]) as a:
        for tool, args, want in (
            ("set_webhook_rules", {"rules": [rule], "note": "a\u0000"}, f"invalid_argument: note: must not contain {nul}"),
            ("set_webhook_policy", {"on_fault": "hold", "note": "\u0000"}, f"invalid_argument: note: must not contain {nul}"),
            ("set_webhook_rules", {"rules": [{**rule, "name": "n\u0000"}]}, f"invalid_rule: rule 0 (id r1): name must not contain {nul}"),
            ("set_webhook_rules", {"rules": [rule], "params": {"p": ["a\u0000"]}}, f"invalid_params: params: a string at params.p[0] {stored}"),
            ("release_once_claim", {"lane": "in\u0000box", "subject": "s"}, f"invalid_argument: lane: must not contain {nul}"),
            ("release_once_claim", {"lane": "inbox", "subject": "s\u0000"}, f"invalid_argument: subject: must not contain {nul}"),
        ):  # fmt: skip
            err = await a.fails(tool, webhook_id=wid, **args)
            assert err.text.startswith(want), (tool, err.text)
        err = await a.fails(
            "create_webhook", source_type="hmac", target_queue="inbox", source_config=scheme
        )
        assert (
            err.text
            == f"invalid_argument: source_config: a string at source_config.signed {stored}"
        )
        assert (await a.call("list_webhook_rules", webhook_id=wid))["version"] == 0
        held = (await a.call("claim_next"))["todo"]
        for verb in ("complete", "fail"):
            err = await a.fails(verb, id=held["id"], result={"out": {"k\u0000": "v"}})
            assert err.text == f"invalid_argument: result: a key in result.out {stored}", err.text
        done = await a.call("complete", id=held["id"], result={"out": "v"})
        assert done["todo"]["state"] == "done"


async def test_guards_and_cursors_are_checked_and_named_as_given(people: Any, connect: Any) -> None:
    """A ``diffed`` given is always compared (events_days alone too); a bad
    ``changes_cursor`` is named so; a huge id is neither echoed whole nor "removed"."""
    ep = await people.vend(people.alice, "guards")
    wid = await _delivered(people, connect, ep["token"], 1)
    async with connect(people.url, ep["token"]) as a:
        err = await a.fails(
            "set_webhook_policy", webhook_id=wid, events_days=7, diffed="sha256:bogus"
        )
        assert err.code == "diff_mismatch", err.text
        assert (await a.call("list_webhook_rules", webhook_id=wid))["version"] == 0
        for tool in ("diff_webhook_rules", "reroute_webhook_events", "release_held_events"):
            err = await a.fails(tool, webhook_id=wid, changes_cursor="bogus")
            assert err.text == "invalid_argument: changes_cursor: not a cursor this tool returned"
        huge = "x" * 600_000
        err = await a.fails("remove_webhook_route", webhook_id=wid, target_endpoint_id=huge)
        assert err.text.startswith("invalid_argument: target_endpoint_id: not an endpoint id")
        assert len(err.text) < 300
        err = await a.fails("list_webhook_rules", webhook_id=huge)
        assert err.code == "not_found" and len(err.text) < 300

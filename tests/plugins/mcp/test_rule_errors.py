"""``set_webhook_rules`` tells a jq error in the rule author's terms, as ``rules check`` does."""

from __future__ import annotations

from typing import Any

from sbusererrors import ACTION_ERRORS, COMPILE_ERRORS, EXPR_ABSENT, EXPR_ERRORS, WRAPPER_NAMES


def _rules(expr: object, action: Any = None) -> list[dict[str, Any]]:
    mine = {
        "id": "mine",
        "name": "kind check",
        "expr": expr,
        "action": action or {"queue": "inbox"},
    }
    if expr is EXPR_ABSENT:
        del mine["expr"]
    return [{"id": "fine", "expr": "true", "action": {"queue": "inbox"}}, mine]


PREFIX = "rule 1 (id mine, name kind check): expression does not compile: "


async def test_set_webhook_rules_tells_each_error_in_the_rules_terms(
    people: Any, connect: Any
) -> None:
    ep = await people.vend(people.alice, "owner")
    async with connect(people.url, ep["token"]) as a:
        hook = await a.call("create_webhook", source_type="generic", target_queue="inbox")
        for expr, told in COMPILE_ERRORS:
            err = await a.fails(
                "set_webhook_rules", webhook_id=hook["webhook_id"], rules=_rules(expr)
            )
            assert err.text == f"invalid_expression: {PREFIX}{told}", expr
        for expr, name in WRAPPER_NAMES:
            err = await a.fails(
                "set_webhook_rules", webhook_id=hook["webhook_id"], rules=_rules(expr)
            )
            assert err.text.startswith(f"invalid_expression: {PREFIX}{name} is not defined"), expr
        for action, said in ACTION_ERRORS:
            err = await a.fails(
                "set_webhook_rules", webhook_id=hook["webhook_id"], rules=_rules("true", action)
            )
            assert err.text == f"invalid_rule: rule 1 (id mine, name kind check): {said}", action
        for expr, said in EXPR_ERRORS:
            err = await a.fails(
                "set_webhook_rules", webhook_id=hook["webhook_id"], rules=_rules(expr)
            )
            assert err.text == f"invalid_expression: rule 1 (id mine, name kind check): {said}"
        # A typo'd queue: the code `rules check` gives it (test_user_errors), not forbidden
        typo = await a.fails(
            "set_webhook_rules",
            webhook_id=hook["webhook_id"],
            rules=_rules("true", {"queue": "inbx"}),
        )
        assert typo.code == "not_granted" and "queue 'inbx' is not granted" in typo.text
        listed = await a.call("list_webhook_rules", webhook_id=hook["webhook_id"])
        assert listed["rules"] == []

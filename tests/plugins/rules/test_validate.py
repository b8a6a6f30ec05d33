"""The rules stage's own save-time checks: forbidden builtins, then a sandbox compile."""

from __future__ import annotations

from typing import Any

import pytest
from switchboard_rules.stage import RulesStage

from switchboard.plugin import Grant, RuleValidationError, Target, validate_config

GRANT = Grant("inbox", ("inbox", "forge"), (Target("ep-owner"),))


def rule(expr: str, **kw: Any) -> dict[str, Any]:
    return {"id": "r1", "name": "push", "expr": expr, "action": {"queue": "forge"}, **kw}


@pytest.mark.parametrize(
    ("expr", "code", "message"),
    [
        (
            "env.HOME == 1",
            "forbidden_function",
            "rule 0 (id r1, name push): expression uses forbidden env",
        ),
        (
            "$ENV | length > 0",
            "forbidden_function",
            "rule 0 (id r1, name push): expression uses forbidden $ENV",
        ),
    ],
)
async def test_forbidden_builtins_are_refused_without_a_sandbox(
    expr: str, code: str, message: str
) -> None:
    stage = RulesStage()
    with pytest.raises(RuleValidationError) as info:
        await validate_config({"rules": [rule(expr)]}, GRANT, [stage])
    assert (info.value.code, info.value.index, info.value.message) == (code, 0, message)
    assert stage._sandbox is None


async def test_compile_errors_name_the_first_failing_rule() -> None:
    stage = RulesStage()
    try:
        ok = await validate_config(
            {"rules": [rule(".kind == 1"), rule(".a == $params.x", id="r2")], "params": {"x": 1}},
            GRANT,
            [stage],
        )
        assert [r["id"] for r in ok.rules] == ["r1", "r2"]
        with pytest.raises(RuleValidationError) as info:
            await validate_config(
                {"rules": [rule("true"), rule('"x" * 1e9', id="r2")]}, GRANT, [stage]
            )
        assert (info.value.code, info.value.index) == ("invalid_expression", 1)
        with pytest.raises(RuleValidationError) as info:
            await validate_config({"rules": [rule(".a | ")]}, GRANT, [stage])
        assert (info.value.code, info.value.index) == ("invalid_expression", 0)
        assert info.value.message.startswith(
            "rule 0 (id r1, name push): expression does not compile"
        )
    finally:
        await stage.close()

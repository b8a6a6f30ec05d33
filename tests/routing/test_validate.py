"""Save-time validation: every error code, normalization, and sandbox compilation."""

from __future__ import annotations

import re
from typing import Any

import pytest

from switchboard.errors import InvalidArgument, RuleValidationError
from switchboard.routing.config import check_structure, rule_error, validate_config
from switchboard.routing.model import Grant, RoutingConfig


def rule(expr: str = '.kind == "push"', **kw: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": "r1", "name": "push", "expr": expr, "action": {"queue": "forge"}}
    doc.update(kw)
    return doc


def cfg(*rules: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"rules": list(rules), **kw}


CASES: list[tuple[str, dict[str, Any], str, int | None]] = [
    ("too many", cfg(*[rule(id=f"r{i}") for i in range(33)]), "too_many_rules", None),
    ("bad id", cfg(rule(id="has space")), "invalid_rule", 0),
    ("long id", cfg(rule(id="x" * 65)), "invalid_rule", 0),
    ("dup id", cfg(rule(), rule()), "invalid_rule", 1),
    ("long name", cfg(rule(name="é" * 65)), "invalid_rule", 0),
    ("name type", cfg(rule(name=5)), "invalid_rule", 0),
    ("unknown field", cfg(rule(extra=1)), "invalid_rule", 0),
    ("empty expr", cfg(rule("  ")), "invalid_expression", 0),
    ("long expr", cfg(rule("." + " " * 4096)), "invalid_expression", 0),
    ("no action", cfg({"id": "a", "expr": "true"}), "invalid_rule", 0),
    ("both", cfg(rule(action={"queue": "forge", "drop": True})), "invalid_rule", 0),
    ("neither", cfg(rule(action={})), "invalid_rule", 0),
    ("drop endpoints", cfg(rule(action={"drop": True, "endpoints": ["ep-a"]})), "invalid_rule", 0),
    ("drop false", cfg(rule(action={"drop": False})), "invalid_rule", 0),
    ("too many eps", cfg(rule(action={"queue": "forge", "endpoints": [f"e{i}" for i in range(17)]})),
     "invalid_rule", 0),
    ("dup eps", cfg(rule(action={"queue": "forge", "endpoints": ["ep-a", "ep-a"]})), "invalid_rule", 0),
    ("queue type", cfg(rule(action={"queue": 5})), "invalid_rule", 0),
    ("eps type", cfg(rule(action={"queue": "forge", "endpoints": "ep-a"})), "invalid_rule", 0),
    ("action extra", cfg(rule(action={"queue": "forge", "colour": "red"})), "invalid_rule", 0),
    ("queue not granted", cfg(rule(action={"queue": "secret"})), "not_granted", 0),
    ("endpoint not target", cfg(rule(action={"queue": "forge", "endpoints": ["ep-x"]})),
     "not_granted", 0),
    ("default not granted", cfg(default_action={"queue": "secret"}), "not_granted", None),
    ("default malformed", cfg(default_action={"drop": True, "queue": "x"}), "invalid_rule", None),
    ("params type", cfg(params=[1]), "invalid_params", None),
    ("params nested", cfg(params={"a": {"b": 1}}), "invalid_params", None),
    ("params mixed list", cfg(params={"a": [1, "x"]}), "invalid_params", None),
    ("params list of lists", cfg(params={"a": [[1]]}), "invalid_params", None),
    ("params null", cfg(params={"a": None}), "invalid_params", None),
    ("params too big", cfg(params={"a": "x" * 16400}), "invalid_params", None),
    ("rules type", {"rules": {}}, "invalid_rule", None),
    ("config extra", {"rules": [], "bogus": 1}, "invalid_rule", None),
    # Work orders and lanes (ADR-0025): flags are booleans on queue actions only.
    ("drop exclusive", cfg(rule(action={"drop": True, "exclusive": True})), "invalid_rule", 0),
    ("drop once", cfg(rule(action={"drop": True, "once": True})), "invalid_rule", 0),
    ("drop work order", cfg(rule(action={"drop": True, "work_order": True})), "invalid_rule", 0),
    ("default drop once", cfg(default_action={"drop": True, "once": True}), "invalid_rule", None),
    ("work order type", cfg(rule(action={"queue": "forge", "work_order": {}})), "invalid_rule", 0),
    ("once type", cfg(rule(action={"queue": "forge", "once": "yes"})), "invalid_rule", 0),
    # granted, but no target drains lane-s: exclusive has no one to deliver to
    ("exclusive undrained", cfg(rule(action={"queue": "lane-s", "exclusive": True})),
     "not_granted", 0),
    ("exclusive narrowed away",
     cfg(rule(action={"queue": "forge", "exclusive": True, "endpoints": ["ep-b"]})),
     "not_granted", 0),
    ("default exclusive undrained", cfg(default_action={"queue": "lane-s", "exclusive": True}),
     "not_granted", None),
]  # fmt: skip


@pytest.mark.parametrize(("label", "config", "code", "index"), CASES, ids=[c[0] for c in CASES])
def test_rejections(label: str, config: dict[str, Any], code: str, index: int | None,
                    grant: Grant) -> None:  # fmt: skip
    with pytest.raises(RuleValidationError) as info:
        check_structure(config, grant)
    err = info.value
    assert isinstance(err, InvalidArgument)
    assert err.code == code, err.message
    assert err.index == index
    if index is not None:
        assert err.message.startswith(f"rule {index} (")
    elif code in ("not_granted", "invalid_rule") and "default_action" in config:
        assert err.message.startswith("default_action")


@pytest.mark.parametrize("flag", ["exclusive", "once", "work_order"])
def test_drop_refuses_each_flag_by_name(flag: str, grant: Grant) -> None:
    with pytest.raises(RuleValidationError, match=f"a drop action cannot set '{flag}'"):
        check_structure(cfg(rule(action={"drop": True, flag: True})), grant)


def test_queue_actions_keep_their_flags(grant: Grant) -> None:
    action = {"queue": "forge", "exclusive": True, "once": True, "work_order": True}
    out = check_structure(
        cfg(rule(action=action), default_action={"queue": "inbox", "work_order": True}), grant
    )
    assert out.rules[0]["action"] == action
    assert out.default_action == {"queue": "inbox", "work_order": True}


def test_message_names_rule_by_index_id_and_name(grant: Grant) -> None:
    with pytest.raises(RuleValidationError) as info:
        check_structure(cfg(rule(id="x", name="y", action={"queue": "nope"})), grant)
    assert info.value.message.startswith("rule 0 (id x, name y): ")
    assert (info.value.rule_id, info.value.rule_name) == ("x", "y")


def test_endpoint_miss_message_is_identical(grant: Grant) -> None:
    messages = set()
    for ep in ("ep-unknown", "ep-of-someone-else", "x"):
        with pytest.raises(RuleValidationError) as info:
            check_structure(cfg(rule(action={"queue": "forge", "endpoints": ["ep-a", ep]})), grant)
        messages.add(info.value.message)
    [message] = messages
    assert message.startswith(
        "rule 0 (id r1, name push): endpoint is not a delivery target of this webhook: "
    )


def test_normalizes_and_mints_ids(grant: Grant) -> None:
    out = check_structure(
        {"rules": [{"expr": "true", "action": {"drop": True}}, rule()],
         "params": {"s": "x", "n": 1.5, "b": True, "l": ["a"], "m": [1, 2]}},
        grant,
    ).to_json()  # fmt: skip
    assert re.fullmatch(r"rule_[0-9a-f]{24}", out["rules"][0]["id"])
    assert "name" not in out["rules"][0]
    assert out["rules"][1] == rule()
    assert out["default_action"] is None
    assert out["params"]["m"] == [1, 2]


def test_target_queue_and_granted_queues_pass(grant: Grant) -> None:
    config = cfg(rule(action={"queue": "inbox", "endpoints": ["ep-b"]}), rule(id="r2", action={"queue": "lane-s"}),
                 default_action={"queue": "forge"})  # fmt: skip
    assert check_structure(config, grant).default_action == {"queue": "forge"}


def test_grant_none_skips_grant_checks() -> None:
    check_structure(cfg(rule(action={"queue": "anything", "endpoints": ["who"]})), None)


def test_empty_config() -> None:
    assert check_structure({"rules": []}, None).to_json() == {
        "rules": [],
        "default_action": None,
        "params": {},
    }


class FakeStage:
    """A stage that refuses what its compiler reports, as the rules stage does."""

    name = "fake"

    def __init__(self, errors: list[tuple[int, str]]) -> None:
        self.errors = errors
        self.calls: list[RoutingConfig] = []

    async def validate(self, config: RoutingConfig) -> None:
        self.calls.append(config)
        if self.errors:
            index, message = min(self.errors)
            raise rule_error(
                index,
                config.rules[index],
                "invalid_expression",
                f"expression does not compile: {message}",
            )


class PassiveStage:
    """A stage without ``validate``: the host never asks it."""

    name = "passive"


@pytest.mark.anyio
async def test_each_validating_stage_checks_the_normalized_config(grant: Grant) -> None:
    fake = FakeStage([(2, "bad"), (1, "syntax error")])
    config = cfg(rule(), rule(".a[", id="r2", name="two"), rule(".b[", id="r3"))
    with pytest.raises(RuleValidationError) as info:
        await validate_config(config, grant, [PassiveStage(), fake])
    assert info.value.code == "invalid_expression"
    assert info.value.index == 1
    assert info.value.message.startswith("rule 1 (id r2, name two): expression does not compile")
    assert [r["id"] for r in fake.calls[0].rules] == ["r1", "r2", "r3"]


@pytest.mark.anyio
async def test_structure_errors_come_before_any_stage(grant: Grant) -> None:
    fake = FakeStage([])
    with pytest.raises(RuleValidationError) as info:
        await validate_config(cfg(rule(action={"queue": "secret"})), grant, [fake])
    assert info.value.code == "not_granted" and fake.calls == []


@pytest.mark.parametrize("where", ["action", "params", "default_action"])
def test_a_config_nested_past_the_limit_is_refused_before_anything_walks_it(where: str) -> None:
    """A config nested 5,000 deep (one a JSON parser of Python 3.13 reads) made the id
    minted from a rule's JSON recurse past the limit: a traceback, a 500 on the console.
    It is refused first, whatever nests."""
    deep: Any = []
    for _ in range(5000):
        deep = [deep]
    rule: dict[str, Any] = {"expr": ".", "action": {"queue": "inbox"}}
    config: dict[str, Any] = {"rules": [rule]}
    if where == "action":
        rule["action"] = {"queue": deep}
    elif where == "params":
        config["params"] = {"p": deep}
    else:
        config["default_action"] = {"queue": deep}
    with pytest.raises(RuleValidationError) as refused:
        check_structure(config, None)
    assert str(refused.value).endswith("routing configuration: nested deeper than 64 levels")

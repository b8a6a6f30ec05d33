"""Forbidden functions: refused at save, and disarmed by the sandbox prelude if the scanner errs."""

from __future__ import annotations

import json
from typing import Any

import jq
import pytest
from switchboard_rules import protocol as wire
from switchboard_rules import sandbox_child
from switchboard_rules import stage as rules_stage
from switchboard_rules.child import ruleset
from switchboard_rules.jqscan import FORBIDDEN_ARITIES, FORBIDDEN_FUNCTIONS, shadow_prelude
from switchboard_rules.sandbox_child import PRELUDE, RuleSet, build_program
from switchboard_rules.stage import RulesStage

from switchboard.plugin import RuleValidationError, check_structure, validate_config

ENVELOPE = {"kind": "push", "nope": None, "a": 1}
MARKER = "swb-marker-31"

#: The reported bypasses (a number's "exponent" swallowing else-NAME), their relatives, and
#: the object-key confusion (jq 1.7+ lets an if...end object value hold bare commas).
BYPASSES = [
    ("if .nope then 1else-env end", "env"),
    ("if .nope then 1else-now end", "now"),
    ("if .nope then 1else-input end", "input"),
    ("if .nope then 1else-get_search_list end", "get_search_list"),
    ("if .nope then 1else-halt_error end", "halt_error"),
    ("if .nope then 1E3else-env end", "env"),
    ("if .nope then 1.else-inputs end", "inputs"),
    ("if .nope then .5else-now end", "now"),
    ("if .nope then 1.5e+2else-localtime end", "localtime"),
    ("if .nope then 1 elif .a then 2e0else-stderr end", "stderr"),
    ("if .nope then 1e-2else(debug) end", "debug"),
    ('if .nope then 7else"\\(env)" end', "env"),
    ("[1and-input_filename]", "input_filename"),
    ("[1.e3or-input_line_number]", "input_line_number"),
    ("1as $x|-get_jq_origin", "get_jq_origin"),
    ("try error(1)catch-get_prog_origin", "get_prog_origin"),
    ("{a: if . then 1, env, 2 end}", "env"),
    ("{a: if .nope then 1 else 2, modulemeta end}", "modulemeta"),
    ("[{a: if . then 1 elif . then 2, halt, 3 end}]", "halt"),
    ('{a: if . then 1, strflocaltime("%c"), 2 end}', "strflocaltime"),
]


def rule(expr: str) -> dict[str, Any]:
    return {"id": "r1", "expr": expr, "action": {"queue": "forge"}}


@pytest.mark.parametrize(("expr", "name"), BYPASSES)
async def test_bypasses_are_refused_at_save(expr: str, name: str) -> None:
    jq.compile(expr)  # each one is real jq: libjq compiles it
    stage = RulesStage()
    with pytest.raises(RuleValidationError) as info:
        await stage.validate(check_structure({"rules": [rule(expr)]}, None))
    assert stage._sandbox is None  # refused before anything was compiled
    assert info.value.code == "forbidden_function"
    assert info.value.message == f"rule 0 (id r1): expression uses forbidden {name}"


def run(program: str) -> list[Any]:
    """Every output of ``program`` for the envelope, or the error it raised."""
    try:
        return list(
            sandbox_child.compile_program(program, {}).input_text(json.dumps([0, ENVELOPE]))
        )
    except ValueError as exc:  # a compile error: the test shows it
        return [f"compile error: {exc}"]


def call_forms() -> list[tuple[str, str]]:
    """A call of every forbidden builtin at every arity this libjq defines, and its error."""
    args = ['"%c"', "1", "2"]
    return [
        (name + (f"({'; '.join(args[:arity])})" if arity else ""),
         f"{name}/{arity} is forbidden in routing rules")
        for name, arity in sorted(FORBIDDEN_ARITIES)
    ]  # fmt: skip


@pytest.mark.parametrize(("call", "message"), call_forms())
def test_each_forbidden_builtin_raises_under_the_prelude(call: str, message: str) -> None:
    # the scanner is not involved here: build_program is what the sandbox compiles
    assert run(build_program([f"0 | {call} | tojson"], [0])) == ["e" + message]


def test_without_the_prelude_the_builtins_would_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # what the prelude prevents, shown on the same programs with it cut off
    monkeypatch.setenv("SWB_MARKER", MARKER)
    bare = build_program(["(env, $ENV) | .SWB_MARKER == $m"], [0]).replace(PRELUDE, "", 1)
    assert run(bare.replace("$m", json.dumps(MARKER))) == [True]
    assert run(build_program(["now > 1e9"], [0]).replace(PRELUDE, "", 1)) == [True]
    assert run(build_program(["halt"], [0]).replace(PRELUDE, "", 1)) == []  # stream cut


def test_env_variable_is_empty_under_the_prelude(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWB_MARKER", MARKER)
    assert run(build_program(["$ENV == {}"], [0])) == [True]
    assert run(build_program(["{$ENV} | .ENV | length == 0"], [0])) == [True]


def test_prelude_keeps_rule_semantics() -> None:
    # line numbers (compile errors, $__loc__), error messages and ordinary results
    program = build_program(["true", "$__loc__.line == 6"], [0, 1])
    assert run(program) == run(program.replace(PRELUDE, "", 1)) == [True, True]
    assert run(build_program(['error("boom")', ".a == 1"], [0, 1])) == ["eboom", True]
    assert "\n" not in PRELUDE
    with pytest.raises(ValueError, match="foo/0 is not defined at <top-level>, line 2"):
        sandbox_child.compile_program(build_program(["foo"], [0]), {})
    assert run(build_program(["def env: 1; env == 1"], [0])) == [True]  # a rule's own def wins


def test_prelude_covers_every_arity_libjq_defines() -> None:
    defined = {
        (name, int(arity))
        for name, _, arity in (
            b.rpartition("/") for b in jq.compile("builtins").input_value(None).first()
        )
        if name in FORBIDDEN_FUNCTIONS
    }
    assert defined == set(FORBIDDEN_ARITIES), "update FORBIDDEN_ARITIES for this libjq"
    for name, arity in defined:
        head = f"def {name}" + (f"({'; '.join(f'__{k}' for k in range(arity))})" if arity else "")
        assert f"{head}:" in PRELUDE
    # a newer libjq's extra arity is shadowed too, without a code change
    assert "def now(__0): error(" in shadow_prelude(["now/1", "length/0"])
    assert "length" not in shadow_prelude(["now/1", "length/0"])


def test_trial_and_zygote_compile_the_prelude(monkeypatch: pytest.MonkeyPatch) -> None:
    trials: list[str] = []

    def fake_trial(program: str, params: dict[str, Any], seconds: float) -> tuple[None, int]:
        trials.append(program)
        return None, 0

    monkeypatch.setattr(ruleset, "trial", fake_trial)  # where RuleSet looks it up
    cfg = wire.ChildConfig(
        memory_bytes=2**27, rule_ms=50, compile_ms=1000, cache_size=4, parse_s_per_byte=0.0
    )
    rules = RuleSet(["env | length == 0", ".a == 1"], {}, cfg)
    assert trials and all(p.startswith(PRELUDE) for p in trials)
    assert rules.program is not None
    # the sweep's program (every delivery's) and the rule-by-rule one both shadow env
    out = list(rules.program.input_text(json.dumps([0, ENVELOPE])))
    assert out == [[0, "eenv/0 is forbidden in routing rules"], 1]
    out = list(rules.program_for(0, 2).input_text(json.dumps([0, ENVELOPE])))
    assert out == ["eenv/0 is forbidden in routing rules", True]


@pytest.mark.anyio
async def test_scanner_bypassed_save_still_cannot_run_a_forbidden_builtin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rules_stage, "forbidden_names", lambda expr: [])  # a scanner that misses
    stage = RulesStage()
    try:
        exprs = ["env | length == 0", "now > 0", "[inputs] | length == 0", "$ENV == {}"]
        config = {"rules": [{**rule(e), "id": f"r{i}"} for i, e in enumerate(exprs)]}
        saved = await validate_config(config, None, [stage])  # the save-time compile passes
        rules = [(r["id"], r["expr"]) for r in saved.rules]
        result = await stage.sandbox.evaluate(rules, {}, ENVELOPE)
    finally:
        await stage.close()
    assert result.rule_index == 3  # $ENV == {}
    assert [(f.rule_index, f.cause) for f in result.faults] == [(i, "error") for i in range(3)]
    assert all("is forbidden in routing rules" in str(f.detail) for f in result.faults)

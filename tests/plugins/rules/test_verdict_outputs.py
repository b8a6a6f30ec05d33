"""What the rule programs may emit and what the evaluator refuses; a sweep against rule by rule.

The rule-by-rule program (``build_program``) maps each rule's first output to ``true`` or to
that falsy output itself (or an error string); the sweep's program emits only a matching
rule's index and ``[index, error]``. The evaluator's loops are the only check that nothing
else passes for a verdict, so they are tested here on programs that emit something else;
and a sweep must answer exactly what going rule by rule answers.
"""

from __future__ import annotations

import json
import signal
import socket
from typing import Any

import jq
import pytest
from switchboard_rules import protocol as wire
from switchboard_rules import sandbox_child
from switchboard_rules.sandbox_child import RuleSet, build_program

CFG = wire.ChildConfig(
    memory_bytes=2**28, rule_ms=1000, compile_ms=5000, cache_size=4, parse_s_per_byte=0.0
)
ENVELOPE = {"kind": "push", "a": 1, "nope": None, "list": [1, 2]}


def outputs(
    exprs: list[str],
    *,
    exact: bool = False,
    start: int = 0,
    stop: int | None = None,
    sweep: bool = False,
) -> list[Any]:
    program = jq.compile(
        build_program(
            exprs, list(range(len(exprs))), exact=exact, start=start, stop=stop, sweep=sweep
        )
    )
    return list(program.input_text(json.dumps([start, ENVELOPE])))


@pytest.mark.parametrize("exact", [False, True])
def test_each_rule_gives_true_false_null_or_an_error_string(exact: bool) -> None:
    exprs = [
        ".a == 1",
        ".a == 2",
        ".nope",
        ".missing.deeper",
        "empty",
        ".list[]",
        "(.list[] | . > 1)",
        '"a string"',
        "{}",
        "0",
        'error("boom")',
        "null, true",
    ]
    assert outputs(exprs, exact=exact) == [
        True,
        False,
        None,
        None,
        False,
        True,
        False,
        True,
        True,
        True,
        "eboom",
        None,
    ]
    # the sweep's program: only the matches (their index) and the errors
    assert outputs(exprs, exact=exact, sweep=True) == [0, 5, 7, 8, 9, [10, "eboom"]]


def test_a_sweep_keeps_each_rule_on_its_lines() -> None:
    loc = ["$__loc__.line"] * 4
    program = build_program(loc, [0, 1, 2, 3], sweep=True)
    for i in range(4):
        program = program.replace(f"if . then {i} else empty end", ".")
    assert list(jq.compile(program).input_text("[0, {}]")) == [2, 6, 10, 14]


def test_a_part_of_the_program_runs_only_its_rules_on_their_own_lines() -> None:
    exprs = [".a == 1", ".a == 2", ".nope", "$__loc__.line", 'error("x")']
    whole = outputs(exprs)
    assert whole == [True, False, None, True, "ex"]
    assert outputs(exprs, start=1) == whole[1:]
    assert outputs(exprs, start=1, stop=3) == whole[1:3]
    assert outputs(exprs, start=4) == whole[4:]
    assert outputs(exprs, start=5) == []
    # each rule stands on the lines it has in the whole program, whatever is left out
    loc = ["$__loc__.line"] * 4
    lines = jq.compile(build_program(loc, [0, 1, 2, 3]).replace("if . then true else . end", "."))
    assert list(lines.input_text("[0, {}]")) == [2, 6, 10, 14]
    for start in range(4):
        part = jq.compile(
            build_program(loc, [0, 1, 2, 3], start=start).replace("if . then true else . end", ".")
        )
        assert list(part.input_text("[0, {}]")) == [2, 6, 10, 14][start:]


def test_an_evaluator_goes_on_from_a_rule_with_the_rest_of_the_program() -> None:
    rules = RuleSet([".a == 2", ".nope", ".a == 1", 'error("x")'], {}, CFG)
    assert rules.program is not None  # every delivery's: the sweep's
    assert list(rules.program.input_text(json.dumps([0, ENVELOPE]))) == [2, [3, "ex"]]
    whole = rules.program_for(0, 4)  # rule by rule, made on demand, once
    assert whole is not rules.program and rules.program_for(0, 4) is whole
    assert list(whole.input_text(json.dumps([0, ENVELOPE]))) == [False, None, True, "ex"]
    rest = rules.program_for(2, 4)
    assert rest is not rules.program and rules.program_for(2, 4) is rest  # compiled once
    assert list(rest.input_text(json.dumps([2, ENVELOPE]))) == [True, "ex"]
    assert list(rules.program_for(1, 2).input_text(json.dumps([1, ENVELOPE]))) == [None]
    assert rules.program_for(4, 4) is None


def _rule_set(program: str, n: int, sweep: bool) -> RuleSet:
    rules = RuleSet([".a == 1"] * n, {}, CFG)
    if sweep:
        rules.program = jq.compile(program)  # what no wrapped rule can emit
    else:
        rules._parts[(0, n)] = jq.compile(program)
    return rules


def _run(
    mode: str,
    program: str,
    n: int = 2,
    *,
    sweep: bool = False,
    rules: RuleSet | None = None,
    envelope: Any = ENVELOPE,
) -> tuple[int | None, list[Any]]:
    """Evaluate ``envelope`` with ``program`` in place of the rule set's (or with ``rules``);
    the exit code and lines."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    page = wire.progress_page()
    try:
        header = wire.EvalHeader(0, 1000.0, mode, sweep=sweep)
        data = wire.encode_eval(header, wire.encode_envelope(envelope))
        code = sandbox_child.evaluate_one(
            theirs.fileno(), data, rules or _rule_set(program, n, sweep), CFG, page
        )
        theirs.close()
        received = b""
        while chunk := mine.recv(65536):
            received += chunk
    finally:
        mine.close()
        page.close()
    # the evaluator's loop ran in this process: it must leave no alarm armed (SIGALRM kills)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    return code, [wire.decode(line) for line in received.decode().splitlines()]


@pytest.mark.parametrize("mode", [wire.MODE_MATCH, wire.MODE_VERDICTS])
@pytest.mark.parametrize("output", ['"m"', '"n"', "1", "0", "{}", "[true]", '"z"'])
def test_the_evaluator_refuses_any_other_output_as_garbage(mode: str, output: str) -> None:
    # strings that were verdicts before (m, n, z) included: only true, false and null are
    code, lines = _run(mode, f"false, {output}")
    assert code == 3  # the evaluator exits: what ran is not a rule program it knows
    assert lines[-1] == wire.Garbage("unexpected output from rule 1")
    assert not any(isinstance(line, wire.Matched | wire.Done) for line in lines)


@pytest.mark.parametrize("mode", [wire.MODE_MATCH, wire.MODE_VERDICTS])
def test_the_same_evaluator_answers_true_false_null_and_errors(mode: str) -> None:
    code, lines = _run(mode, 'false, null, "eboom", true', n=4)
    assert code is None
    assert wire.RuleError(2, "boom") in lines
    if mode == wire.MODE_MATCH:
        assert lines[-2:] == [wire.Matched(3), wire.DONE]
    else:
        assert lines[-2:] == [wire.Verdicts(0, "nzem"), wire.DONE]


@pytest.mark.parametrize(
    "output",
    [
        '"m"',
        "true",
        "false",
        "null",
        "{}",
        "[true]",
        "7",
        "-1",
        "1.5",
        '[0, "x"]',
        "[0, 1]",
        '[9, "eboom"]',
        '[0, "e", 1]',
    ],
)
def test_a_sweep_refuses_any_other_output_as_garbage(output: str) -> None:
    # an index the rule set does not have, an error that is not one: never a verdict
    code, lines = _run(wire.MODE_MATCH, f'[0, "eok"], {output}', sweep=True)
    assert code == 3
    assert lines[-1] == wire.Garbage("unexpected output from the rules")
    assert not any(isinstance(line, wire.Matched | wire.Done) for line in lines)


def test_a_sweep_answers_errors_then_the_first_match() -> None:
    code, lines = _run(wire.MODE_MATCH, '[0, "eboom"], 1, 0', n=3, sweep=True)
    assert code is None
    assert lines == [wire.RuleError(0, "boom"), wire.Matched(1), wire.DONE]
    code, lines = _run(wire.MODE_MATCH, "empty", n=3, sweep=True)
    assert (code, lines) == (None, [wire.DONE])


RULE_SETS = [
    [".a == 2", ".nope", ".a == 1", 'error("x")'],
    ['error("first")', ".missing.deeper", "empty", ".list[]", "true"],
    ['.kind == "push" and .a == 1', "true"],
    ["(.list[] | . > 1)", "null, true", '.a | error("boom")', "false"],
    [".list | map(. * 2) | add == 6", '.kind | test("^pu")', "."],
    [".a == 1 | not", "[.list[] | select(. > 5)] | length > 0", '{} | has("x")'],
    ["$__loc__.line == 7", ".a as $x | $x == 1"],
    ["env | length > 0", "input_filename == null"],  # shadowed (an error) and allowed
    ['"unbalanced (', ".a == 1"],  # a compile error, then a match
]
ENVELOPES = [ENVELOPE, {"kind": "pull", "a": 2, "list": [3, 4, 9]}, {"a": None}, {}]


@pytest.mark.parametrize("exprs", RULE_SETS)
def test_a_sweep_answers_what_going_rule_by_rule_answers(exprs: list[str]) -> None:
    rules = RuleSet(exprs, {}, CFG)
    for envelope in ENVELOPES:
        swept = _run(wire.MODE_MATCH, "", rules=rules, envelope=envelope, sweep=True)
        by_rule = _run(wire.MODE_MATCH, "", rules=rules, envelope=envelope)
        assert swept == by_rule, (exprs, envelope)
        assert swept[0] is None and swept[1][-1] == wire.DONE


@pytest.mark.parametrize(
    ("mode", "sweep", "first"),
    [
        (wire.MODE_MATCH, True, wire.SWEEP),
        (wire.MODE_MATCH, False, wire.RULE_LIMIT),
        (wire.MODE_VERDICTS, False, wire.RULE_LIMIT),
    ],
)
def test_an_alarm_armed_with_none_pending_finds_its_rule_named(
    monkeypatch: pytest.MonkeyPatch, mode: str, sweep: bool, first: str
) -> None:
    """However soon an alarm fires after it is armed, the zygote finds what it measured.

    A busy machine can hold an evaluator between arming its alarm and naming the rule on
    its progress page for longer than the alarm (a sweep's 1 ms ``sweep_ms`` in tests).
    Armed with no alarm pending, the page must already name the sweep or the rule: else the
    zygote reports an evaluator that died running nothing, a ``sandbox_failure`` and no
    match, where the policy would have gone on rule by rule.
    """
    rules = RuleSet([".a == 2", ".a == 1"], {}, CFG)
    rules.program_for(0, 2)  # compiled before (under an alarm of its own, no rule named)
    page = wire.progress_page()
    real = signal.setitimer
    armings: list[tuple[tuple[float, float], wire.Armed | None]] = []

    def setitimer(which: int, seconds: float, interval: float = 0.0) -> Any:
        if seconds:  # what an alarm firing right after this arming would find
            armings.append((signal.getitimer(which), wire.armed_at_death(page)))
        return real(which, seconds, interval)

    monkeypatch.setattr(signal, "setitimer", setitimer)
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        header = wire.EvalHeader(0, 5000.0, mode, sweep=sweep)  # each rule its own limit
        data = wire.encode_eval(header, wire.encode_envelope(ENVELOPE))
        assert sandbox_child.evaluate_one(theirs.fileno(), data, rules, CFG, page) is None
    finally:
        mine.close()
        theirs.close()
        page.close()
    assert real(signal.ITIMER_REAL, 0) == (0.0, 0.0)
    assert armings, "no alarm was armed"
    pending, named = armings[0]
    assert pending == (0.0, 0.0) and named == wire.Armed(0, first)
    for k, (pending, named) in enumerate(armings[1:]):
        # re-armed: the last rule's alarm is pending, and its rule is named until the next is
        assert pending != (0.0, 0.0) and named == wire.Armed(k, wire.RULE_LIMIT)
    assert len(armings) == (1 if sweep else 2)

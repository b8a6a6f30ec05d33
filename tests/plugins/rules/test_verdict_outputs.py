"""What the rule program may emit (true, false, null, an error) and what the evaluator refuses.

The program (``build_program``) maps each rule's first output to ``true`` or to that falsy
output itself; the evaluator's loops are the only check that nothing else passes for a
verdict, so they are tested here on programs that emit something else.
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

CFG = wire.ChildConfig(memory_bytes=2**28, rule_ms=1000, compile_ms=5000, cache_size=4,
                       parse_s_per_byte=0.0)
ENVELOPE = {"kind": "push", "a": 1, "nope": None, "list": [1, 2]}


def outputs(exprs: list[str], *, exact: bool = False, start: int = 0,
            stop: int | None = None) -> list[Any]:
    program = jq.compile(build_program(exprs, list(range(len(exprs))), exact=exact,
                                       start=start, stop=stop))
    return list(program.input_text(json.dumps([start, ENVELOPE])))


@pytest.mark.parametrize("exact", [False, True])
def test_each_rule_gives_true_false_null_or_an_error_string(exact: bool) -> None:
    exprs = [".a == 1", ".a == 2", ".nope", ".missing.deeper", "empty", ".list[]",
             "(.list[] | . > 1)", '"a string"', "{}", "0", 'error("boom")', "null, true"]
    assert outputs(exprs, exact=exact) == [
        True, False, None, None, False, True, False, True, True, True, "eboom", None]


def test_a_part_of_the_program_runs_only_its_rules_on_their_own_lines() -> None:
    exprs = [".a == 1", ".a == 2", ".nope", "$__loc__.line", "error(\"x\")"]
    whole = outputs(exprs)
    assert whole == [True, False, None, True, "ex"]
    assert outputs(exprs, start=1) == whole[1:]
    assert outputs(exprs, start=1, stop=3) == whole[1:3]
    assert outputs(exprs, start=4) == whole[4:]
    assert outputs(exprs, start=5) == []
    # each rule stands on the lines it has in the whole program, whatever is left out
    loc = ["$__loc__.line"] * 4
    lines = jq.compile(build_program(loc, [0, 1, 2, 3]).replace("if . then true else . end",
                                                                  "."))
    assert list(lines.input_text("[0, {}]")) == [2, 6, 10, 14]
    for start in range(4):
        part = jq.compile(build_program(loc, [0, 1, 2, 3], start=start).replace(
            "if . then true else . end", "."))
        assert list(part.input_text("[0, {}]")) == [2, 6, 10, 14][start:]


def test_an_evaluator_goes_on_from_a_rule_with_the_rest_of_the_program() -> None:
    rules = RuleSet([".a == 2", ".nope", ".a == 1", "error(\"x\")"], {}, CFG)
    assert rules.program_for(0, 4) is rules.program  # every delivery's program
    rest = rules.program_for(2, 4)
    assert rest is not rules.program and rules.program_for(2, 4) is rest  # compiled once
    assert list(rest.input_text(json.dumps([2, ENVELOPE]))) == [True, "ex"]
    assert list(rules.program_for(1, 2).input_text(json.dumps([1, ENVELOPE]))) == [None]
    assert rules.program_for(4, 4) is None


def _rule_set(program: str, n: int) -> RuleSet:
    rules = RuleSet([".a == 1"] * n, {}, CFG)
    rules.program = jq.compile(program)  # what no wrapped rule can emit
    return rules


def _run(mode: str, program: str, n: int = 2) -> tuple[int | None, list[Any]]:
    """Evaluate ENVELOPE with ``program`` in place of the rule set's; the exit code and lines."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    page = wire.progress_page()
    try:
        header = wire.EvalHeader(0, 1000.0, mode)
        data = wire.encode_eval(header, wire.encode_envelope(ENVELOPE))
        code = sandbox_child.evaluate_one(theirs.fileno(), data, _rule_set(program, n), CFG,
                                          page)
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

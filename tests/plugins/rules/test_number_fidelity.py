"""The number texts a rule sees, through the real sandbox, beside jq's own (README table)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jq
import pytest
from sbsandbox import sandbox

from switchboard.plugins import build_registries, make_plugin_manager
from switchboard.routing.envelope import build_envelope
from switchboard.routing.model import MatchResult

pytestmark = pytest.mark.anyio

README = Path(__file__).resolve().parents[3] / "README.md"

#: (the body's number text, ``.payload.n | tostring`` in a rule, ``.n | tostring`` by jq on
#: the body). The rule sees the parsed value written out again (Python's float text, which
#: jq then keeps), where jq on the body keeps the body's own literal; the README's rules
#: section has this table.
ROWS = [
    ("-0", "0", "-0"),
    ("1.000", "1.0", "1.000"),
    ("1E2", "100.0", "1E+2"),
    ("1e1000", "1.7976931348623157E+308", "1E+1000"),
    ("-1e1000", "-1.7976931348623157E+308", "-1E+1000"),
    ("1e-400", "0.0", "1E-400"),
    ("3.14159265358979323846", "3.141592653589793", "3.14159265358979323846"),
]
#: Texts a rule sees as jq does: -0.0 and integers past 64 bits are kept.
SAME = ["-0.0", "0.5", "12345678901234567890123", "-12345678901234567890123"]


def _body(number: str) -> bytes:
    return b'{"n": ' + number.encode() + b"}"


def _envelopes(number: str) -> list[dict[str, Any]]:
    """The envelope of a delivery of ``{"n": number}``: live, and a stored one's dry run."""
    projections = build_registries(make_plugin_manager()).projections
    return [
        build_envelope(
            source="generic",
            kind=None,
            webhook_id="wh_1",
            trust_mode="token",
            verified=False,
            content_type="application/json",
            headers={},
            body=_body(number),
            projections=projections,
            keep_text=keep_text,
        )
        for keep_text in (False, True)
    ]


def _jq(number: str) -> str:
    """``.n | tostring`` by jq on the body's own text (libjq, the version the sandbox runs)."""
    return str(jq.compile(".n | tostring").input_text(_body(number).decode()).first())


async def _seen(number: str) -> list[str]:
    """What ``.payload.n | tostring`` gives a rule in the sandbox, for each envelope."""
    seen = []
    async with sandbox() as sb:
        for envelope in _envelopes(number):
            result = await sb.evaluate([("n", ".payload.n | tostring | error")], {}, envelope)
            [fault] = result.faults
            assert fault.cause == "error", fault
            seen.append(str(fault.detail))
    return seen


@pytest.mark.parametrize("number,rule_sees,jq_prints", ROWS, ids=[r[0] for r in ROWS])
async def test_what_a_rule_sees(number: str, rule_sees: str, jq_prints: str) -> None:
    assert await _seen(number) == [rule_sees, rule_sees]
    rule = [("r", f".payload.n | tostring == {json.dumps(rule_sees)}")]
    async with sandbox() as sb:
        for envelope in _envelopes(number):
            assert await sb.evaluate(rule, {}, envelope) == MatchResult(0)
    assert _jq(number) == jq_prints
    assert f"| `{number}` | `{rule_sees}` | `{jq_prints}` |" in README.read_text("utf-8"), "README"


@pytest.mark.parametrize("number", SAME)
async def test_what_a_rule_sees_as_jq_does(number: str) -> None:
    assert await _seen(number) == [number, number]
    assert _jq(number) == number

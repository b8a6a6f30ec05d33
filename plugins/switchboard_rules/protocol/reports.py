"""Report lines: what evaluators and zygotes tell the server, one line each, and verdict chars."""

from __future__ import annotations

import json
from dataclasses import dataclass

#: How an armed rule is limited: by its own ``rule_ms``, or by what is left of the budget.
RULE_LIMIT = "t"
BUDGET_LIMIT = "b"
#: Or armed for a sweep: every rule from this one on, together within one ``rule_ms``. A
#: sweep that finishes in time kept each of its rules within its limit; one that does
#: not (its alarm, or a crash) has named no rule, so the server runs the envelope again
#: rule by rule, which names it, and has that rule set go rule by rule from then on.
SWEEP = "s"

# Report lines are made and read per rule, on every evaluation's path: plain (unfrozen)
# dataclasses, which are quicker to build, and still equal only to their own kind.


@dataclass
class Pid:
    pid: int

    def encode(self) -> str:
        return f"p {self.pid}\n"


@dataclass
class CompileError:
    index: int
    message: str

    def encode(self) -> str:
        return f"c {self.index} {json.dumps(self.message)}\n"


@dataclass
class Armed:
    index: int
    how: str  #: RULE_LIMIT, BUDGET_LIMIT or SWEEP

    def encode(self) -> str:
        return f"a {self.index} {self.how}\n"


@dataclass
class Matched:
    index: int

    def encode(self) -> str:
        return f"r {self.index} m\n"


@dataclass
class NoMatch:
    index: int

    def encode(self) -> str:
        return f"r {self.index} n\n"


@dataclass
class RuleError:
    index: int
    message: str

    def encode(self) -> str:
        return f"r {self.index} e {json.dumps(self.message)}\n"


@dataclass
class BudgetSpent:
    index: int

    def encode(self) -> str:
        return f"b {self.index}\n"


@dataclass
class Garbage:
    message: str

    def encode(self) -> str:
        return f"g {json.dumps(self.message)}\n"


@dataclass
class Verdicts:
    item: int  #: the envelope's position in its frame
    verdicts: str  #: one ``VERDICT_*`` character per rule, from the frame's start

    def encode(self) -> str:
        return f"v {self.item} {self.verdicts}\n"


@dataclass
class Done:
    def encode(self) -> str:
        return "d\n"


@dataclass
class Exited:
    status: int  #: the exit code, or minus the signal that killed the evaluator

    def encode(self) -> str:
        return f"x {self.status}\n"


Report = (
    Pid
    | CompileError
    | Armed
    | Matched
    | NoMatch
    | RuleError
    | BudgetSpent
    | Garbage
    | Done
    | Exited
    | Verdicts
)
DONE = Done()


def decode(line: str) -> Report:
    """One report line (without its newline); ValueError when it is not one."""
    kind, _, rest = line.partition(" ")
    if kind == "a":
        index, _, how = rest.partition(" ")
        if how not in (RULE_LIMIT, BUDGET_LIMIT, SWEEP):
            raise ValueError(line)
        return Armed(int(index), how)
    if kind == "r":
        index, _, verdict = rest.partition(" ")
        if verdict == "n":
            return NoMatch(int(index))
        if verdict == "m":
            return Matched(int(index))
        if verdict.startswith("e "):
            return RuleError(int(index), str(json.loads(verdict[2:])))
        raise ValueError(line)
    if kind == "p":
        return Pid(int(rest))
    if kind == "c":
        index, _, msg = rest.partition(" ")
        return CompileError(int(index), str(json.loads(msg)))
    if kind == "b":
        return BudgetSpent(int(rest))
    if kind == "g":
        return Garbage(str(json.loads(rest)))
    if kind == "d" and not rest:
        return DONE
    if kind == "x":
        return Exited(int(rest))
    if kind == "v":
        item, _, chars = rest.partition(" ")
        if chars.strip(VERDICT_CHARS):
            raise ValueError(line)
        return Verdicts(int(item), chars)
    raise ValueError(line)


# -- verdicts mode: one character per rule ------------------------------------------------------

VERDICT_MATCH = "m"  #: the first output was truthy
VERDICT_FALSE = "n"  #: the first output was false, or there was none
VERDICT_NULL = "z"  #: the first output was null
VERDICT_ERROR = "e"  #: the rule raised (its message came in an ``r I e`` line)
VERDICT_COMPILE = "c"  #: the rule does not compile (its message came in a ``c`` line)
VERDICT_BUDGET = "b"  #: the event's budget was spent before this rule began
VERDICT_SKIPPED = "-"  #: not asked for (after ``only``)
VERDICT_CHARS = "mnzecb-"

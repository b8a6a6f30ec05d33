"""The sandbox's argv and control socket: the child's limits, requests to the fork server."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class ChildConfig:
    """The limits the fork server hands down to its zygotes and evaluators (argv, JSON)."""

    memory_bytes: int  #: RLIMIT_AS of every zygote (and so of its evaluators)
    rule_ms: int  #: one rule's alarm
    compile_ms: int  #: a rule set's whole compile (every trial together), one deadline
    cache_size: int  #: zygotes kept (one per rule set, least recently used goes first)
    parse_s_per_byte: float  #: time allowed to parse the envelope, per byte
    ruleset_bytes: int = 16 * 2**20  #: the most a compiled rule set may add to its zygote
    budget_bytes: int = 512 * 2**20  #: the whole tree's proportional set size (PSS)
    retire_bytes: int = 16 * 2**20  #: an evaluator that grew by more exits after answering
    #: a sweep's alarm; 0 (always, but in tests): one rule's, ``rule_ms``
    sweep_ms: int = 0
    #: how long a zygote may take to take up a request (its compile included) before the
    #: fork server kills it as broken (stopped, or hung); 0: never
    takeup_ms: int = 0

    def encode(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def decode(cls, text: str) -> ChildConfig:
        doc = json.loads(text)
        return cls(
            memory_bytes=int(doc["memory_bytes"]),
            rule_ms=int(doc["rule_ms"]),
            compile_ms=int(doc["compile_ms"]),
            cache_size=int(doc["cache_size"]),
            parse_s_per_byte=float(doc["parse_s_per_byte"]),
            ruleset_bytes=int(doc["ruleset_bytes"]),
            budget_bytes=int(doc["budget_bytes"]),
            retire_bytes=int(doc["retire_bytes"]),
            sweep_ms=int(doc["sweep_ms"]),
            takeup_ms=int(doc["takeup_ms"]),
        )


#: The fork server's first (and only unprompted) message on the control socket.
READY = b"ready"
#: Request operations: start an evaluator serving the attached socket; only report the rule
#: set's compile errors; mark a rule set as used (no socket attached: keeps it off the
#: eviction list while its evaluators, which the fork server never sees, are busy).
SPAWN = "spawn"
COMPILE = "compile"
TOUCH = "touch"
#: A zygote's word to the fork server on its control socket, once per request it took up
#: (answered a compile, forked an evaluator, or refused the request); and the fork server's
#: to the server, once per request with a socket it handed on (or refused).
TAKEN = b"t"


@dataclass(frozen=True)
class Request:
    """One control message, carrying the request socket; ``key`` names the rule set."""

    op: str
    key: str

    def encode(self) -> bytes:
        return json.dumps({"op": self.op, "key": self.key}).encode()

    @classmethod
    def decode(cls, data: bytes) -> Request:
        doc = json.loads(data)
        return cls(str(doc["op"]), str(doc["key"]))

"""The sandbox's protocol: every message between the server and the processes running jq.

Imported by both sides: :mod:`.sandbox` (the server) and :mod:`.sandbox_child` (the fork
server, its zygotes, their evaluators). Standard library only, so the child starts fast.

Who says what to whom::

    server ── argv ────────────────────────▶ fork server  ChildConfig (JSON), at start
    server ◀─ control socket ─────────────── fork server  READY, once jq is imported
    server ── control socket + one fd ─────▶ fork server ─▶ zygote   Request; EOF: shut down
    server ── control socket ──────────────▶ fork server  Request(TOUCH): a rule set in use
    server ── request socket (that fd) ────▶ zygote       frame: the rule set (spec)
    server ── request socket ──────────────▶ evaluator    frames: EvalHeader line + envelope
    server ◀─ request socket ─── evaluator or zygote      report lines, until Done or Exited
    zygote ◀─ progress page (shared memory) ─ evaluator   the rule armed right now
    zygote ◀─ pipe ────────────────────────── trial child  whether a program compiled, its size
    evaluator ◀─ libjq output ─────────────── rule program  one verdict per rule (JQ_*)

The control socket is SEQPACKET (one message per request, the request socket attached as
SCM_RIGHTS); a request socket is a STREAM socket carrying length-prefixed frames towards the
child and newline-terminated report lines back. A SPAWN request's socket stays with its
evaluator for many evaluations: one frame in, report lines out until ``d``, and again, until
the server closes it, the evaluator retires, or it dies (then the zygote reports ``x``).
A zygote that is evicted shuts its evaluators' sockets for reading: an idle evaluator sees
EOF and exits, a busy one finishes its evaluation first, and the server's next write fails.
Report lines, in the order they may come during one evaluation:

=====================  ==================================================================
``p PID``              :class:`Pid`: the evaluator's pid, once, as it starts (the server
                       kills it at the hard deadline)
``c I MSG``            :class:`CompileError`: rule I does not compile (MSG is JSON)
``a I t`` / ``a I b``  :class:`Armed`: rule I was running under its own limit (``t``) or
                       under what is left of the event's budget (``b``): only ever
                       reported by the zygote, read from the progress page, when the
                       evaluator died mid-rule
``r I m``              :class:`Matched`: rule I matched
``r I n``              :class:`NoMatch`: rule I did not match (the decoder accepts it; an
                       evaluator sends only what the server needs: a match, errors, the end)
``r I e MSG``          :class:`RuleError`: rule I raised (MSG is JSON), sent at once
``b I``                :class:`BudgetSpent`: the budget was spent before rule I began
``g MSG``              :class:`Garbage`: the evaluator gave up (MSG is JSON) and exits
``d``                  :class:`Done`: every rule that was started has a verdict; the
                       evaluator waits for its next frame
``x STATUS``           :class:`Exited`: the zygote saw the evaluator exit (exit code, or
                       minus the signal); preceded by ``a I t|b`` when it died mid-rule
``v K CHARS``          :class:`Verdicts`: (verdicts mode) item K's verdict on every rule
                       from the frame's start, one character each (see ``VERDICT_*``);
                       preceded by an ``r I e MSG`` line per rule of item K that raised
=====================  ==================================================================

A *verdicts* frame (``EvalHeader.mode == "v"``, history diffs and "why not") carries many
envelopes, one per line after the header, and asks for every rule's verdict on each rather
than the first match: the evaluator answers one ``v`` line per envelope, in order, each
under the same per-rule alarm and per-event budget as a live evaluation, then ``d``. The
first envelope starts at the header's ``start``, the others at rule 0; ``only`` (when set)
stops each envelope after that rule. One message in, one line per envelope out: hundreds
of events per wake-up.

One evaluation of a warm evaluator is one frame in and, unless a rule errs, one message
out (its compile errors, then ``r I m``, ``b I`` or nothing, then ``d``): the server wakes
up once per evaluation and reads one line per rule only when rules fault.
"""

from __future__ import annotations

import functools
import json
import mmap
import socket
import struct
from dataclasses import asdict, dataclass
from typing import Any

# -- argv and the control socket -------------------------------------------------------------


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
        )


#: The fork server's first (and only unprompted) message on the control socket.
READY = b"ready"
#: Request operations: start an evaluator serving the attached socket; only report the rule
#: set's compile errors; mark a rule set as used (no socket attached: keeps it off the
#: eviction list while its evaluators, which the fork server never sees, are busy).
SPAWN = "spawn"
COMPILE = "compile"
TOUCH = "touch"


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


# -- frames on the request socket ------------------------------------------------------------

_LENGTH = struct.Struct(">I")


def frame(data: bytes) -> bytes:
    """``data`` prefixed with its length (4 bytes, big-endian)."""
    return _LENGTH.pack(len(data)) + data


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("request socket closed")
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket) -> bytes:
    """The next frame's data from a blocking socket (EOFError when it closes first)."""
    (n,) = _LENGTH.unpack(_read_exact(sock, _LENGTH.size))
    return _read_exact(sock, n)


def encode_spec(exprs: list[str], params: dict[str, Any]) -> bytes:
    """A rule set, canonically: the same rules and params always give the same bytes."""
    return json.dumps({"exprs": exprs, "params": params}, sort_keys=True).encode()


def decode_spec(data: bytes) -> tuple[list[str], dict[str, Any]]:
    doc = json.loads(data)
    return list(doc["exprs"]), dict(doc["params"])


#: ``EvalHeader.mode``: the first match (live routing), the first match of each of several
#: envelopes (concurrent live deliveries of one rule set), or every rule's verdict (history).
MODE_MATCH = ""
MODE_MANY = "m"
MODE_VERDICTS = "v"


@dataclass(frozen=True)
class EvalHeader:
    """Where an evaluation starts and how much of the event's budget it has left.

    ``mode`` is :data:`MODE_MATCH` (one envelope, the first match), :data:`MODE_MANY`
    (one envelope per line, each answered as in match mode, its own ``budget_ms``, in
    turn: each answer ends with its done line) or :data:`MODE_VERDICTS` (one envelope per
    line, every rule's verdict; ``only`` stops each envelope after that rule).

    ``sweep`` (match and many modes, from rule 0): each envelope's rules run in one go
    under one alarm of ``rule_ms`` (see :data:`SWEEP`), rather than one by one.
    """

    start: int
    budget_ms: float
    mode: str = MODE_MATCH
    only: int | None = None
    sweep: bool = False


def encode_envelope(envelope: dict[str, Any]) -> bytes:
    """The envelope as the evaluator reads it: compact JSON, UTF-8, on one line.

    An envelope holding its payload's JSON text (``payload_json``: a stored delivery's
    body, proven to read as its payload value, without raw newlines) gets that text in
    place of the payload written out again: what jq reads is the same, for less work.
    """
    text = getattr(envelope, "payload_json", None)
    if text is None or "payload" not in envelope:
        return _ENCODER.encode(envelope).encode()
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    side = before
    for key, value in envelope.items():
        if key == "payload":
            side = after
        else:
            side[key] = value
    head = _ENCODER.encode(before)[:-1] + ("," if before else "")
    tail = ("," if after else "") + _ENCODER.encode(after)[1:]
    return b"".join((head.encode(), b'"payload":', text, tail.encode()))


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def encode_eval(header: EvalHeader, envelope: bytes) -> bytes:
    """The evaluator's frame data: the header as one JSON line, then the encoded envelope."""
    return _header_line(header) + envelope


@functools.lru_cache(maxsize=256)
def _header_line(header: EvalHeader) -> bytes:
    # remembered: nearly every delivery sends the same first header (rule 0, the whole budget)
    doc: dict[str, Any] = {"start": header.start, "budget_ms": header.budget_ms}
    if header.mode:
        doc["mode"] = header.mode
    if header.only is not None:
        doc["only"] = header.only
    if header.sweep:
        doc["sweep"] = True
    return json.dumps(doc).encode() + b"\n"


def encode_verdicts_eval(header: EvalHeader, envelopes: list[bytes]) -> bytes:
    """A many or verdicts frame's data: the header line, then one encoded envelope per line.

    :func:`encode_envelope` never writes a raw newline (JSON escapes them in strings).
    """
    return encode_eval(header, b"\n".join(envelopes))


def decode_eval(data: bytes) -> tuple[EvalHeader, bytes]:
    head, _, envelope = data.partition(b"\n")
    doc = json.loads(head)
    only = doc.get("only")
    return EvalHeader(
        int(doc["start"]),
        float(doc["budget_ms"]),
        str(doc.get("mode", "")),
        None if only is None else int(only),
        doc.get("sweep") is True,
    ), envelope


# -- report lines ----------------------------------------------------------------------------

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


# -- the progress page (zygote and evaluator) -------------------------------------------------

#: The armed rule's index (-1: none), how it is limited, and b"1" once the evaluator finished.
_PROGRESS = struct.Struct("<icc")


def progress_page() -> mmap.mmap:
    """A fresh page shared across the fork: nothing armed, not finished."""
    page = mmap.mmap(-1, _PROGRESS.size)
    _PROGRESS.pack_into(page, 0, -1, b"-", b"0")
    return page


#: How the evaluator arms rule I on the page: ``pack_progress(page, 0, I, how, b"0")``
#: (``how`` is RULE_LIMIT, BUDGET_LIMIT or SWEEP as bytes). The struct's own method: no wrapper
#: call, no Armed object, on the per-rule hot path.
pack_progress = _PROGRESS.pack_into


def finish_progress(page: mmap.mmap) -> None:
    _PROGRESS.pack_into(page, 0, -1, b"-", b"1")


def armed_at_death(page: mmap.mmap) -> Armed | None:
    """The rule an evaluator was running when it died (None when it finished or never began)."""
    index, how, finished = _PROGRESS.unpack_from(page, 0)
    if finished == b"0" and index >= 0:
        return Armed(index, how.decode())
    return None


# -- the trial pipe (zygote and its trial child) ---------------------------------------------

_TRIAL_COMPILED = b"K"
_TRIAL_ERROR = b"E"


def encode_trial(error: str | None, size: int = 0) -> bytes:
    """What a trial child writes: compiled (``error`` None) taking ``size`` bytes, or why not."""
    if error is None:
        return _TRIAL_COMPILED + str(size).encode()
    return _TRIAL_ERROR + error.encode("utf-8", "replace")


def decode_trial(data: bytes) -> tuple[str | None, int]:
    """(None, size) when the program compiled, else (the error, 0).

    ValueError when the child died before it answered.
    """
    if data.startswith(_TRIAL_COMPILED) and data[1:].isdigit():
        return None, int(data[1:])
    if data.startswith(_TRIAL_ERROR):
        return data[len(_TRIAL_ERROR) :].decode("utf-8", "replace"), 0
    raise ValueError("the trial child gave no answer")


# -- the rule program's output (inside the evaluator) ----------------------------------------

#: What the jq program the evaluator runs emits for each rule: ``true`` (a match),
#: ``false`` (no match), ``null`` (no match either; "why not" tells it from false), or an
#: error: this prefix, then the message. Anything else is garbage (never a verdict). A
#: sweep's program emits only a matching rule's index, and ``[index, error]`` for a rule
#: that raised.
JQ_ERROR = "e"
#: The longest verdict string the program emits (an error message is cut there).
JQ_VERDICT_MAX = 600

# -- verdicts mode: one character per rule ------------------------------------------------------

VERDICT_MATCH = "m"  #: the first output was truthy
VERDICT_FALSE = "n"  #: the first output was false, or there was none
VERDICT_NULL = "z"  #: the first output was null
VERDICT_ERROR = "e"  #: the rule raised (its message came in an ``r I e`` line)
VERDICT_COMPILE = "c"  #: the rule does not compile (its message came in a ``c`` line)
VERDICT_BUDGET = "b"  #: the event's budget was spent before this rule began
VERDICT_SKIPPED = "-"  #: not asked for (after ``only``)
VERDICT_CHARS = "mnzecb-"

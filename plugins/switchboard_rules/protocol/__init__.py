"""The sandbox's protocol: every message between the server and the processes running jq.

Imported by both sides: the server (:mod:`.sandbox`, through its :mod:`.pool` and
:mod:`.wire`) and :mod:`.sandbox_child` (the fork server, its zygotes, their evaluators).
Standard library only, so the child starts fast.

Who says what to whom::

    server ── argv ────────────────────────▶ fork server  ChildConfig (JSON), at start
    server ◀─ control socket ─────────────── fork server  READY, once jq is imported
    server ── control socket + one fd ─────▶ fork server ─▶ zygote   Request; EOF: shut down
    server ◀─ control socket ─────────────── fork server  TAKEN, once per request handed on
    fork server ◀─ zygote's control socket ─ zygote       TAKEN, once per request taken up
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

The messages live in one module per channel, re-exported here: :mod:`.control` (argv and the
control socket), :mod:`.frames` (the request socket's frames), :mod:`.reports` (report lines
and verdict characters), :mod:`.inner` (the progress page, the trial pipe, the rule program's
output).
"""

from __future__ import annotations

from .control import COMPILE, READY, SPAWN, TAKEN, TOUCH, ChildConfig, Request
from .frames import (
    MODE_MANY,
    MODE_MATCH,
    MODE_VERDICTS,
    EvalHeader,
    decode_eval,
    decode_spec,
    encode_envelope,
    encode_eval,
    encode_spec,
    encode_verdicts_eval,
    frame,
    read_frame,
)
from .inner import (
    JQ_ERROR,
    JQ_VERDICT_MAX,
    armed_at_death,
    decode_trial,
    encode_trial,
    finish_progress,
    pack_progress,
    progress_page,
)
from .reports import (
    BUDGET_LIMIT,
    DONE,
    RULE_LIMIT,
    SWEEP,
    VERDICT_BUDGET,
    VERDICT_CHARS,
    VERDICT_COMPILE,
    VERDICT_ERROR,
    VERDICT_FALSE,
    VERDICT_MATCH,
    VERDICT_NULL,
    VERDICT_SKIPPED,
    Armed,
    BudgetSpent,
    CompileError,
    Done,
    Exited,
    Garbage,
    Matched,
    NoMatch,
    Pid,
    Report,
    RuleError,
    Verdicts,
    decode,
)

__all__ = [
    "BUDGET_LIMIT",
    "COMPILE",
    "DONE",
    "JQ_ERROR",
    "JQ_VERDICT_MAX",
    "MODE_MANY",
    "MODE_MATCH",
    "MODE_VERDICTS",
    "READY",
    "RULE_LIMIT",
    "SPAWN",
    "SWEEP",
    "TAKEN",
    "TOUCH",
    "VERDICT_BUDGET",
    "VERDICT_CHARS",
    "VERDICT_COMPILE",
    "VERDICT_ERROR",
    "VERDICT_FALSE",
    "VERDICT_MATCH",
    "VERDICT_NULL",
    "VERDICT_SKIPPED",
    "Armed",
    "BudgetSpent",
    "ChildConfig",
    "CompileError",
    "Done",
    "EvalHeader",
    "Exited",
    "Garbage",
    "Matched",
    "NoMatch",
    "Pid",
    "Report",
    "Request",
    "RuleError",
    "Verdicts",
    "armed_at_death",
    "decode",
    "decode_eval",
    "decode_spec",
    "decode_trial",
    "encode_envelope",
    "encode_eval",
    "encode_spec",
    "encode_trial",
    "encode_verdicts_eval",
    "finish_progress",
    "frame",
    "pack_progress",
    "progress_page",
    "read_frame",
]

"""Inside the child: the progress page, the trial pipe, and what the rule program emits."""

from __future__ import annotations

import mmap
import struct

from .reports import Armed

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

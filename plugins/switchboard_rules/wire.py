"""The server's end of the protocol: a frame sent to an evaluator, its report lines folded."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import Sequence

from . import protocol as proto
from .policy import Attempt
from .resume import HARD_DEADLINE


def parse_line(line: str, att: Attempt, now: float) -> None:
    """Fold one report line into ``att``; anything unexpected marks it garbage."""
    try:
        msg = proto.decode(line)
    except ValueError:
        att.garbage = f"unreadable sandbox output: {line[:80]!r}"
        return
    match msg:  # the per-rule lines first
        case proto.Armed(index, how):
            att.armed = (index, how)
            att.first_arm = att.first_arm or now
        case proto.NoMatch():
            att.armed = None
        case proto.Matched(index):
            att.matched = index
            att.armed = None
        case proto.RuleError(index, message):
            att.errors.append((index, message))
            att.armed = None
        case proto.Pid(pid):
            att.pid = pid
        case proto.CompileError(index, message):
            att.compile_errors[index] = message
        case proto.BudgetSpent(index):
            att.budget_at = index
        case proto.Verdicts(_, chars):
            att.items.append((chars, dict(att.errors)))
            att.errors = []
            att.armed = None
        case proto.Done():
            att.done = True
        case proto.Exited(status):
            att.status = status
        case proto.Garbage(message):
            att.garbage = message


async def exchange(
    sock: socket.socket,
    body: bytes,
    deadline: float,
    att: Attempt | None = None,
    rest: Sequence[Attempt] = (),
) -> Attempt:
    """Send ``body`` and collect the answer into ``att`` until done, death or ``deadline``.

    The budget is timed from the send (``first_arm``): an evaluator answers once, at
    the end, so queueing and parsing count against the event, never in its favour.
    With ``rest`` (a frame of several envelopes), the lines after each done line go to
    the next attempt, timed from that done line; a death or the deadline lands on the
    attempt being answered then.
    """
    loop = asyncio.get_running_loop()
    att = att or Attempt()
    atts = [att, *rest]
    j, cur = 0, att
    cur.first_arm = loop.time()
    try:
        buf = b""
        async with asyncio.timeout_at(deadline):
            if body:
                # Never an empty send: a compile sends nothing more, and its zygote may have
                # answered and closed already, when even a zero-byte send fails with EPIPE
                # although the answer waits, complete, in the receive buffer. The send is
                # under the deadline too: a frame larger than the socket's buffer waits for
                # the evaluator to read it, and a frozen one never does.
                await loop.sock_sendall(sock, body)
            while not cur.done and cur.status is None and cur.garbage is None:
                chunk = await loop.sock_recv(sock, 65536)
                if not chunk:
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                now = loop.time()
                for raw in lines:
                    parse_line(raw.decode("utf-8", "replace"), cur, now)
                    if cur.done and j + 1 < len(atts):
                        cur.ended = now
                        j += 1
                        cur = atts[j]
                        cur.first_arm = now
    except TimeoutError:
        if att.pid is not None and not cur.done and cur.status is None:
            try:
                os.kill(att.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        cur.garbage = HARD_DEADLINE
    except OSError as exc:
        cur.garbage = f"sandbox unreachable: {exc}"
    cur.ended = loop.time()
    return att

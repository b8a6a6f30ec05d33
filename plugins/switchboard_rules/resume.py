"""Which attempts an evaluation makes after an evaluator failed: the resume policy (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from .policy import Attempt, swept_out

# :func:`.policy.judge` decides what the attempts made for an event mean; these decide which
# attempts there are: whether a failed evaluator's attempt is the answer or is made again by
# another evaluator, whether an envelope of a frame goes on from its attempt there, whether
# the next attempt sweeps, and how far sweeps that ran out move the event's deadline.

#: An attempt's garbage when the server killed its evaluator at the hard deadline.
HARD_DEADLINE = "sandbox missed its hard deadline"


def began(att: Attempt) -> bool:
    """Whether an evaluator had begun on the envelope ``att`` is for (said anything of it)."""
    return bool(
        att.done
        or att.armed is not None
        or att.errors
        or att.items
        or att.matched is not None
        or att.budget_at is not None
    )


def answered(att: Attempt, *, fresh: bool) -> bool:
    """Whether a failed evaluator's attempt is the answer (for the policy to judge).

    It is when the evaluator began, missed the hard deadline, or was new (``fresh``) and
    exited. Otherwise it never began (a warm one that had exited meanwhile, a new one whose
    socket broke) and another evaluator makes the attempt again.
    """
    return began(att) or att.garbage == HARD_DEADLINE or (fresh and att.status is not None)


def carried(att: Attempt) -> bool:
    """Whether an envelope of a frame goes on from its attempt there, or alone from the start.

    It goes on when its evaluator began on it or the frame missed its hard deadline on it;
    an envelope after a death in the frame was never begun.
    """
    return began(att) or att.garbage == HARD_DEADLINE


def sweeps(tried: Sequence[Attempt], *, by_rule: bool) -> bool:
    """Whether the next attempt sweeps: only an event's first, unless its rule set goes by rule."""
    return not tried and not by_rule


def swept_s(tried: Sequence[Attempt]) -> float:
    """Seconds that sweeps which ran out spent: they cost the event nothing, so its deadline
    moves on by them."""
    return sum(a.ran_s for a in tried if swept_out(a))

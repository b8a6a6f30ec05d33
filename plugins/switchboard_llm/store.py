"""The LLM plugin's SQL: endpoints' triage settings and the shared prompt budget.

Both tables are this plugin's own (``migrations/``); queries run on the host's pool
(``runtime.store.db``), so every worker of every server counts against the same rows.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from switchboard.plugin import Runtime

MINUTE = "minute"
DAY = "day"

#: The start of the current window, on the database's clock (one clock for every worker).
_WINDOW = {
    MINUTE: "date_trunc('minute', now())",
    DAY: "date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'",
}

# One prompt more in the window, holding the call's estimated tokens, unless the window
# already holds ``limit`` prompts, or (with a token budget) its spent tokens plus those held
# by calls in flight plus this call's estimate would pass ``tokens``. The conflict path
# locks the row and re-checks against its latest version, so two workers reserving at once
# queue on the row and never both take the last prompt or the last tokens.
_RESERVE = """
    INSERT INTO llm_triage_budget AS b (endpoint_id, span, window_start, used, reserved)
    VALUES (%(endpoint)s, %(span)s, {window}, 1, %(estimate)s)
    ON CONFLICT (endpoint_id, span, window_start)
    DO UPDATE SET used = b.used + 1, reserved = b.reserved + %(estimate)s
    WHERE b.used < %(limit)s AND (%(tokens)s::bigint IS NULL OR b.used = 0
                                  OR b.tokens + b.reserved + %(estimate)s <= %(tokens)s::bigint)
    RETURNING b.used, b.window_start
"""

#: What a refused reservation ran out of: the window's prompts, or its tokens; or
#: (``HELD``) tokens that calls in flight hold now and may give back when they settle.
PROMPTS = "prompts"
TOKENS = "tokens"
HELD = "held"

#: A call's completion, when nothing is known yet about the endpoint's calls and the
#: provider sets no ``max_tokens``: the answer is one small JSON object.
_COMPLETION_GUESS = 256


@dataclass(frozen=True)
class Reservation:
    """A granted call: the windows it was counted in and the tokens it holds there."""

    windows: tuple[Any, ...]
    estimate: int


#: Windows older than this are deleted when an endpoint opens a new minute.
_KEEP = "interval '2 days'"


class _Refused(Exception):
    def __init__(self, span: str, what: str) -> None:
        super().__init__(span)
        self.span = span
        self.what = what


async def load(rt: Runtime, endpoint_id: str) -> dict[str, Any] | None:
    """The endpoint's saved ``llm_triage``, or None when it has not opted in."""
    row = await rt.store.db.fetchone(
        "SELECT config FROM llm_triage WHERE endpoint_id = %s", (endpoint_id,)
    )
    return None if row is None else dict(row["config"])


async def save(rt: Runtime, endpoint_id: str, config: dict[str, Any]) -> None:
    await rt.store.db.fetchone(
        "INSERT INTO llm_triage (endpoint_id, config) VALUES (%s, %s::jsonb) "
        "ON CONFLICT (endpoint_id) DO UPDATE SET config = EXCLUDED.config, updated_at = now() "
        "RETURNING endpoint_id",
        (endpoint_id, json.dumps(config)),
    )


async def clear(rt: Runtime, endpoint_id: str) -> bool:
    """Opt out; True when there was something to clear. Budget counters stay (they expire)."""
    row = await rt.store.db.fetchone(
        "DELETE FROM llm_triage WHERE endpoint_id = %s RETURNING endpoint_id", (endpoint_id,)
    )
    return row is not None


async def reserve(rt: Runtime, endpoint_id: str, per_minute: int, per_day: int) -> str | None:
    """Take one prompt from the endpoint's minute and day budgets, atomically.

    Returns None when the prompt is granted, else the window that is spent (``minute``
    or ``day``); a refused prompt takes nothing from either window.
    """
    got = await reserve_call(rt, endpoint_id, per_minute, per_day)
    return None if isinstance(got, Reservation) else got[0]


async def reserve_call(
    rt: Runtime,
    endpoint_id: str,
    per_minute: int,
    per_day: int,
    *,
    tokens_per_minute: int | None = None,
    tokens_per_day: int | None = None,
    estimate: int = 0,
) -> tuple[str, str] | Reservation:
    """:func:`reserve` with token budgets too: a :class:`Reservation` holding ``estimate``
    tokens when granted (give it to :func:`settle`), else the refused window and why
    (:data:`PROMPTS`, :data:`TOKENS`, or :data:`HELD` by calls in flight)."""
    windows = []
    try:
        async with rt.store.db.tx() as conn:
            for span, limit, tokens in (
                (MINUTE, per_minute, tokens_per_minute),
                (DAY, per_day, tokens_per_day),
            ):
                cur = await conn.execute(
                    _RESERVE.format(window=_WINDOW[span]),
                    {"endpoint": endpoint_id, "span": span, "limit": limit, "tokens": tokens,
                     "estimate": estimate},
                )  # fmt: skip
                row = await cur.fetchone()
                if row is None:
                    cur = await conn.execute(
                        "SELECT used, tokens, settled FROM llm_triage_budget"
                        f" WHERE endpoint_id = %s AND span = %s AND window_start = {_WINDOW[span]}",
                        (endpoint_id, span),
                    )
                    held = await cur.fetchone()
                    # rolls back the minute already taken
                    raise _Refused(span, _why(held, limit, tokens, estimate))
                windows.append(row["window_start"])
                if span == MINUTE and row["used"] == 1:
                    await conn.execute(
                        "DELETE FROM llm_triage_budget WHERE endpoint_id = %s"
                        f" AND window_start < now() - {_KEEP}",
                        (endpoint_id,),
                    )
    except _Refused as refused:
        return refused.span, refused.what
    return Reservation(tuple(windows), estimate)


def _why(row: Any, limit: int, budget: int | None, estimate: int) -> str:
    """What a refused window ran out of, from its row as it is now."""
    if row is None or int(row["used"]) >= limit or budget is None:
        return PROMPTS
    spent = int(row["tokens"])
    # Spent: what the settled calls cost, plus one more (the average of the settled calls,
    # once there are any), passes the budget whatever the calls in flight give back.
    if spent >= budget or (int(row["settled"]) > 0 and spent + estimate > budget):
        return TOKENS
    return HELD


async def estimate(
    rt: Runtime, endpoint_id: str, prompt_tokens: int, max_tokens: int | None
) -> int:
    """The tokens a call is expected to cost: the average of today's settled calls, else
    its prompt's estimate plus the most its answer may take."""
    row = await rt.store.db.fetchone(
        "SELECT tokens, settled FROM llm_triage_budget WHERE endpoint_id = %s"
        f" AND span = 'day' AND window_start = {_WINDOW[DAY]}",
        (endpoint_id,),
    )
    if row is not None and int(row["settled"]) > 0:
        return -(-int(row["tokens"]) // int(row["settled"]))
    return prompt_tokens + (max_tokens or _COMPLETION_GUESS)


async def settle(rt: Runtime, endpoint_id: str, held: Reservation, tokens: int) -> None:
    """A call's real tokens replace its estimate in the windows it was reserved in."""
    await rt.store.db.fetchall(
        "UPDATE llm_triage_budget SET tokens = tokens + %(tokens)s, settled = settled + 1,"
        " reserved = greatest(reserved - %(estimate)s, 0)"
        " WHERE endpoint_id = %(endpoint)s AND ((span = 'minute' AND window_start = %(minute)s)"
        " OR (span = 'day' AND window_start = %(day)s)) RETURNING used",
        {"tokens": max(tokens, 0), "estimate": held.estimate, "endpoint": endpoint_id,
         "minute": held.windows[0], "day": held.windows[1]},
    )  # fmt: skip


async def give_back(rt: Runtime, endpoint_id: str, held: Reservation) -> None:
    """A call that never reached the model: its prompt and the tokens it held go back to
    the windows it was reserved in (as if it had never been reserved)."""
    await rt.store.db.fetchall(
        "UPDATE llm_triage_budget SET used = greatest(used - 1, 0),"
        " reserved = greatest(reserved - %(estimate)s, 0)"
        " WHERE endpoint_id = %(endpoint)s AND ((span = 'minute' AND window_start = %(minute)s)"
        " OR (span = 'day' AND window_start = %(day)s)) RETURNING used",
        {"estimate": held.estimate, "endpoint": endpoint_id,
         "minute": held.windows[0], "day": held.windows[1]},
    )  # fmt: skip


async def token_usage(rt: Runtime, endpoint_id: str) -> dict[str, int]:
    """Tokens spent in the current minute and day."""
    rows = await rt.store.db.fetchall(
        "SELECT span, tokens FROM llm_triage_budget WHERE endpoint_id = %s AND ("
        f"(span = 'minute' AND window_start = {_WINDOW[MINUTE]}) OR "
        f"(span = 'day' AND window_start = {_WINDOW[DAY]}))",
        (endpoint_id,),
    )
    out = {MINUTE: 0, DAY: 0}
    out.update({r["span"]: int(r["tokens"]) for r in rows})
    return out


async def usage(rt: Runtime, endpoint_id: str) -> dict[str, int]:
    """Prompts spent in the current minute and day."""
    rows = await rt.store.db.fetchall(
        "SELECT span, used FROM llm_triage_budget WHERE endpoint_id = %s AND ("
        f"(span = 'minute' AND window_start = {_WINDOW[MINUTE]}) OR "
        f"(span = 'day' AND window_start = {_WINDOW[DAY]}))",
        (endpoint_id,),
    )
    out = {MINUTE: 0, DAY: 0}
    out.update({r["span"]: int(r["used"]) for r in rows})
    return out


# One statement, no lock: a free slot (none, or its holder's lease ran out) picked at
# random among the provider's ``cap``. Two takers that pick the same one conflict on the
# key, and the loser's DO UPDATE finds the row live and returns nothing: it reads as busy
# (claimed again shortly), never as a slot past the cap.
_TAKE_SLOT = """
    INSERT INTO llm_in_flight AS f (provider, slot, token, holder, until)
    SELECT %(provider)s, s, %(token)s, %(holder)s,
           clock_timestamp() + make_interval(secs => %(lease)s)
    FROM generate_series(1, %(cap)s) AS s
    WHERE NOT EXISTS (
        SELECT 1 FROM llm_in_flight i
        WHERE i.provider = %(provider)s AND i.slot = s AND i.until > clock_timestamp()
    )
    ORDER BY random() LIMIT 1
    ON CONFLICT (provider, slot) DO UPDATE
        SET token = EXCLUDED.token, holder = EXCLUDED.holder, until = EXCLUDED.until
        WHERE f.until <= clock_timestamp()
    RETURNING token
"""


async def take_slot(
    rt: Runtime, provider: str, cap: int, lease_s: float, holder: str
) -> str | None:
    """One of ``provider``'s ``cap`` call slots, shared by every server on the database,
    for at most ``lease_s`` (a killed holder's lapses); None when all are taken."""
    row = await rt.store.db.fetchone(
        _TAKE_SLOT,
        {"provider": provider, "token": uuid.uuid4(), "holder": holder,
         "lease": float(lease_s), "cap": cap},
    )  # fmt: skip
    return None if row is None else str(row["token"])


async def give_slot(rt: Runtime, token: str) -> None:
    """The call ended: its slot is free for any server."""
    await rt.store.db.fetchall(
        "DELETE FROM llm_in_flight WHERE token = %s RETURNING slot", (token,)
    )


async def slots_in_use(rt: Runtime, provider: str) -> int:
    """Calls in flight to ``provider`` across the service now."""
    row = await rt.store.db.fetchone(
        "SELECT count(*) AS n FROM llm_in_flight WHERE provider = %s AND until > now()",
        (provider,),
    )
    return int(row["n"]) if row else 0

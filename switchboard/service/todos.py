"""The drain verbs: list, claim, claim_next, complete, fail, heartbeat and retry an
endpoint's todos."""

from __future__ import annotations

import json
from typing import Any

from ..errors import Conflict, Forbidden, InvalidArgument, NotFound
from ..jsontext import dumps_bytes
from ..runtime import Runtime
from ..store import Row
from ..store.db import is_uuid
from ..store.todos import Hold
from .common import check_queue, check_storable, clip, jsonable

STATES = ("pending", "claimed", "done", "dead")
LIVE_STATES = ["pending", "claimed"]
LIMIT_DEFAULT, LIMIT_MAX = 20, 100
TTL_MAX = 86400

#: What a listed todo shows; a claimed one (or ``get``) adds the work itself.
_LISTED = (
    "id",
    "queue",
    "state",
    "title",
    "attempts",
    "available_at",
    "lease_expires_at",
    "event_id",
    "created_at",
    "updated_at",
    "completed_at",
)
_WORK = ("payload", "routing_trace", "work_order", "result")
#: The characters of a paged payload's JSON text (ASCII) one ``get_todo_payload`` returns:
#: with the JSON escaping of a tool's answer (twice: its text and its structured content)
#: a page stays well under the 1 MiB a stock MCP client accepts in one event.
PAYLOAD_PAGE = 131072


def todo_view(row: Row, *, full: bool = True) -> dict[str, Any]:
    """A todo as shown: ``id`` (what claim, complete, fail, heartbeat and retry take) and,
    as it always was, the same value as ``todo_id``."""
    keys = _LISTED + _WORK if full else _LISTED
    view = {k: row.get(k) for k in keys}
    view["todo_id"] = view["id"]
    return dict(jsonable(view))


def held_view(rt: Runtime, row: Row) -> dict[str, Any]:
    """:func:`todo_view` as a claim (or any verb on a held todo) answers it: a payload whose
    JSON is over ``[todos] reply_payload_max_bytes`` is left out (``payload: null``) and
    described by ``payload_paged: {bytes, pages}``, its pages read by :func:`payload_page`.

    A reply carries the payload twice over MCP (text and structured content): without a
    bound, a delivery of ~600 KB made a todo whose claim committed but whose answer a stock
    MCP client refused, so each claim spent an attempt and no worker ever saw the todo.
    """
    view = todo_view(row)
    if row.get("state") == "claimed":
        # what complete, fail and heartbeat may present: this claim, not a later one
        view["claim_id"] = jsonable(row.get("claim_id"))
    size = len(dumps_bytes(row.get("payload")))
    if size > int(_settings(rt)["reply_payload_max_bytes"]):
        text = _payload_text(row)
        view["payload"] = None
        view["payload_paged"] = {
            "bytes": len(text),
            "pages": _pages(text),
            "page_chars": PAYLOAD_PAGE,
        }
    return view


def _payload_text(row: Row) -> str:
    """The payload as ASCII JSON text, so pages cut anywhere and join back exactly."""
    return json.dumps(row.get("payload"), ensure_ascii=True, separators=(",", ":"))


def _pages(text: str) -> int:
    """How many pages of :data:`PAYLOAD_PAGE` characters ``text`` takes (at least one)."""
    return max(1, -(-len(text) // PAYLOAD_PAGE))


async def payload_page(rt: Runtime, caller: Row, todo_id: str, page: int = 0) -> dict[str, Any]:
    """One page of a todo's payload as JSON text: ``json.loads`` of the pages joined in
    order is the payload. Any todo of the caller's (its endpoint and scope, as for ``claim``),
    paged or not, in any state."""
    row = await rt.store.get_todo(caller["id"], list(caller["scope_queues"]), todo_id)
    if row is None:
        raise NotFound(f"todo {clip(todo_id)} not found")
    text = _payload_text(row)
    pages = _pages(text)
    if isinstance(page, bool) or not isinstance(page, int) or not 0 <= page < pages:
        raise InvalidArgument(
            f"page: must be an integer from 0 to {pages - 1} (this todo has {pages})"
        )
    return {
        "id": row["id"],
        "todo_id": row["id"],
        "page": page,
        "pages": pages,
        "bytes": len(text),
        "text": text[page * PAYLOAD_PAGE : (page + 1) * PAYLOAD_PAGE],
    }


def _settings(rt: Runtime) -> dict[str, Any]:
    return rt.config.section("todos")


def _scope(caller: Row, queue: str | None) -> list[str]:
    """The queues this call may touch: the caller's scope, or one queue inside it."""
    scope = list(caller["scope_queues"])
    if queue is None:
        return scope
    if not isinstance(queue, str) or queue not in scope:
        raise Forbidden(
            f"queue: {queue!r} is not in this endpoint's scope"
            f" ({', '.join(scope) or 'none'}); the queues an endpoint drains are"
            " set when it is vended: `switchboard endpoint vend --queues ...`"
        )
    return [queue]


def _limit(value: int | None) -> int:
    if value is None:
        return LIMIT_DEFAULT
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= LIMIT_MAX:
        raise InvalidArgument(f"limit: must be an integer from 1 to {LIMIT_MAX}")
    return value


def _ttl(rt: Runtime, value: float | None) -> float:
    if value is None:
        return float(_settings(rt)["lease_ttl_seconds"])
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= TTL_MAX:
        raise InvalidArgument(
            f"lease_ttl_seconds: must be a number from 0 (exclusive) to {TTL_MAX}"
        )
    return float(value)


def _result(rt: Runtime, value: Any) -> Any:
    """``value`` if its JSON fits ``[todos] result_max_bytes``: a result is stored with the
    todo and sent with every later claim of it, so one too large to send again would leave
    the todo claimable by no one (each claim spent, its answer lost)."""
    if value is None:
        return None
    check_storable(value, "result")
    limit = int(_settings(rt)["result_max_bytes"])
    size = len(dumps_bytes(value))
    if size > limit:
        raise InvalidArgument(
            f"result: {size} bytes as JSON, over the limit of {limit}"
            " ([todos] result_max_bytes); store a large result elsewhere and pass its"
            " location"
        )
    return value


async def _explain(
    rt: Runtime, caller: Row, todo_id: str, verb: str, claim_id: str | None = None
) -> NotFound | Conflict:
    """Why a todo could not be acted on: absent (or not the caller's), wrong state, or
    claimed again since the caller's claim."""
    row = await rt.store.get_todo(caller["id"], list(caller["scope_queues"]), todo_id)
    if row is None:
        return NotFound(f"todo {clip(todo_id)} not found")
    if row["state"] == "claimed" and claim_id is not None and str(row["claim_id"]) != claim_id:
        return Conflict(
            f"todo {clip(todo_id)} was claimed again since claim {claim_id} (its lease ran"
            f" out); it cannot be {verb} by that claim"
        )
    return Conflict(f"todo {clip(todo_id)} is {row['state']}; it cannot be {verb} by this caller")


def _hold(caller: Row, owner: str, claim_id: Any) -> Hold:
    """Who acts on a held todo: ``caller`` in its scope, as ``owner``, and its ``claim_id``
    (None, or the UUID a claim returned)."""
    if claim_id is not None and (not isinstance(claim_id, str) or not is_uuid(claim_id)):
        raise InvalidArgument(
            f"claim_id: must be the claim_id a claim returned, a UUID (got {clip(repr(claim_id))})"
        )
    claim = None if claim_id is None else claim_id.lower()
    return Hold(caller["id"], list(caller["scope_queues"]), owner, claim)


async def list_todos(
    rt: Runtime,
    caller: Row,
    *,
    queue: str | None = None,
    state: str | None = None,
    limit: int | None = None,
    unreachable: bool = False,
) -> dict[str, Any]:
    """The caller's todos in its scope, oldest available first (pending and claimed by default).

    ``unreachable``: instead, the todos its human's webhooks made in a queue their endpoint
    does not drain (which no one can claim), newest first, each with that endpoint and the
    webhook (``queue`` then filters by their queue, whatever the caller's scope).
    """
    if state is not None and state not in STATES:
        raise InvalidArgument(f"state: must be one of {', '.join(STATES)}")
    states = [state] if state else LIVE_STATES
    if unreachable:
        if queue is not None:
            check_queue(queue, "queue")
        rows = await rt.store.unreachable_todos(
            owner_human=caller["owner_human"], queue=queue, states=states, limit=_limit(limit)
        )
        return {"todos": [unreachable_view(r) for r in rows]}
    queues = _scope(caller, queue)
    rows = await rt.store.list_todos(caller["id"], queues, states, _limit(limit))
    return {"todos": [todo_view(r, full=False) for r in rows]}


def browsed_view(row: Row) -> dict[str, Any]:
    """A todo as an operator lists it: :func:`todo_view` (listed) plus its endpoint and holder."""
    return {
        **todo_view(row, full=False),
        "endpoint_id": row["endpoint_id"],
        "endpoint_name": row.get("endpoint_name"),
        "owner": row.get("owner"),
    }


def unreachable_view(row: Row) -> dict[str, Any]:
    """A todo no one can claim: :func:`browsed_view`, the webhook that made it, the flag."""
    return {**browsed_view(row), "webhook_id": str(row["webhook_id"]), "unreachable": True}


async def list_all_todos(
    rt: Runtime,
    *,
    endpoint_id: str | None = None,
    queue: str | None = None,
    state: str | None = None,
    limit: int | None = None,
    unreachable: bool = False,
) -> dict[str, Any]:
    """Any endpoint's todos for an operator, newest first, in every state unless ``state``.

    An unknown ``endpoint_id`` is not found; ``queue``, ``state`` and ``limit`` are checked
    as :func:`list_todos` checks them. ``unreachable``: only the live ones (pending and
    claimed unless ``state``) in a queue their endpoint does not drain, with their webhook.
    """
    if endpoint_id is not None:
        endpoint_id = (await rt.store.get_endpoint(endpoint_id))["id"]
    if queue is not None:
        check_queue(queue, "queue")
    if state is not None and state not in STATES:
        raise InvalidArgument(f"state: must be one of {', '.join(STATES)}")
    if unreachable:
        rows = await rt.store.unreachable_todos(
            owner_human=None,
            endpoint_id=endpoint_id,
            queue=queue,
            states=[state] if state else LIVE_STATES,
            limit=_limit(limit),
        )
        return {"todos": [unreachable_view(r) for r in rows]}
    rows = await rt.store.browse_todos(
        endpoint_id=endpoint_id, queue=queue, state=state, limit=_limit(limit)
    )
    return {"todos": [browsed_view(r) for r in rows]}


async def claim(
    rt: Runtime, caller: Row, todo_id: str, *, owner: str, lease_ttl_seconds: float | None = None
) -> dict[str, Any]:
    """Claim one named todo: pending and due, or claimed with an expired lease."""
    cfg = _settings(rt)
    row = await rt.store.claim_todo(
        caller["id"],
        list(caller["scope_queues"]),
        todo_id,
        owner,
        _ttl(rt, lease_ttl_seconds),
        int(cfg["max_attempts"]),
    )
    if row is None:
        raise await _explain(rt, caller, todo_id, "claimed")
    return {"todo": held_view(rt, row)}


async def claim_next(
    rt: Runtime,
    caller: Row,
    *,
    owner: str,
    queue: str | None = None,
    lease_ttl_seconds: float | None = None,
) -> dict[str, Any]:
    """Claim the oldest claimable todo in scope (``{empty: true}`` when there is none)."""
    queues = _scope(caller, queue)
    ttl = _ttl(rt, lease_ttl_seconds)
    row = await rt.store.claim_next(
        caller["id"], queues, owner, ttl, int(_settings(rt)["max_attempts"])
    )
    if row is None:
        return {"empty": True}
    return {"todo": held_view(rt, row), "empty": False}


async def complete(
    rt: Runtime,
    caller: Row,
    todo_id: str,
    *,
    owner: str,
    result: Any = None,
    claim_id: str | None = None,
) -> dict[str, Any]:
    """Mark a todo the caller holds done, with an optional JSON result; ``claim_id``: only
    while it is held by that claim."""
    hold = _hold(caller, owner, claim_id)
    result = _result(rt, result)
    row = await rt.store.complete_todo(hold, todo_id, result)
    if row is None:
        raise await _explain(rt, caller, todo_id, "completed", hold.claim)
    return {"todo": held_view(rt, row)}


async def fail(
    rt: Runtime,
    caller: Row,
    todo_id: str,
    *,
    owner: str,
    result: Any = None,
    claim_id: str | None = None,
) -> dict[str, Any]:
    """Give a held todo back: pending again after a backoff, or dead after max_attempts;
    ``claim_id``: only while it is held by that claim."""
    hold = _hold(caller, owner, claim_id)
    cfg = _settings(rt)
    result = _result(rt, result)
    row = await rt.store.fail_todo(
        hold,
        todo_id,
        result,
        max_attempts=int(cfg["max_attempts"]),
        backoff_base=float(cfg["backoff_base_seconds"]),
        backoff_max=float(cfg["backoff_max_seconds"]),
    )
    if row is None:
        raise await _explain(rt, caller, todo_id, "failed", hold.claim)
    return {"todo": held_view(rt, row)}


async def heartbeat(
    rt: Runtime,
    caller: Row,
    todo_id: str,
    *,
    owner: str,
    lease_ttl_seconds: float | None = None,
    claim_id: str | None = None,
) -> dict[str, Any]:
    """Extend the lease on a todo; only its current claimant may (``claim_id``: that claim)."""
    hold = _hold(caller, owner, claim_id)
    row = await rt.store.heartbeat_todo(hold, todo_id, _ttl(rt, lease_ttl_seconds))
    if row is None:
        raise await _explain(rt, caller, todo_id, "heartbeat", hold.claim)
    return {
        "id": row["id"],
        "todo_id": row["id"],
        "lease_expires_at": jsonable(row["lease_expires_at"]),
        "claim_id": jsonable(row["claim_id"]),
    }


async def retry(rt: Runtime, caller: Row | None, todo_id: str) -> dict[str, Any]:
    """A ``dead`` todo back to ``pending``, claimable at once with a fresh ``max_attempts``.

    ``caller`` (an agent) may retry only a todo of its own in its scope, as it may claim
    one; None (the operator's CLI) any endpoint's. Another state is a conflict naming it;
    an unknown todo (or another endpoint's) is not found. The last ``result`` is kept.
    """
    endpoint_id = caller["id"] if caller is not None else None
    queues = list(caller["scope_queues"]) if caller is not None else None
    row = await rt.store.retry_todo(todo_id, endpoint_id, queues)
    if row is None:
        found = (
            await rt.store.get_todo(endpoint_id, queues or [], todo_id)
            if endpoint_id is not None
            else await rt.store.get_any_todo(todo_id)
        )
        if found is None:
            raise NotFound(f"todo {clip(todo_id)} not found")
        raise Conflict(f"todo {clip(todo_id)} is {found['state']}; only a dead todo can be retried")
    return {"todo": held_view(rt, row)}

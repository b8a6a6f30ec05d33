"""MCP tools that drain an endpoint's queues, over switchboard.service.todos."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from switchboard.service import todos

from .context import ToolContext

TodoId = Annotated[str, Field(description="The todo's id (todo_id)")]
Result = Annotated[Any, Field(description="Any JSON value recorded on the todo")]


async def list_todos(
    ctx: ToolContext,
    queue: Annotated[str | None, Field(description="One queue of your scope")] = None,
    state: Annotated[
        Literal["pending", "claimed", "done", "dead"] | None,
        Field(description="Default: pending and claimed"),
    ] = None,
    limit: Annotated[int | None, Field(description="1-100 (default 20)")] = None,
    unreachable: Annotated[
        bool,
        Field(
            description="true: instead, the todos your human's webhooks put in a queue their "
            "endpoint does not drain, which no one can claim (newest first, each "
            "with endpoint_id, endpoint_name and webhook_id)"
        ),
    ] = False,
) -> dict[str, Any]:
    """This endpoint's todos in its scope queues, oldest available first; with
    unreachable=true, your webhooks' todos that no endpoint can claim."""
    return await todos.list_todos(
        ctx.runtime, ctx.endpoint, queue=queue, state=state, limit=limit, unreachable=unreachable
    )


async def claim(ctx: ToolContext, id: TodoId) -> dict[str, Any]:
    """Claim one todo by id (pending and due, or its lease expired); returns its payload,
    routing_trace and work_order."""
    return await todos.claim(ctx.runtime, ctx.endpoint, id, owner=ctx.owner)


async def claim_next(
    ctx: ToolContext,
    queue: Annotated[
        str | None, Field(description="One queue of your scope (default: all)")
    ] = None,
    lease_ttl_seconds: Annotated[
        float | None, Field(description="Lease length (default from config)")
    ] = None,
) -> dict[str, Any]:
    """Claim the oldest claimable todo: {todo, empty: false}, or {empty: true}. Competing
    workers never get the same todo."""
    return await todos.claim_next(
        ctx.runtime, ctx.endpoint, owner=ctx.owner, queue=queue, lease_ttl_seconds=lease_ttl_seconds
    )


#: The claim a verb acts for: workers sharing one endpoint's token each present their own.
ClaimId = Annotated[
    str | None,
    Field(
        description=(
            "The claim_id your claim returned: the call is refused (conflict) when the todo"
            " was claimed again since (your lease ran out). Without it, any claim of this"
            " endpoint's"
        )
    ),
]


async def complete(
    ctx: ToolContext, id: TodoId, result: Result = None, claim_id: ClaimId = None
) -> dict[str, Any]:
    """Mark a todo you hold done, with an optional result."""
    return await todos.complete(
        ctx.runtime, ctx.endpoint, id, owner=ctx.owner, result=result, claim_id=claim_id
    )


async def fail(
    ctx: ToolContext, id: TodoId, result: Result = None, claim_id: ClaimId = None
) -> dict[str, Any]:
    """Give a todo you hold back: retried after an exponential backoff, dead after the
    configured max_attempts."""
    return await todos.fail(
        ctx.runtime, ctx.endpoint, id, owner=ctx.owner, result=result, claim_id=claim_id
    )


async def heartbeat(ctx: ToolContext, id: TodoId, claim_id: ClaimId = None) -> dict[str, Any]:
    """Extend the lease on a todo you hold."""
    return await todos.heartbeat(ctx.runtime, ctx.endpoint, id, owner=ctx.owner, claim_id=claim_id)


async def get_todo_payload(
    ctx: ToolContext,
    id: TodoId,
    page: Annotated[int, Field(description="0 for the first page (default), up to pages - 1")] = 0,
) -> dict[str, Any]:
    """One page of a todo's payload as JSON text, for a todo whose claim answered
    payload: null with payload_paged {bytes, pages}: json.loads of every page's text
    joined in order is the payload. Any todo of yours, in any state."""
    return await todos.payload_page(ctx.runtime, ctx.endpoint, id, page)


async def retry(ctx: ToolContext, id: TodoId) -> dict[str, Any]:
    """Put a dead todo of yours back to pending, claimable at once with a fresh set of
    attempts (its last result is kept). Any other state is a conflict."""
    return await todos.retry(ctx.runtime, ctx.endpoint, id)


TOOLS = (list_todos, claim, claim_next, complete, fail, heartbeat, retry, get_todo_payload)
#: Tools that share another's scope verb: who may claim a todo may read its pages.
VERBS = {"get_todo_payload": "claim"}

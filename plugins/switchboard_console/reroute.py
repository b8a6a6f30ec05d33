"""Re-route stored deliveries (or release held ones) from the console: the service's plan
first, then a confirm form that applies exactly that version over the same window."""

from __future__ import annotations

from typing import Any

from sanic import HTTPResponse, Request

from switchboard.errors import Conflict, InvalidArgument
from switchboard.service import reroute, versions

from . import params
from .surface import Surface

Row = dict[str, Any]
LAST_DEFAULT = 1000


class Reroute:
    def __init__(self, c: Surface) -> None:
        self.c = c
        self.rt = c.rt

    async def _run(
        self,
        who: Row,
        webhook_id: str,
        held: bool,
        last: int,
        plan: bool,
        expect: int | None = None,
    ) -> Row:
        verb = reroute.release_held if held else reroute.reroute_events
        return await verb(self.rt, who, webhook_id, last=last, plan=plan, expect_version=expect)

    async def page(self, request: Request, who: Row, webhook_id: str) -> HTTPResponse:
        """GET: the form; POST ``step=plan``: the plan and a confirm form; POST
        ``step=apply``: applied, if the rules are still the version that was planned."""
        source = request.form if request.method == "POST" else request.args

        def field(name: str) -> str | None:
            value = source.get(name) if source is not None else None
            return value if isinstance(value, str) else None

        held = (field("held") or "") == "1"
        last = params.last(field("last"), LAST_DEFAULT)
        current = (await versions.list_versions(self.rt, who, webhook_id, limit=1))[
            "current_version"
        ]
        ctx: Row = {
            "who": who,
            "webhook_id": webhook_id,
            "held": held,
            "last": last,
            "current": current,
            "plan": None,
            "done": None,
            "error": None,
        }
        status = 200
        step = field("step") if request.method == "POST" else None
        if step == "plan":
            ctx["plan"] = await self._run(who, webhook_id, held, last, plan=True)
        elif step == "apply":
            planned = field("version") or ""
            try:
                if planned != str(current):
                    raise Conflict("the rules changed since the plan", current_version=current)
                # applied only if the rules it reads are still that version (a save may land
                # between the check above and the apply's own read of the rules)
                ctx["done"] = await self._run(
                    who, webhook_id, held, last, plan=False, expect=current
                )
            except Conflict as exc:
                # the rules changed since the plan was shown: plan again, apply nothing
                now = exc.details.get("current_version", current)
                ctx["current"] = now
                ctx["error"] = (
                    f"The rules are now version {now}, not the planned version"
                    f" {planned or '?'}: nothing was applied. Here is the new plan."
                )
                ctx["plan"] = await self._run(who, webhook_id, held, last, plan=True)
                status = 409
        elif step is not None:
            raise InvalidArgument("step: must be plan or apply")
        return self.c.render(request, "reroute.html", status, **ctx)

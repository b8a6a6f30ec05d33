"""The console's routes: every read goes through the service layer as the signed-in endpoint."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from sanic import HTTPResponse, Request
from sanic.response import html, raw, redirect

from switchboard.errors import (
    Forbidden,
    InvalidArgument,
    NotFound,
    StoreUnavailable,
    SwitchboardError,
    http_status,
)
from switchboard.pgtext import clean_text
from switchboard.runtime import Runtime
from switchboard.service import history, rules
from switchboard.service.identity import authenticate

from . import params, session, versions
from .deliveries import Deliveries
from .guard import Guard
from .queues import Queues
from .reroute import Reroute
from .shown import shown

HERE = Path(__file__).resolve().parent
STATIC = {"console.css": "text/css; charset=utf-8"}
#: No script at all, styles only from our own origin, no framing, forms post only to us.
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self';"
    " frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
}

#: The deliveries a dry run of a candidate config reads by default.
DRY_RUN_LAST = 200

Row = dict[str, Any]
Handler = Callable[..., Awaitable[HTTPResponse]]


class Console:
    """The routes of one application, sharing its runtime, keys and templates."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.keys = session.Keys(rt)
        self.guard = Guard(rt.config)
        self.env = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            finalize=shown,
        )
        self.env.filters["pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False)

    # --- responses ----------------------------------------------------------------------

    def _nonce(self, request: Request) -> tuple[str, bool]:
        nonce = request.cookies.get(session.CSRF_COOKIE)
        return (nonce, False) if nonce else (session.new_nonce(), True)

    def _finish(
        self, request: Request, resp: HTTPResponse, nonce: str | None = None, fresh: bool = False
    ) -> HTTPResponse:
        for k, v in SECURITY_HEADERS.items():
            resp.headers[k] = v
        if nonce is not None and fresh:
            self._cookie(request, resp, session.CSRF_COOKIE, nonce)
        return resp

    def _cookie(self, request: Request, resp: HTTPResponse, name: str, value: str) -> None:
        resp.add_cookie(
            name,
            value,
            path=session.PATH,
            httponly=True,
            samesite="Strict",
            secure=request.scheme == "https",
            max_age=session.MAX_AGE_S,
        )

    def render(self, request: Request, name: str, status: int = 200, **ctx: Any) -> HTTPResponse:
        nonce, fresh = self._nonce(request)
        body = self.env.get_template(name).render(
            csrf=self.keys.csrf_token(nonce), signed_in=ctx.pop("signed_in", True), **ctx
        )
        # Producer text (a JSON "\ud800", a header's non-UTF-8 byte) may hold a lone
        # surrogate, which no page can be encoded with: shown as U+FFFD on every page,
        # whichever template, field or filter carried it.
        body = clean_text(body)
        return self._finish(request, html(body, status=status), nonce, fresh)

    def go(self, request: Request, to: str) -> HTTPResponse:
        return self._finish(request, redirect(to, status=303))

    def csrf_ok(self, request: Request) -> bool:
        if not self.guard.origin_ok(request):
            return False
        return self.keys.csrf_ok(request.cookies.get(session.CSRF_COOKIE), _field(request, "csrf"))

    def refuse(self, request: Request) -> HTTPResponse:
        return self.render(
            request,
            "error.html",
            403,
            signed_in=False,
            title="Forbidden",
            message="The form's CSRF token is missing or wrong: reload the page and try again.",
        )

    async def caller(self, request: Request) -> Row | None:
        """The live endpoint the session cookie names, else None."""
        endpoint_id = self.keys.open(request.cookies.get(session.COOKIE))
        if endpoint_id is None:
            return None
        try:
            row = await self.rt.store.get_endpoint(endpoint_id)
        except NotFound:
            return None
        return row if session.live(row) else None

    def page(self, fn: Handler) -> Handler:
        """A signed-in page: no session goes to sign-in; not found and bad input are pages."""

        @functools.wraps(fn)
        async def handler(request: Request, **kw: Any) -> HTTPResponse:
            who = await self.caller(request)
            if who is None:
                return self.go(request, "/console/signin")
            if request.method == "POST" and not self.csrf_ok(request):
                return self.refuse(request)
            try:
                return await fn(request, who, **kw)
            except NotFound:
                return self.render(
                    request,
                    "error.html",
                    404,
                    title="Not found",
                    message="There is nothing here that this endpoint can see.",
                )
            except InvalidArgument as exc:
                return self.render(
                    request, "error.html", 400, title="Bad request", message=str(exc)
                )
            except StoreUnavailable:
                raise  # the guard's 503 page
            except SwitchboardError as exc:
                # a refusal of the service's own (conflict, forbidden, unavailable): its
                # status and words, as the MCP tools answer them
                return self.render(
                    request, "error.html", http_status(exc), title="Refused", message=str(exc)
                )

        return handler

    # --- sign-in ------------------------------------------------------------------------

    async def signin_form(self, request: Request) -> HTTPResponse:
        if await self.caller(request) is not None:
            return self.go(request, "/console/webhooks")
        return self.render(request, "signin.html", signed_in=False)

    async def signin(self, request: Request) -> HTTPResponse:
        if not self.csrf_ok(request):
            return self.refuse(request)
        token = _field(request, "token") or ""
        try:
            row = await authenticate(self.rt, token.strip())
        except Forbidden:
            return self.render(
                request,
                "signin.html",
                401,
                signed_in=False,
                error="That token is not a live endpoint token.",
            )
        resp = self.go(request, "/console/webhooks")
        self._cookie(request, resp, session.COOKIE, self.keys.seal(str(row["id"])))
        # a fresh CSRF nonce for the new session
        self._cookie(request, resp, session.CSRF_COOKIE, session.new_nonce())
        return resp

    async def signout(self, request: Request) -> HTTPResponse:
        if not self.csrf_ok(request):
            return self.refuse(request)
        resp = self.go(request, "/console/signin")
        resp.delete_cookie(session.COOKIE, path=session.PATH)
        resp.delete_cookie(session.CSRF_COOKIE, path=session.PATH)
        return resp

    async def index(self, request: Request) -> HTTPResponse:
        return self.go(request, "/console/webhooks")

    async def unknown(self, request: Request, rest: str) -> HTTPResponse:
        """Any other path under /console: the console's own 404, with its headers."""
        if not rest.strip("/"):  # "/console/" is the index
            return await self.index(request)
        return self.render(
            request,
            "error.html",
            404,
            signed_in=False,
            title="Not found",
            message="There is no such console page.",
        )

    async def static(self, request: Request, name: str) -> HTTPResponse:
        if name not in STATIC:
            return self._finish(request, raw(b"not found", status=404))
        resp = raw((HERE / "static" / name).read_bytes(), content_type=STATIC[name])
        self._finish(request, resp)
        resp.headers["Cache-Control"] = "public, max-age=3600"
        return resp

    async def rules_page(self, request: Request, who: Row, webhook_id: str) -> HTTPResponse:
        saved = await rules.list_rules(self.rt, who, webhook_id)
        hist = await versions.history(self.rt, who, webhook_id, request.args)
        candidate = json.dumps(
            {k: saved.get(k) for k in ("rules", "default_action", "params")},
            indent=2,
            ensure_ascii=False,
        )
        diff = error = None
        last = str(DRY_RUN_LAST)
        status = 200
        if request.method == "POST":
            candidate = _field(request, "candidate") or ""
            last = _field(request, "last") or str(DRY_RUN_LAST)
            try:
                diff = await self._dry_run(who, webhook_id, candidate, last)
            except InvalidArgument as exc:
                error, status = str(exc), 400
        return self.render(
            request,
            "rules.html",
            status,
            who=who,
            saved=saved,
            hist=hist,
            webhook_id=webhook_id,
            candidate=candidate,
            last=last,
            diff=diff,
            error=error,
        )

    async def _dry_run(self, who: Row, webhook_id: str, text: str, last: str) -> Row:
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise InvalidArgument(f"candidate: not JSON ({exc})") from None
        except RecursionError:
            # json.loads recurses once per level: ~1000 nested brackets exhaust the stack
            raise InvalidArgument("candidate: nested too deeply to read as JSON") from None
        if isinstance(doc, list):
            doc = {"rules": doc}
        if not isinstance(doc, dict):
            raise InvalidArgument("candidate: give a config object or a list of rules")
        window = params.last(last, DRY_RUN_LAST)
        return await history.diff_rules(
            self.rt,
            who,
            webhook_id,
            rules=doc.get("rules"),
            default_action=doc.get("default_action"),
            params=doc.get("params"),
            last=window,
        )


def _field(request: Request, name: str) -> str | None:
    """One field of a posted form (None: absent, or no form at all)."""
    form = request.form
    value = form.get(name) if form is not None else None
    return value if isinstance(value, str) else None


def add_routes(app: Any, rt: Runtime) -> None:
    c = Console(rt)
    d = Deliveries(c)
    q = Queues(c)
    rr = Reroute(c)

    def route(fn: Handler, uri: str, **kw: Any) -> None:
        # every console route checks Host first and answers an outage as a page
        app.add_route(c.guard.wrap(fn, c.render), uri, **kw)

    route(c.index, "/console", methods=["GET"], name="console_index")
    route(c.signin_form, "/console/signin", methods=["GET"], name="console_signin_form")
    route(c.signin, "/console/signin", methods=["POST"], name="console_signin")
    route(c.signout, "/console/signout", methods=["POST"], name="console_signout")
    route(c.static, "/console/static/<name:str>", methods=["GET"], name="console_static")
    route(c.page(d.webhook_list), "/console/webhooks", methods=["GET"], name="console_webhooks")
    route(
        c.page(d.webhook),
        "/console/webhooks/<webhook_id:str>",
        methods=["GET"],
        name="console_webhook",
    )
    route(
        c.page(c.rules_page),
        "/console/webhooks/<webhook_id:str>/rules",
        methods=["GET", "POST"],
        name="console_rules",
    )
    route(
        c.page(d.delivery),
        "/console/deliveries/<event_id:str>",
        methods=["GET"],
        name="console_delivery",
    )
    route(
        c.page(rr.page),
        "/console/webhooks/<webhook_id:str>/reroute",
        methods=["GET", "POST"],
        name="console_reroute",
    )
    route(c.page(q.index), "/console/queues", methods=["GET"], name="console_queues")
    route(
        c.page(q.retry),
        "/console/todos/<todo_id:str>/retry",
        methods=["POST"],
        name="console_todo_retry",
    )
    # Last and least specific: whatever else is under /console.
    route(c.unknown, "/console/<rest:path>", methods=["GET"], name="console_unknown")

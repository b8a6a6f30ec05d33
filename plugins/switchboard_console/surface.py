"""What a console page needs of the console (``views.Console``): its runtime, rendering a
template and a redirect; the page modules depend on this, never on ``views`` itself."""

from __future__ import annotations

from typing import Any, Protocol

from sanic import HTTPResponse, Request

from switchboard.runtime import Runtime


class Surface(Protocol):
    rt: Runtime

    def render(self, request: Request, name: str, status: int = 200, **ctx: Any) -> HTTPResponse:
        """A template rendered as a page, with the console's headers and CSRF token."""
        ...

    def go(self, request: Request, to: str) -> HTTPResponse:
        """A 303 to ``to``, with the console's headers."""
        ...

"""The console's signed session cookie and its CSRF tokens, keyed off the server's secret key.

The cookie holds the endpoint id, when it was issued and an HMAC over both: never the token.
Each request re-reads the endpoint and refuses one that is revoked or expired, so revoking
an endpoint ends its console sessions at once.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import secrets
import time
from typing import Any

from switchboard.plugin import constant_time_equal
from switchboard.runtime import Runtime
from switchboard.secrets_box import load_or_create_secret_key

from .params import whole

COOKIE = "sb_console"
CSRF_COOKIE = "sb_console_csrf"
PATH = "/console"
#: A session lasts at most this long, however active.
MAX_AGE_S = 12 * 3600


class Keys:
    """The cookie and CSRF keys, derived from the server's secret key with HMAC."""

    def __init__(self, rt: Runtime) -> None:
        secret = load_or_create_secret_key(rt.config.raw["secret_key"], rt.config.data_dir)
        root = secret.encode()
        self.session = hmac.new(root, b"switchboard/console-session/v1", hashlib.sha256).digest()
        self.csrf = hmac.new(root, b"switchboard/console-csrf/v1", hashlib.sha256).digest()

    def _mac(self, message: str) -> str:
        digest = hmac.new(self.session, _bytes(message), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def seal(self, endpoint_id: str, now: float | None = None) -> str:
        issued = str(int(time.time() if now is None else now))
        return f"{endpoint_id}.{issued}.{self._mac(f'v1|{endpoint_id}|{issued}')}"

    def open(self, value: str | None, now: float | None = None) -> str | None:
        """The endpoint id a genuine, unexpired cookie names, else None."""
        if not value or value.count(".") != 2:
            return None
        endpoint_id, issued, mac = value.split(".")
        # the cookie is the client's: compared as bytes (a str with a non-ASCII character
        # makes compare_digest raise)
        if not constant_time_equal(self._mac(f"v1|{endpoint_id}|{issued}"), mac):
            return None
        at = whole(issued, 0, 2**63 - 1)  # sealed by us, so a number; checked all the same
        if at is None or (time.time() if now is None else now) - at > MAX_AGE_S:
            return None
        return endpoint_id

    def csrf_token(self, nonce: str) -> str:
        digest = hmac.new(self.csrf, _bytes(nonce), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def csrf_ok(self, nonce: str | None, token: str | None) -> bool:
        if not nonce or not token:
            return False
        # the form's token and the cookie's nonce are the client's: any text, compared as
        # bytes, never an exception
        return constant_time_equal(self.csrf_token(nonce), token)


def _bytes(text: str) -> bytes:
    """A cookie's text as bytes to MAC: header bytes that are not UTF-8 reach us
    surrogate-escaped, and must still give a MAC (a wrong one), not an exception."""
    return text.encode("utf-8", "surrogatepass")


def new_nonce() -> str:
    return secrets.token_urlsafe(24)


def live(row: dict[str, Any]) -> bool:
    """The endpoint may still act: active and not expired."""
    expires = row.get("expires_at")
    return row.get("state") == "active" and (expires is None or expires > dt.datetime.now(dt.UTC))

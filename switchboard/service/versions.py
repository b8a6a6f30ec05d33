"""A webhook's routing versions: every save numbered, hashed and signed; list and get them.

A version is written in the save's own transaction, under the webhook's row lock
(:func:`switchboard.service.rules.save_config`; a rollback is
:func:`switchboard.service.rules.rollback_rules`), so numbers never skip nor repeat.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import json
import logging
from typing import Any

from ..errors import InvalidArgument, NotFound
from ..logsetup import fields
from ..routing.model import RoutingConfig
from ..runtime import Runtime
from ..store import Row
from .common import check_storable, clip, jsonable
from .webhooks import owned_webhook

log = logging.getLogger("switchboard.rules")

#: Who made a version when no endpoint did (the CLI, the console).
OPERATOR = "operator"
#: Versions per page of ``list_versions`` when the caller does not say.
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
#: A note's length at most.
NOTE_MAX = 500


def config_hash(doc: dict[str, Any]) -> str:
    """The content hash of a routing config (``RoutingConfig.to_json()``): key order and
    whitespace do not matter, every value does."""
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def author_of(caller: Row | None) -> str:
    """An endpoint's id, or :data:`OPERATOR`."""
    return OPERATOR if caller is None else str(caller["id"])


def checked_note(note: Any) -> str | None:
    if note is None:
        return None
    if not isinstance(note, str) or len(note) > NOTE_MAX:
        raise InvalidArgument(f"note: a string of at most {NOTE_MAX} characters")
    return str(check_storable(note, "note"))


def logged(webhook_id: str, row: Row, config: RoutingConfig) -> None:
    """One structured line per save: webhook, version, who, hash and rule count."""
    log.info(
        "rules saved %s v%s",
        webhook_id,
        row["version"],
        extra=fields(
            event="rules_saved",
            webhook_id=webhook_id,
            version=row["version"],
            author=row["author"],
            config_hash=row["config_hash"],
            rule_count=len(config.rules),
        ),
    )


def version_view(row: Row, *, config: bool = True) -> dict[str, Any]:
    view: dict[str, Any] = {
        "version": row["version"],
        "created_at": jsonable(row["created_at"]),
        "author": row["author"],
        "config_hash": row["config_hash"],
        "note": row["note"],
        "rule_count": len((row["config"] or {}).get("rules") or []),
    }
    if config:
        view["config"] = row["config"]
    return view


def _cursor(version: int) -> str:
    return base64.urlsafe_b64encode(json.dumps(["v", version]).encode()).decode().rstrip("=")


def _from_cursor(cursor: Any) -> int:
    try:
        raw = base64.urlsafe_b64decode(str(cursor) + "=" * (-len(str(cursor)) % 4))
        tag, version = json.loads(raw)
    except (ValueError, TypeError, binascii.Error):
        raise InvalidArgument("cursor: not a cursor this tool returned") from None
    if tag != "v" or isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InvalidArgument("cursor: not a cursor this tool returned")
    return version


def _version_number(version: Any) -> int:
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InvalidArgument("version: must be a positive integer")
    return version


async def list_versions(
    rt: Runtime, caller: Row | None, webhook_id: str, *, limit: Any = None, cursor: Any = None
) -> dict[str, Any]:
    """The webhook's versions, newest first, without their configs (``get_version`` has
    them); ``next_cursor`` pages on."""
    row = await owned_webhook(rt, caller, webhook_id)
    n = DEFAULT_LIMIT if limit is None else limit
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_LIMIT:
        raise InvalidArgument(f"limit: must be an integer from 1 to {MAX_LIMIT}")
    before = None if cursor is None else _from_cursor(cursor)
    rows = await rt.store.list_routing_versions(str(row["id"]), limit=n + 1, before=before)
    out: dict[str, Any] = {
        "webhook_id": str(row["id"]),
        # read with the page (one snapshot), so the newest listed is never past it
        "current_version": int(rows[0]["current_version"] if rows else row["routing_version"]),
        "versions": [version_view(r, config=False) for r in rows[:n]],
    }
    if len(rows) > n:
        out["next_cursor"] = _cursor(int(rows[n - 1]["version"]))
    return out


async def get_version(
    rt: Runtime, caller: Row | None, webhook_id: str, version: Any
) -> dict[str, Any]:
    """One version, with its whole config."""
    row = await owned_webhook(rt, caller, webhook_id)
    found = await rt.store.get_routing_version(str(row["id"]), _version_number(version))
    if found is None:
        raise NotFound(
            f"webhook {clip(webhook_id)} has no version {version}", code="version_not_found"
        )
    return {"webhook_id": str(row["id"]), **version_view(found)}


def fresh(diff: Row | None, ttl_s: float) -> bool:
    if diff is None:
        return False
    now: dt.datetime = diff["now"]
    return bool(now - diff["diffed_at"] <= dt.timedelta(seconds=ttl_s))


__all__ = [
    "OPERATOR",
    "author_of",
    "config_hash",
    "fresh",
    "get_version",
    "list_versions",
    "logged",
    "version_view",
]

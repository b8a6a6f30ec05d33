"""SQL for webhooks, their routes, and the per-delivery target and grant resolution."""

from __future__ import annotations

import json
import marshal
from collections.abc import Sequence
from typing import Any

from psycopg import errors
from psycopg.types.json import Jsonb

from ..errors import NotFound, clip
from ..routing.model import RoutingConfig
from .batcher import Batcher
from .db import Database, Row, is_uuid
from .identity import LIVE_ENDPOINT
from .outcome import StaleResolution
from .rescache import ResolutionCache

# ``routing_version`` is read with ``routing`` (one statement, one snapshot): a save writes
# both in one transaction, so the pair always matches. Read apart, a save committing
# between the reads labelled the old rules with the new version, and a client editing
# them with ``expect_version`` set to it undid that save.
_WEBHOOK_COLS = (
    "w.id, w.endpoint_id, w.source_type, w.target_queue, w.trust_mode, "
    "w.signing_secret_enc, w.created_at, w.rotated_at, w.routing, w.source_config, "
    "w.previous_until, "
    "e.owner_human, e.webhook_queues AS owner_webhook_queues, "
    "(SELECT coalesce(max(v.version), 0) FROM routing_versions v"
    " WHERE v.webhook_id = w.id) AS routing_version"
)

# Live, authorized targets in delivery order: the owner endpoint first, then routes by
# granted_at then target id. Authorization is re-checked here on every delivery.
_TARGETS = f"""
    SELECT coalesce(json_agg(json_build_object('id', t.id, 'queues', t.scope_queues)
                             ORDER BY t.ord, t.granted_at, t.id), '[]'::json)
    FROM (
        SELECT e.id, e.scope_queues, 0 AS ord, NULL::timestamptz AS granted_at
        FROM endpoints e WHERE e.id = w.endpoint_id AND {LIVE_ENDPOINT}
        UNION ALL
        SELECT e.id, e.scope_queues, 1, r.granted_at
        FROM webhook_routes r JOIN endpoints e ON e.id = r.target_endpoint_id
        WHERE r.webhook_id = w.id AND e.id <> w.endpoint_id AND {LIVE_ENDPOINT}
          AND (e.owner_human = o.owner_human OR EXISTS (
                SELECT 1 FROM friendships f WHERE f.from_human = o.owner_human
                AND f.to_human = e.owner_human AND f.state = 'approved'))
    ) t
"""

# Queues the owner may use for webhooks: the owner endpoint's webhook_queues plus the
# scopes of the same human's other live endpoints.
_HUMAN_QUEUES = f"""
    SELECT coalesce(array_agg(DISTINCT q ORDER BY q), '{{}}')
    FROM endpoints e, unnest(e.scope_queues) q
    WHERE e.owner_human = o.owner_human AND e.id <> w.endpoint_id AND {LIVE_ENDPOINT}
"""

_RESOLVED_COLS = f"""
    w.id, w.endpoint_id, w.source_type, w.target_queue, w.trust_mode,
    w.signing_secret_enc, w.routing::text AS routing, w.source_config,
    CASE WHEN w.previous_until > now() THEN w.previous_secret_enc END AS previous_secret_enc,
    coalesce(w.previous_until > now(), false) AS in_overlap,
    o.owner_human, o.webhook_queues AS owner_webhook_queues,
    ({_TARGETS}) AS targets, ({_HUMAN_QUEUES}) AS human_queues
"""

_RESOLVED = f"""
    SELECT {_RESOLVED_COLS}
    FROM endpoint_webhooks w JOIN endpoints o ON o.id = w.endpoint_id
"""

# How long a resolved row may be kept (``store.rescache``): the resolve epoch it was read
# at, and the seconds until the clock alone would change it (an endpoint behind it expires,
# the rotation's overlap window ends), NULL when nothing would.
_KEEP_COLS = """
    (SELECT n FROM resolve_epoch) AS epoch,
    extract(epoch FROM least(
        CASE WHEN w.previous_until > now() THEN w.previous_until END,
        (SELECT min(x.expires_at) FROM endpoints x
         WHERE x.expires_at > now()
           AND (x.owner_human = o.owner_human OR x.id IN (
                SELECT r.target_endpoint_id FROM webhook_routes r WHERE r.webhook_id = w.id)))
    ) - now())::float8 AS ttl_s
"""

_RESOLVE_ONE = f"""
    SELECT {_RESOLVED_COLS}, {_KEEP_COLS}
    FROM endpoint_webhooks w JOIN endpoints o ON o.id = w.endpoint_id
""" + (
    " WHERE w.ingest_token_hash = %(h)s"
    " OR (w.previous_token_hash = %(h)s AND w.previous_until > now())"
)

# Every token hash of a batch in one statement, each answer tagged with the hash it
# matched: the current hash (its unique index), else a previous hash inside its overlap
# window (its partial index). Both arms are index lookups per distinct hash; the targets
# and grant are then built once per matched webhook. One statement, one snapshot: what
# had committed when it started is what every delivery of the batch sees.
_RESOLVE_MANY = f"""
    SELECT m.token_hash, m.previous, {_RESOLVED_COLS}, {_KEEP_COLS}
    FROM (
        SELECT q.h AS token_hash, false AS previous, c.id
        FROM unnest(%(hashes)s::text[]) AS q(h)
        JOIN endpoint_webhooks c ON c.ingest_token_hash = q.h
        UNION ALL
        SELECT q.h, true, p.id
        FROM unnest(%(hashes)s::text[]) AS q(h)
        JOIN endpoint_webhooks p ON p.previous_token_hash = q.h
        WHERE p.previous_token_hash IS NOT NULL AND p.previous_until > now()
    ) m
    JOIN endpoint_webhooks w ON w.id = m.id JOIN endpoints o ON o.id = w.endpoint_id
"""


#: Parsed routing documents by their text, marshalled, oldest first (see ``_routing_doc``).
_DOCS: dict[str, bytes] = {}
#: What they may hold in all (text and marshalled form): a worker never keeps more.
DOCS_BUDGET = 8 * 2**20
_docs_bytes = 0


def _routing_doc(text: str | None) -> Any:
    """The routing document of a resolved row (selected as text), a copy of its own.

    Every delivery of a webhook with rules reads the same document: it is parsed once
    and each delivery gets a ``marshal`` copy (a third of the time ``json.loads`` takes
    for 32 rules). The text is the key, so a saved change is a new document at once.
    """
    global _docs_bytes
    if text is None:
        return None
    blob = _DOCS.get(text)
    if blob is None:
        doc = json.loads(text)
        if len(text) > DOCS_BUDGET // 8:  # never kept (below): not marshalled either
            return doc
        blob = marshal.dumps(doc)
        size = len(text) + len(blob)
        if size > DOCS_BUDGET // 8:  # a huge document is parsed every time, never kept
            return doc
        while _DOCS and _docs_bytes + size > DOCS_BUDGET:
            old_text, old_blob = next(iter(_DOCS.items()))  # the oldest parsed
            del _DOCS[old_text]
            _docs_bytes -= len(old_text) + len(old_blob)
        _DOCS[text] = blob
        _docs_bytes += size
    return marshal.loads(blob)


def _adopt(row: Row | None) -> Row | None:
    """``row`` with its routing document parsed (``_RESOLVED_COLS`` selects it as text)."""
    if row is not None:
        row["routing"] = _routing_doc(row["routing"])
    return row


def _own_copy(row: Row) -> Row:
    """``row`` with deep copies of its documents (source config, targets, queues).

    They are what psycopg parsed from JSON: dicts, lists, strings, numbers, booleans and
    None, which ``marshal`` copies in C at about 2.4 times the speed of ``json_copy`` (a
    webhook with 32 rules: 20 us against 47, for nearly every delivery of a busy webhook).
    The other columns (ids, bytes, booleans) are immutable and shared.
    """
    return {
        k: marshal.loads(marshal.dumps(v)) if isinstance(v, dict | list) else v
        for k, v in row.items()
    }


class WebhookQueries:
    db: Database
    #: Concurrent token lookups, one query each batch (see ``Store.__init__``).
    resolver: Batcher[str, Row | None]
    #: This worker's kept resolutions (see ``Store.__init__``).
    resolutions: ResolutionCache

    async def get_webhook(self, webhook_id: str) -> Row | None:
        if not is_uuid(webhook_id):
            return None
        return await self.db.fetchone(
            f"SELECT {_WEBHOOK_COLS} FROM endpoint_webhooks w "
            "JOIN endpoints e ON e.id = w.endpoint_id WHERE w.id = %s",
            (webhook_id,),
        )

    async def list_webhooks_of_human(self, human_id: str) -> list[Row]:
        return await self.list_webhooks(human_id)

    async def list_webhooks(self, owner_human: str | None = None) -> list[Row]:
        """Every webhook, or one human's, oldest first, with its endpoint's and owner's names."""
        where, params = ("WHERE e.owner_human = %s ", (owner_human,)) if owner_human else ("", ())
        return await self.db.fetchall(
            f"SELECT {_WEBHOOK_COLS}, e.name AS endpoint_name, h.name AS owner_name"
            " FROM endpoint_webhooks w JOIN endpoints e ON e.id = w.endpoint_id"
            " JOIN humans h ON h.id = e.owner_human " + where + "ORDER BY w.created_at, w.id",
            params,
        )

    async def rotate_webhook(
        self, webhook_id: str, token_hash: str, secret_enc: bytes | None, overlap_seconds: float = 0
    ) -> Row:
        """New credentials; the old ones keep working for ``overlap_seconds`` (0: none).

        Only the credentials being replaced get the overlap: a rotation inside another's
        window ends that window (two old generations are never live at once).
        """
        row = await self.db.fetchone(
            "UPDATE endpoint_webhooks SET"
            " previous_token_hash = CASE WHEN %(overlap)s > 0 THEN ingest_token_hash END,"
            " previous_secret_enc = CASE WHEN %(overlap)s > 0 THEN signing_secret_enc END,"
            " previous_until = CASE WHEN %(overlap)s > 0"
            "   THEN now() + make_interval(secs => %(overlap)s) END,"
            " ingest_token_hash = %(token)s, signing_secret_enc = %(secret)s,"
            " rotated_at = now() WHERE id = %(id)s RETURNING id, rotated_at, previous_until",
            {
                "overlap": float(overlap_seconds),
                "token": token_hash,
                "secret": secret_enc,
                "id": webhook_id,
            },
        )
        if row is None:  # deleted since the caller read it
            raise NotFound(f"webhook {clip(webhook_id)} not found")
        return row

    async def delete_webhook(self, webhook_id: str) -> bool:
        """Delete the webhook and leave its tombstone (one statement: both or neither)."""
        row = await self.db.fetchone(
            "WITH gone AS (DELETE FROM endpoint_webhooks WHERE id = %s RETURNING *)"
            " INSERT INTO deleted_webhooks"
            " (id, endpoint_id, owner_human, source_type, target_queue, created_at)"
            " SELECT g.id, g.endpoint_id, e.owner_human, g.source_type, g.target_queue,"
            " g.created_at FROM gone g JOIN endpoints e ON e.id = g.endpoint_id RETURNING id",
            (webhook_id,),
        )
        return row is not None

    async def get_deleted_webhook(self, webhook_id: str) -> Row | None:
        """A deleted webhook's tombstone: whose it was, and when it went."""
        if not is_uuid(webhook_id):
            return None
        return await self.db.fetchone(
            "SELECT id, endpoint_id, owner_human, source_type, target_queue, created_at,"
            " deleted_at FROM deleted_webhooks WHERE id = %s",
            (webhook_id,),
        )

    async def resolve_webhook(self, token_hash: str) -> Row | None:
        """The webhook behind an ingest token's hash with its live targets and grant queues.

        The previous token (of the last rotation) resolves too, inside its overlap window.
        Concurrent calls share one query (:meth:`resolve_webhooks`): a call made while
        another batch is in the database goes into the next one, so every answer was read
        after the call was made, from what had committed by then.
        """
        row = await self.resolver.submit(token_hash)
        if row is not None:
            self.resolutions.saw(row.pop("epoch"))
            del row["ttl_s"]
        return row

    async def resolve_webhook_kept(self, token_hash: str) -> tuple[Row | None, int | None]:
        """:meth:`resolve_webhook`, from this worker's kept resolutions when it can, and the
        resolve epoch the row was read at (None for no row).

        A delivery writes with that epoch (``record_delivery(epoch=...)``): a kept row that
        a change has made stale stores nothing and raises :class:`StaleResolution`, and the
        delivery resolves again by :meth:`resolve_webhook`.
        """
        kept = self.resolutions.get(token_hash)
        if kept is not None:
            return kept  # a copy for this delivery, its routing document too
        row = await self.resolver.submit(token_hash)
        if row is None:
            return None, None
        epoch, ttl_s = row.pop("epoch"), row.pop("ttl_s")
        self.resolutions.put(token_hash, row, epoch, ttl_s)
        return row, epoch

    async def confirm_epoch(self, epoch: int) -> None:
        """Raise :class:`StaleResolution` unless the resolve epoch is still ``epoch`` (a kept
        resolution confirmed before something that must not be done on a stale one)."""
        row = await self.db.fetchone("SELECT n FROM resolve_epoch")
        now = None if row is None else int(row["n"])
        self.resolutions.saw(now)
        if now != epoch:
            raise StaleResolution(f"resolved at epoch {epoch}, now {now}")

    async def resolve_webhooks(self, token_hashes: Sequence[str]) -> list[Row | None]:
        """:meth:`resolve_webhook` for each hash, in order, with one query.

        A hash asked for twice is looked up once; each asker gets a row of its own (a
        routing stage adopts the row's documents without copying them).
        """
        unique = list(dict.fromkeys(token_hashes))
        found: dict[str, Row] = {}
        if len(unique) == 1:
            # One token (an idle server): the single-token statement, whose plan PostgreSQL
            # keeps; the batch statement's array is planned at every execution.
            one = await self.db.fetchone(_RESOLVE_ONE, {"h": unique[0]})
            if one is not None:
                found[unique[0]] = one
        else:
            for row in await self.db.fetchall(_RESOLVE_MANY, {"hashes": unique}):
                token_hash, previous = row.pop("token_hash"), row.pop("previous")
                # A current token wins over a previous one (hashes of random tokens never
                # collide; this only makes the answer deterministic if they did).
                if token_hash not in found or not previous:
                    found[token_hash] = row
        answers: list[Row | None] = []
        handed: set[str] = set()
        for token_hash in token_hashes:
            match = found.get(token_hash)
            if match is not None:
                # each asker's routing document is its own (parsed from the shared text)
                match = _adopt(_own_copy(match) if token_hash in handed else dict(match))
            answers.append(match)
            handed.add(token_hash)
        return answers

    async def resolve_webhook_by_id(self, webhook_id: str) -> Row | None:
        if not is_uuid(webhook_id):
            return None
        return _adopt(await self.db.fetchone(_RESOLVED + " WHERE w.id = %s", (webhook_id,)))

    async def endpoint_grant_queues(self, endpoint_id: str) -> list[str] | None:
        """The queues any webhook this endpoint owns may route to, or None (no such endpoint).

        The endpoint's webhook queues plus the scopes of its human's other live endpoints:
        the grant of :func:`switchboard.routing.route.grant_for` before a webhook adds its
        own target queue (which is one of the webhook queues anyway). Settings that name
        queues for every webhook of an endpoint (LLM triage) are checked against it.
        """
        if not is_uuid(endpoint_id):
            return None
        row = await self.db.fetchone(
            "SELECT o.webhook_queues, "
            f"({_HUMAN_QUEUES}) AS human_queues"
            " FROM endpoints o, (SELECT %s::uuid AS endpoint_id) w WHERE o.id = w.endpoint_id",
            (endpoint_id,),
        )
        if row is None:
            return None
        return list(dict.fromkeys([*row["webhook_queues"], *row["human_queues"]]))

    # -- routes ------------------------------------------------------------------------

    async def add_route(
        self,
        webhook_id: str,
        target_endpoint_id: str,
        granted_by: str | None,
        *,
        owner_human: str,
        target_human: str,
    ) -> Row | None:
        """The route, or None when ``owner_human`` may not route to ``target_human`` (no
        approved friendship); NotFound when the webhook is gone.

        The friendship is checked under a share lock in the insert's transaction: a removal
        (which deletes the routes it authorized) waits for it and then deletes this route
        too, where a check made apart let a route outlive its friendship's removal.
        """
        async with self.db.tx() as conn:
            if owner_human != target_human:
                cur = await conn.execute(
                    "SELECT 1 AS ok FROM friendships WHERE from_human = %s AND to_human = %s"
                    " AND state = 'approved' FOR SHARE",
                    (owner_human, target_human),
                )
                if await cur.fetchone() is None:
                    return None
            try:
                cur = await conn.execute(
                    "INSERT INTO webhook_routes (webhook_id, target_endpoint_id, granted_by)"
                    " VALUES (%s, %s, %s) ON CONFLICT (webhook_id, target_endpoint_id)"
                    " DO UPDATE SET webhook_id = EXCLUDED.webhook_id"
                    " RETURNING webhook_id, target_endpoint_id, granted_by, granted_at",
                    (webhook_id, target_endpoint_id, granted_by),
                )
            except errors.ForeignKeyViolation:
                # deleted since the caller read it (or the target endpoint was)
                raise NotFound(f"webhook {clip(webhook_id)} not found") from None
            row: Row | None = await cur.fetchone()
            return row

    async def remove_route(self, webhook_id: str, target_endpoint_id: str) -> bool:
        if not is_uuid(target_endpoint_id):
            return False
        row = await self.db.fetchone(
            "DELETE FROM webhook_routes WHERE webhook_id = %s AND target_endpoint_id = %s"
            " RETURNING webhook_id",
            (webhook_id, target_endpoint_id),
        )
        return row is not None

    async def list_routes(self, webhook_id: str) -> list[Row]:
        return await self.db.fetchall(
            "SELECT r.webhook_id, r.target_endpoint_id, r.granted_by, r.granted_at,"
            " e.name AS target_name, e.state AS target_state"
            " FROM webhook_routes r JOIN endpoints e ON e.id = r.target_endpoint_id"
            " WHERE r.webhook_id = %s ORDER BY r.granted_at, r.target_endpoint_id",
            (webhook_id,),
        )

    # -- routing config ----------------------------------------------------------------

    async def save_routing(self, conn: Any, webhook_id: str, config: RoutingConfig) -> None:
        await conn.execute(
            "UPDATE endpoint_webhooks SET routing = %s WHERE id = %s",
            (Jsonb(config.to_json()), webhook_id),
        )

    async def lock_webhook(self, conn: Any, webhook_id: str) -> Row | None:
        """``SELECT … FOR UPDATE``: mutations of one webhook's routing serialize here.

        The row's ``routing_version`` may predate the wait for the lock (a subquery keeps
        the statement's snapshot): read the version after it (``routing_version``)."""
        cur = await conn.execute(
            f"SELECT {_WEBHOOK_COLS} FROM endpoint_webhooks w "
            "JOIN endpoints e ON e.id = w.endpoint_id WHERE w.id = %s FOR UPDATE OF w",
            (webhook_id,),
        )
        row: Row | None = await cur.fetchone()
        return row

    async def create_webhook_within(
        self, endpoint_id: str, webhook_max: int, **fields: Any
    ) -> Row | None:
        """Insert unless the endpoint already owns ``webhook_max`` webhooks (then None).

        The count and the insert run under the owner endpoint's row lock, so two
        creations racing for the last slot cannot both land.
        """
        async with self.db.tx() as conn:
            await conn.execute("SELECT 1 FROM endpoints WHERE id = %s FOR UPDATE", (endpoint_id,))
            cur = await conn.execute(
                "SELECT count(*) AS n FROM endpoint_webhooks WHERE endpoint_id = %s",
                (endpoint_id,),
            )
            count = await cur.fetchone()
            if count is not None and int(count["n"]) >= webhook_max:
                return None
            cur = await conn.execute(
                "INSERT INTO endpoint_webhooks (endpoint_id, source_type, target_queue,"
                " trust_mode, ingest_token_hash, signing_secret_enc, source_config) VALUES"
                " (%(endpoint_id)s, %(source_type)s, %(target_queue)s, %(trust_mode)s,"
                " %(ingest_token_hash)s, %(signing_secret_enc)s, %(source_config)s)"
                " RETURNING id, created_at",
                {"endpoint_id": endpoint_id, "source_config": None, **fields},
            )
            row: Row | None = await cur.fetchone()
            return row

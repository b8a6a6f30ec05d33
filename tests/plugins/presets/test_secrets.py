"""Every preset: a producer's own secret imported, and a rotation's overlap window."""

from __future__ import annotations

import base64
import json
import secrets
import time
from typing import Any

import pytest
from sbpresets import PRESET_SOURCES, create, post, source, token_of, trace_of
from sbtest import remember_secrets

from switchboard.errors import InvalidArgument
from switchboard.runtime import Runtime
from switchboard.service import webhooks


def producer_secret() -> str:
    """A secret as producers make them (whsec_ + base64): fits raw and base64 schemes alike."""
    made = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    remember_secrets({"signing_secret": made})  # server logs are scanned for it
    return made


def delivery(rt: Runtime, name: str, secret: str, n: int) -> tuple[dict[str, Any], bytes]:
    """Delivery ``n`` of the preset's producer, signed with ``secret`` now."""
    body = json.dumps(
        {
            "id": f"evt_{n}",
            "event_id": f"Ev{n}",
            "type": "thing.happened",
            "object_kind": "push",
            "n": n,
        }
    ).encode()
    headers = source(rt, name).sign(
        body, secret.encode(), "thing.happened", delivery_id=f"d-{n}", now=time.time()
    )
    return headers, body


async def _end_overlap(rt: Runtime, webhook_id: str) -> None:
    await rt.store.db.fetchone(
        "UPDATE endpoint_webhooks SET previous_until = now() - interval '1 second'"
        " WHERE id = %s RETURNING id",
        (webhook_id,),
    )


@pytest.mark.parametrize("name", PRESET_SOURCES)
async def test_an_imported_secret_round_trips_and_is_never_shown(
    preset_runtime: Runtime,
    name: str,
) -> None:
    rt = preset_runtime
    mine = producer_secret()
    created = await create(rt, name, mine)
    assert created["signing_secret_imported"] is True and mine not in json.dumps(created)
    stored = await rt.store.db.fetchone(
        "SELECT row_to_json(w)::text AS doc FROM endpoint_webhooks w WHERE id = %s",
        (created["webhook_id"],),
    )
    assert stored is not None and mine not in stored["doc"]  # sealed, like a minted one
    row = await rt.store.get_webhook(created["webhook_id"])
    assert row is not None
    listed = await webhooks.list_webhooks(rt, await rt.store.get_endpoint(row["endpoint_id"]))
    assert mine not in json.dumps(listed)
    headers, body = delivery(rt, name, mine, 1)
    assert (await post(rt, token_of(created), headers, body)).status == 202


@pytest.mark.parametrize("name", PRESET_SOURCES)
async def test_rotation_keeps_the_previous_secret_for_its_window(
    preset_runtime: Runtime,
    name: str,
) -> None:
    rt = preset_runtime
    old, new = producer_secret(), producer_secret()
    created = await create(rt, name, old)
    wid = created["webhook_id"]
    rotated = await webhooks.rotate_webhook(rt, None, wid, signing_secret=new)
    assert rotated["signing_secret_imported"] is True and rotated["previous_until"]
    token = token_of(rotated)
    # the producer still signs with the old secret for a while: it verifies ...
    h, b = delivery(rt, name, old, 1)
    assert (await post(rt, token, h, b)).status == 202
    # ... and so does the new one; the trace says which one did
    h, b = delivery(rt, name, new, 2)
    assert (await post(rt, token, h, b)).status == 202
    # the old URL too, inside the window
    h, b = delivery(rt, name, new, 3)
    assert (await post(rt, token_of(created), h, b)).status == 202
    assert [t.get("secret") for t in await trace_of(rt, wid)] == ["previous", "current", "current"]
    await _end_overlap(rt, wid)
    h, b = delivery(rt, name, old, 4)
    assert (await post(rt, token, h, b)).status == 401  # after the window: refused
    h, b = delivery(rt, name, new, 5)
    assert (await post(rt, token, h, b)).status == 202
    assert "secret" not in (await trace_of(rt, wid))[-1]  # one secret again: nothing to say


# Spaces and non-ASCII text are taken, as forges take them: tests/test_forge_secrets.py.
@pytest.mark.parametrize(
    "bad", ["short", "tab\there-and-more", "nul\x00here-and-more", "x" * 1025, 12345678]
)
async def test_an_unusable_secret_is_refused_naming_the_field_and_the_limit(
    preset_runtime: Runtime,
    bad: Any,
) -> None:
    with pytest.raises(InvalidArgument) as err:
        await create(preset_runtime, PRESET_SOURCES[0], bad)
    assert str(err.value).startswith("signing_secret: ")

"""How many connections a worker holds open: at most ``server.max_connections``, and
``server.max_connections_per_client`` from one address, the rest answered 503 at once."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

log = logging.getLogger("switchboard.app")

#: Where create_app leaves the caps for the protocol to read (0: no cap).
TOTAL_KEY = "SWITCHBOARD_MAX_CONNECTIONS"
PER_CLIENT_KEY = "SWITCHBOARD_MAX_CONNECTIONS_PER_CLIENT"
#: The defaults (README: ``server.max_connections``, ``server.max_connections_per_client``).
MAX_CONNECTIONS = 2048
MAX_PER_CLIENT = 512

_BODY = json.dumps({"error": "too many connections", "code": "unavailable"}).encode()
#: The whole answer to a connection over a cap: nothing of the request is read.
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: application/json\r\n"
    b"Retry-After: 2\r\n"
    b"Connection: close\r\n"
    b"Content-Length: " + str(len(_BODY)).encode() + b"\r\n\r\n" + _BODY
)

#: This process's open connections, in all and by client address.
_open = [0]
_by_client: dict[str, int] = {}
#: Refusals since the last line said so (one WARNING a second at most, never one per refusal).
_refused = [0, 0.0]


def admit(config: Any, address: str) -> bool:
    """Count a new connection from ``address`` in, or say it is over a cap."""
    total = int(config.get(TOTAL_KEY, MAX_CONNECTIONS))
    per_client = int(config.get(PER_CLIENT_KEY, MAX_PER_CLIENT))
    mine = _by_client.get(address, 0)
    if (total and _open[0] >= total) or (per_client and mine >= per_client):
        _note_refusal(total, per_client)
        return False
    _open[0] += 1
    _by_client[address] = mine + 1
    return True


def release(address: str) -> None:
    """Count a connection that ``admit`` let in out again."""
    _open[0] = max(0, _open[0] - 1)
    left = _by_client.get(address, 0) - 1
    if left > 0:
        _by_client[address] = left
    else:
        _by_client.pop(address, None)


def open_connections() -> tuple[int, dict[str, int]]:
    """This process's open connections: in all, and by client address."""
    return _open[0], dict(_by_client)


def _note_refusal(total: int, per_client: int) -> None:
    _refused[0] += 1
    now = time.monotonic()
    if now - _refused[1] >= 1.0:
        log.warning(
            "refused %d connection(s) over the caps (server.max_connections %d, "
            "max_connections_per_client %d): answered 503",
            int(_refused[0]),
            total,
            per_client,
        )
        _refused[0], _refused[1] = 0, now

"""The HTTP floor: a Sanic app that answers every POST with a fixed 202, doing nothing else.

Run: python bench/bare_sanic.py PORT WORKERS. ``ingest.py --floor`` starts it and loads it
with the same client as the receiver: what no Sanic receiver can exceed on this machine.
"""

from __future__ import annotations

import sys

from sanic import Sanic
from sanic.response import raw

app = Sanic("bare_floor")
app.config.ACCESS_LOG = False
app.config.MOTD = False
REPLY = b'{"todos":[],"created":0,"verified":false,"trust_mode":"open"}'


@app.post("/hooks/<token:str>")
async def hook(request: object, token: str) -> object:
    return raw(REPLY, status=202, content_type="application/json")


@app.get("/healthz")
async def healthz(request: object) -> object:
    return raw(b'{"status":"ok"}', content_type="application/json")


if __name__ == "__main__":
    port, workers = int(sys.argv[1]), int(sys.argv[2])
    app.run(
        host="127.0.0.1", port=port, workers=workers, single_process=workers == 1, access_log=False
    )

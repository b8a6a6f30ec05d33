"""The rules page's history: a webhook's versions (``service.versions``) and the diff of
any two versions' configs, line by line."""

from __future__ import annotations

import difflib
import json
from typing import Any

from switchboard.runtime import Runtime
from switchboard.service import versions

from . import params

Row = dict[str, Any]
#: Versions the page lists (the newest).
SHOWN = 50


async def history(rt: Runtime, who: Row, webhook_id: str, args: Any) -> Row:
    """The newest versions and, when ``a`` and ``b`` are picked, the diff from a to b."""
    listed = await versions.list_versions(rt, who, webhook_id, limit=SHOWN)
    out: Row = {**listed, "a": None, "b": None, "lines": None}
    a, b = params.version(args.get("a"), "a"), params.version(args.get("b"), "b")
    if a is None or b is None:
        return out
    old = await versions.get_version(rt, who, webhook_id, a)
    new = await versions.get_version(rt, who, webhook_id, b)
    out.update(a=old, b=new, lines=diff_lines(old["config"], new["config"], a, b))
    return out


def diff_lines(old: Any, new: Any, a: int, b: int) -> list[tuple[str, str]]:
    """A unified diff of two configs written out the same way: (kind, line) pairs, kind
    ``add``, ``del``, ``hunk`` or ``same``."""

    def text(doc: Any) -> list[str]:
        return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False).splitlines()

    out: list[tuple[str, str]] = []
    for line in difflib.unified_diff(
        text(old), text(new), f"version {a}", f"version {b}", lineterm="", n=3
    ):
        if line.startswith(("---", "+++")):
            continue
        kind = {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "same")
        out.append((kind, line))
    return out

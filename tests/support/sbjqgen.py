"""Random envelopes for the tests that run generated rules through jq (reads, single)."""

from __future__ import annotations

import random
from typing import Any

KEYS = ["a", "b", "kind", "payload", "x"]


def gen_value(r: random.Random, depth: int = 0) -> Any:
    pick = r.random() if depth < 3 else r.random() * 0.5
    if pick < 0.1:
        return None
    if pick < 0.2:
        return r.choice([True, False])
    if pick < 0.3:
        return r.choice([0, 1, -2, 2.5])
    if pick < 0.45:
        return r.choice(["a", "b", "x", "bug", ""])
    if pick < 0.6:
        return [gen_value(r, depth + 1) for _ in range(r.randint(0, 3))]
    return {k: gen_value(r, depth + 1) for k in r.sample(KEYS, r.randint(0, len(KEYS)))}


def gen_envelope(r: random.Random) -> dict[str, Any]:
    env = gen_value(r)
    return env if isinstance(env, dict) else {"a": env}

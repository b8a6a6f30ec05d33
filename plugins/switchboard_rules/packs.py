"""The rule packs this plugin ships: ready-made routing configs for lanes and review pools.

A pack is a ``set_webhook_rules`` body without ``webhook_id``: it names queues, never
endpoints, so one pack fits every deployment whose lane endpoints drain those queues
(``exclusive`` picks the endpoint; a missing one fails the install). Every allowlist is read
from ``$params``; a param that is missing or of the wrong type allows nothing, so a pack
installed without its params drops what it would have routed (it fails closed). The
expressions only ever produce booleans, so a missing field never becomes an error: a fault
would take the default, and these defaults are the safe outcome anyway.
"""

from __future__ import annotations

from typing import Any

#: The lanes, smallest first; ``hold`` has no worker, ``triage`` sorts unsized work.
LANES = ("s", "m", "l", "vision")


def _allowed(value: str, param: str) -> str:
    """``value`` (a jq path) is one of the strings of ``$params.<param>``; never an error."""
    return f"({value} as $v | [$params.{param} | arrays // [] | .[] | strings] | any(. == $v))"


#: A trusted forge issue: from an allowed repository, sent by an allowed actor (the sender
#: is who opened, labelled or edited it). Pull requests have no ``.issue``.
FORGE_TRUSTED = (
    f"(.issue != null and {_allowed('.issue.repo', 'trusted_repos')}"
    f" and {_allowed('.issue.sender', 'trusted_actors')})"
)
#: A trusted Cairn handoff: created by an allowed actor (the authenticated actor_id, never
#: on_behalf_of or a tag) and tagged ``handoff``.
CAIRN_HANDOFF = (
    f'(.source == "cairn" and .kind == "artifact.created"'
    f" and {_allowed('.artifact.actor_id', 'trusted_actors')}"
    ' and ((.artifact.tags | arrays // []) | any(. == "handoff")))'
)
#: Every size hint a delivery carries: forge labels and Cairn tags (string entries only).
_HINTS = "[(.issue.labels | arrays // [])[], (.artifact.tags | arrays // [])[] | strings]"


def _hinted(*names: str) -> str:
    wanted = " or ".join(f'. == "{n}"' for n in names)
    return f"({_HINTS} | any({wanted}))"


def _lane_action(queue: str) -> dict[str, Any]:
    return {"queue": queue, "exclusive": True, "once": True, "work_order": True}


LANES_PACK: dict[str, Any] = {
    "rules": [
        {
            "id": "untrusted",
            "name": "not from a trusted repository and actor: dropped",
            "expr": f"({FORGE_TRUSTED} or {CAIRN_HANDOFF}) | not",
            "action": {"drop": True},
        },
        {
            "id": "closed",
            "name": "closed issues are no work",
            "expr": '.issue != null and .issue.state == "closed"',
            "action": {"drop": True},
        },
        {
            "id": "hold",
            "name": "held: labelled hold or tagged lane:hold",
            "expr": _hinted("hold", "lane:hold"),
            "action": _lane_action("hold"),
        },
        *[
            {
                "id": f"lane-{lane}",
                "name": f"size:{lane} label or lane:{lane} tag",
                "expr": _hinted(f"size:{lane}", f"lane:{lane}"),
                "action": _lane_action(f"lane-{lane}"),
            }
            for lane in reversed(LANES)  # the largest size wins when several are set
        ],
        {
            "id": "unsized",
            "name": "trusted but unsized: triage",
            "expr": "true",
            "action": _lane_action("triage"),
        },
    ],
    "default_action": {"drop": True},
}

CAIRN_HANDOFF_PACK: dict[str, Any] = {
    "rules": [
        {
            "id": f"handoff-lane-{lane}",
            "name": f"trusted handoffs tagged lane:{lane}",
            "expr": f"{CAIRN_HANDOFF} and {_hinted(f'lane:{lane}')}",
            "action": {"queue": f"lane-{lane}", "exclusive": True, "work_order": True},
        }
        for lane in LANES
    ],
    "default_action": {"drop": True},
}

#: The pull request events that ask a pool to review.
_REVIEW_TRIGGERS = (
    "opened",
    "reopened",
    "ready_for_review",
    "synchronize",
    "synchronized",
    "review_requested",
)
#: No usable ``$params.identity`` (missing, not a string, empty): every trigger drops.
_NO_IDENTITY = '(($params.identity | type) != "string" or $params.identity == "")'

POOL_REVIEW_PACK: dict[str, Any] = {
    "rules": [
        {
            "id": "not-for-me",
            "name": "review requests addressed to another identity",
            "expr": (
                '.kind == "pull_request" and .payload.action == "review_requested"'
                f" and ({_NO_IDENTITY}"
                " or .payload.requested_reviewer.login != $params.identity)"
            ),
            "action": {"drop": True},
        },
        {
            "id": "own-pull-request",
            "name": "review triggers on the identity's own pull requests",
            "expr": (
                '.kind == "pull_request" and (.payload.action as $a | '
                + "["
                + ", ".join(f'"{a}"' for a in _REVIEW_TRIGGERS)
                + "] | any(. == $a))"
                f" and ({_NO_IDENTITY}"
                " or .payload.pull_request.user.login == $params.identity)"
            ),
            "action": {"drop": True},
        },
    ],
}

PACKS: dict[str, tuple[dict[str, Any], str]] = {
    "cairn-handoff": (
        CAIRN_HANDOFF_PACK,
        (
            "Cairn handoffs created by a trusted actor ($params.trusted_actors), tagged handoff"
            " and lane:<s|m|l|vision>, to that lane's queue (lane-s ...) on the first target"
            " draining it, with a work order; everything else dropped"
        ),
    ),
    "lanes": (
        LANES_PACK,
        (
            "Forge issues from $params.trusted_repos sent by $params.trusted_actors, and Cairn"
            " handoffs by $params.trusted_actors, to lane-s/lane-m/lane-l/lane-vision by size"
            " label (size:<x>) or lane tag (lane:<x>), hold when labelled hold, triage when"
            " unsized; exclusive, once per subject and lane, with work orders; closed issues and"
            " everything else dropped"
        ),
    ),
    "pool-review": (
        POOL_REVIEW_PACK,
        (
            "For a review pool's webhook, with $params.identity (the pool's login): drops review"
            " requests not addressed to that identity and review triggers on its own pull"
            " requests; everything else reaches the pool (without the identity, every review"
            " trigger is dropped)"
        ),
    ),
}

"""The sandbox's limits as configured, and the error it raises when it cannot answer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from switchboard.plugin import StoreUnavailable

#: Time allowed for parsing the envelope on top of the budgets (~0.1 ms per KB measured).
PARSE_S_PER_BYTE = 0.25e-3 / 1024


class SandboxUnavailable(StoreUnavailable):
    """The sandbox could not answer (busy or broken); the caller may retry later."""


@dataclass(frozen=True)
class Limits:
    """The sandbox's limits, named and counted as in ``[plugins.rules]``.

    No defaults here: those are written once, in ``stage.CONFIG_SCHEMA``, and filled into
    the plugin's config section before :meth:`from_config` reads it.
    """

    max_concurrency: int  #: evaluations running at once (all owners together)
    owner_concurrency: int  #: evaluations one owner may run at once
    slot_wait_ms: int  #: how long a delivery waits for its slots (then: sandbox_busy)
    compile_concurrency: int  #: compiles (saves, dry runs) at once; one per owner
    compile_wait_ms: int  #: how long a compile waits for its slot (then: busy, try again)
    memory_mib: int  #: address space of each zygote and evaluator
    ruleset_mib: int  #: the most a compiled rule set may take (refused at save beyond)
    memory_budget_mib: int  #: the whole sandbox tree's memory (PSS), kept by eviction
    rule_ms: int  #: one rule's time
    event_ms: int  #: one event's time across all its rules
    kill_grace_ms: int  #: on top of event_ms, before the server kills an evaluator
    cache_size: int  #: zygotes kept, one per rule set and webhook
    compile_ms: int  #: a rule set's whole compile
    evaluator_uses: int  #: evaluations an evaluator serves before it is replaced

    @classmethod
    def from_config(cls, section: Mapping[str, Any]) -> Limits:
        """The limits in the plugin's config section (its schema's defaults filled in)."""
        return cls(**{f.name: section[f.name] for f in fields(cls)})

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * 2**20

"""The rules stage: no rules never touches a process; a match decides, no match passes."""

from __future__ import annotations

from pathlib import Path

from switchboard_rules import stage_of
from switchboard_rules.sandbox import Limits

from switchboard.config import load_config
from switchboard.plugin import Grant, RoutingConfig, RoutingContext, Target
from switchboard.runtime import Runtime

GRANT = Grant("inbox", ("inbox", "triage"), (Target("owner"), Target("pool")))
ENVELOPE = {"source": "generic", "kind": None, "payload": {"n": 2}, "headers": {}}


async def test_webhooks_without_rules_never_touch_the_sandbox() -> None:
    stage = stage_of(Runtime(load_config(env={})))
    result = await stage.route(RoutingContext({}, ENVELOPE, GRANT, RoutingConfig()))
    assert result.decision is None and result.faults == ()
    assert stage._sandbox is None  # no fork server was even created


async def test_match_decides_and_no_match_passes_to_the_next_stage() -> None:
    stage = stage_of(Runtime(load_config(env={})))
    try:
        rules = [
            {
                "id": "big",
                "expr": ".payload.n > $params.min",
                "action": {"queue": "triage", "endpoints": ["pool"]},
            }
        ]
        hit = await stage.route(
            RoutingContext({}, ENVELOPE, GRANT, RoutingConfig(tuple(rules), params={"min": 1}))
        )
        assert hit.decision is not None and hit.decision.endpoints == ("pool",)
        assert hit.decision.trace["rule_id"] == "big"
        miss = await stage.route(
            RoutingContext({}, ENVELOPE, GRANT, RoutingConfig(tuple(rules), params={"min": 5}))
        )
        assert miss.decision is None  # the next stage or the default decides
    finally:
        await stage.close()


async def test_a_rule_set_is_worked_out_once_and_again_when_anything_of_it_changes() -> None:
    """Each delivery's config is its own copy: the stage keeps what it works out of a rule
    set (ids, zygote key, the paths read) by the rules' ids and expressions, the params
    and the webhook, so a change to any of them is a rule set of its own."""
    stage = stage_of(Runtime(load_config(env={})))

    def config(rid: str, expr: str, **params: int) -> RoutingConfig:
        return RoutingConfig(
            ({"id": rid, "expr": expr, "action": {"queue": "triage"}},), params=params
        )

    async def rule_id(cfg: RoutingConfig, webhook: str = "w1") -> str | None:
        ctx = RoutingContext({"id": webhook, "owner_human": "h"}, ENVELOPE, GRANT, cfg)
        hit = await stage.route(ctx)
        return None if hit.decision is None else hit.decision.trace["rule_id"]

    try:
        assert await rule_id(config("one", ".payload.n == 2")) == "one"
        assert await rule_id(config("one", ".payload.n == 2")) == "one"
        assert len(stage._prepared) == 1
        assert await rule_id(config("two", ".payload.n == 2")) == "two"  # a new id
        assert await rule_id(config("two", ".payload.n == 3")) is None  # a new expression
        assert await rule_id(config("two", ".payload.n == $params.n", n=2)) == "two"
        assert await rule_id(config("two", ".payload.n == $params.n", n=3)) is None  # params
        assert await rule_id(config("two", ".payload.n == 2"), webhook="w2") == "two"
        refs = list(stage._prepared.values())
        assert len(refs) == 6
        assert refs[0].ref.key != refs[-1].ref.key  # another webhook: another zygote
        for i in range(2 * stage.sandbox.limits.cache_size + 5):  # kept within bounds
            stage._prepare(({"id": "x", "expr": f".n == {i}"},), {}, "w3")
        assert len(stage._prepared) == 2 * stage.sandbox.limits.cache_size
    finally:
        await stage.close()


def test_every_plugins_rules_key_reaches_the_sandbox(tmp_path: Path) -> None:
    config = tmp_path / "sb.toml"
    config.write_text(
        "[plugins.rules]\nmax_concurrency = 3\nslot_wait_ms = 250\nmemory_mib = 96\n"
        "rule_ms = 7\nevent_ms = 70\nkill_grace_ms = 500\ncache_size = 5\ncompile_ms = 300\n"
        "owner_concurrency = 1\ncompile_concurrency = 4\ncompile_wait_ms = 900\n"
        "ruleset_mib = 3\nmemory_budget_mib = 200\nevaluator_uses = 9\n"
    )
    stage = stage_of(Runtime(load_config(str(config), env={})))
    assert stage.sandbox.limits == Limits(
        max_concurrency=3,
        slot_wait_ms=250,
        memory_mib=96,
        rule_ms=7,
        event_ms=70,
        kill_grace_ms=500,
        cache_size=5,
        compile_ms=300,
        owner_concurrency=1,
        compile_concurrency=4,
        compile_wait_ms=900,
        ruleset_mib=3,
        memory_budget_mib=200,
        evaluator_uses=9,
    )
    # an unset key takes the schema's default, written nowhere else
    assert stage_of(Runtime(load_config(env={}))).sandbox.limits.rule_ms == 50


async def test_only_the_paths_the_rules_read_reach_the_sandbox() -> None:
    from prometheus_client import REGISTRY

    def sent(cut: str) -> tuple[float, float]:
        labels = {"cut": cut}
        return (
            REGISTRY.get_sample_value("switchboard_sandbox_envelope_bytes_count", labels) or 0.0,
            REGISTRY.get_sample_value("switchboard_sandbox_envelope_bytes_sum", labels) or 0.0,
        )

    big = {
        "source": "generic",
        "kind": "pr",
        "headers": {"x-event": "pull_request"},
        "payload": {"action": "opened", "body": "x" * 20_000, "labels": [{"name": "bug"}]},
    }
    stage = stage_of(Runtime(load_config(env={})))
    try:
        reading = [
            {"id": "a", "expr": '.payload.action == "closed"', "action": {"queue": "triage"}},
            {
                "id": "b",
                "expr": 'any(.payload.labels[]; .name == "bug") and .kind == "pr"',
                "action": {"queue": "triage", "endpoints": ["pool"]},
            },
        ]
        (n0, b0), (w0, _) = sent("paths"), sent("whole")
        hit = await stage.route(RoutingContext({}, big, GRANT, RoutingConfig(tuple(reading))))
        assert hit.decision is not None and hit.decision.trace["rule_id"] == "b"
        (n1, b1), (w1, _) = sent("paths"), sent("whole")
        assert (n1 - n0, w1 - w0) == (1, 0)
        assert b1 - b0 < 200  # the 20 KB body never left the server

        # one rule reading the root sends the whole envelope, for every rule of the set
        whole = [
            {
                "id": "k",
                "expr": '.payload | tojson | test("x{20000}")',
                "action": {"queue": "triage"},
            },
            {
                "id": "r",
                "expr": '(keys | length) == 4 and .kind == "pr"',
                "action": {"queue": "triage", "endpoints": ["pool"]},
            },
        ]
        (w1, wb1) = sent("whole")
        hit = await stage.route(RoutingContext({}, big, GRANT, RoutingConfig(tuple(whole))))
        assert hit.decision is not None and hit.decision.trace["rule_id"] == "k"
        hit = await stage.route(RoutingContext({}, big, GRANT, RoutingConfig(tuple(whole[1:]))))
        assert hit.decision is not None and hit.decision.trace["rule_id"] == "r"
        (n3, _), (w3, wb3) = sent("paths"), sent("whole")
        assert (n3 - n1, w3 - w1) == (0, 2) and wb3 - wb1 > 40_000
    finally:
        await stage.close()


async def test_history_verdicts_read_only_their_paths_and_say_the_same() -> None:
    """A diff's envelopes go projected to the paths of every config's rules: same verdicts."""
    saved = RoutingConfig(
        (
            {"id": "a", "expr": ".payload.n > 1", "action": {"queue": "inbox"}},
            {"id": "b", "expr": '.payload.tags | test("x"; null)', "action": {"queue": "inbox"}},
        )
    )
    candidate = RoutingConfig(
        ({"id": "c", "expr": ".headers.h == null", "action": {"queue": "inbox"}},)
    )
    envelopes = [
        {**ENVELOPE, "payload": {"n": n, "tags": tags, "body": "y" * 5000}}
        for n, tags in ((0, "x"), (2, ["x"]), (3, None), (1, {"k": "x"}))
    ]
    stage = stage_of(Runtime(load_config(env={})))
    try:
        prepare = stage.preparer((saved, candidate))
        assert all(len(prepare(e)) < 300 for e in envelopes)  # the 5 KB body stays behind
        whole = await stage.verdicts(
            (saved, candidate), [stage.prepare(e) for e in envelopes], webhook={}
        )
        cut = await stage.verdicts((saved, candidate), envelopes, webhook={})
        assert cut == whole
        # the type errors quote the value they met, the same from either envelope
        assert whole[1][0][1].verdict == "error" and "array" in str(whole[1][0][1].detail)
        reading_root = RoutingConfig(
            ({"id": "k", "expr": "keys | length > 3", "action": {"queue": "inbox"}},)
        )
        assert len(stage.preparer((saved, reading_root))(envelopes[0])) > 5000
    finally:
        await stage.close()


async def test_a_rule_nested_too_deep_to_analyse_still_routes_whole() -> None:
    deep = "(" * 1300 + ".payload.n == 2" + ")" * 1300  # jq compiles it; 2.6 KB
    stage = stage_of(Runtime(load_config(env={})))
    try:
        rules = ({"id": "deep", "expr": deep, "action": {"queue": "triage"}},)
        hit = await stage.route(RoutingContext({}, ENVELOPE, GRANT, RoutingConfig(rules)))
        assert hit.decision is not None and hit.decision.trace["rule_id"] == "deep"
    finally:
        await stage.close()

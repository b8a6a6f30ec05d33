"""`switchboard rules check|test`: the offline tools operators run in CI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sbtest import SWITCHBOARD, make_env

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _cli(tmp_path: Path) -> Any:
    from sbtest import CLI

    return CLI(make_env(None, tmp_path / "data"))


def _write(tmp_path: Path, name: str, doc: Any) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


GRANT = {"target_queue": "inbox", "queues": ["inbox", "handoff"], "endpoints": ["owner", "pool"]}


@pytest.mark.parametrize(
    ("config", "code", "index"),
    [
        ({"rules": [{"expr": "true", "action": {"queue": "inbox"}}] * 33}, "too_many_rules", None),
        (
            {"rules": [{"id": "bad id", "expr": "true", "action": {"queue": "inbox"}}]},
            "invalid_rule",
            0,
        ),
        (
            {
                "rules": [
                    {"id": "a", "expr": "true", "action": {"queue": "inbox"}},
                    {"id": "a", "expr": "true", "action": {"queue": "inbox"}},
                ]
            },
            "invalid_rule",
            1,
        ),
        ({"rules": [{"expr": "", "action": {"queue": "inbox"}}]}, "invalid_expression", 0),
        ({"rules": [{"expr": ".a |||", "action": {"queue": "inbox"}}]}, "invalid_expression", 0),
        ({"rules": [{"expr": "$ENV.HOME", "action": {"queue": "inbox"}}]}, "forbidden_function", 0),
        (
            {"rules": [{"expr": "true", "action": {"queue": "inbox", "drop": True}}]},
            "invalid_rule",
            0,
        ),
        ({"rules": [{"expr": "true", "action": {"queue": "elsewhere"}}]}, "not_granted", 0),
        (
            {"rules": [{"expr": "true", "action": {"queue": "inbox", "endpoints": ["ghost"]}}]},
            "not_granted",
            0,
        ),
        ({"rules": [], "params": {"a": [1, "x"]}}, "invalid_params", None),
    ],
)
def test_check_reports_each_code(tmp_path: Path, config: Any, code: str, index: int | None) -> None:
    cli = _cli(tmp_path)
    proc = cli.run(
        "rules",
        "check",
        _write(tmp_path, "r.json", config),
        "--grant",
        _write(tmp_path, "g.json", GRANT),
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    err = json.loads(proc.stderr.splitlines()[-1])["error"]
    assert err["code"] == code and err["index"] == index and err["message"]


def test_check_accepts_and_normalizes(tmp_path: Path) -> None:
    cli = _cli(tmp_path)
    out = cli.json(
        "rules",
        "check",
        _write(
            tmp_path,
            "r.json",
            {
                "rules": [
                    {
                        "expr": '.payload.env == 1 and .headers["x-input"] == null',
                        "action": {"queue": "inbox"},
                    }
                ]
            },
        ),
    )
    [rule] = out["config"]["rules"]
    assert rule["id"].startswith("rule_") and len(rule["id"]) == 5 + 24


def test_test_routes_a_sample_like_the_receiver(tmp_path: Path) -> None:
    cli = _cli(tmp_path)
    config = {
        "rules": [
            {
                "id": "handoff-lane-m",
                "name": "my handoffs",
                "expr": '(.artifact.tags // []) | any(. == "handoff")',
                "action": {"queue": "handoff", "endpoints": ["pool"]},
            }
        ],
        "default_action": {"drop": True},
    }
    body = FIXTURES / "cairn_artifact_created.json"
    headers = FIXTURES / "cairn_artifact_created.headers.json"
    out = cli.json(
        "rules",
        "test",
        _write(tmp_path, "r.json", config),
        "--source",
        "cairn",
        "--payload",
        str(body),
        "--headers",
        str(headers),
        "--grant",
        _write(tmp_path, "g.json", GRANT),
    )
    assert out["decision"] == {"drop": False, "queue": "handoff", "endpoints": ["pool"]}
    assert out["trace"]["rule_id"] == "handoff-lane-m"
    env = out["envelope"]
    assert env["source"] == "cairn" and env["verified"] is True
    assert env["artifact"]["handle"].startswith("mcp://cairn/")
    assert env["headers"]["x-cairn-signature"] == "«redacted»"

    # Validation comes first, with the same exit code and error document as check.
    bad = cli.run(
        "rules",
        "test",
        _write(tmp_path, "bad.json", {"rules": [{"expr": "input", "action": {"queue": "inbox"}}]}),
        "--source",
        "cairn",
        "--payload",
        "{}",
        check=False,
    )
    assert bad.returncode == 2
    assert json.loads(bad.stderr.splitlines()[-1])["error"]["code"] == "forbidden_function"


def test_test_uses_the_literal_body_and_params(tmp_path: Path) -> None:
    cli = _cli(tmp_path)
    config = {
        "rules": [{"id": "p", "expr": ".payload.n > $params.min", "action": {"queue": "inbox"}}],
        "params": {"min": 3},
    }
    hit = cli.json(
        "rules",
        "test",
        _write(tmp_path, "r.json", config),
        "--source",
        "generic",
        "--payload",
        '{"n": 5}',
    )
    miss = cli.json(
        "rules",
        "test",
        _write(tmp_path, "r.json", config),
        "--source",
        "generic",
        "--payload",
        '{"n": 1}',
    )
    assert hit["trace"]["stage"] == "rule" and miss["trace"]["stage"] == "default"
    assert hit["envelope"]["verified"] is False


def test_rules_commands_need_no_database(tmp_path: Path) -> None:
    cli = _cli(tmp_path)
    cli.json("rules", "check", _write(tmp_path, "r.json", {"rules": []}))
    assert not (tmp_path / "data" / "pg").exists()
    assert SWITCHBOARD


def test_packs_lists_the_shipped_packs_and_checks_offline(tmp_path: Path) -> None:
    cli = _cli(tmp_path).fast()
    listed = cli.json("packs")["packs"]
    assert {"cairn-handoff", "lanes", "pool-review"} <= {p["name"] for p in listed}
    [lanes] = cli.json("packs", "lanes")["packs"]
    assert lanes["plugin"] == "rules" and lanes["description"]
    assert lanes["config"]["default_action"] == {"drop": True}
    assert cli.run("packs", "nope", check=False).returncode != 0
    # A pack is a routing config: `rules check` validates it against a lanes grant.
    queues = ["lane-s", "lane-m", "lane-l", "lane-vision", "triage", "hold"]
    grant = {
        "target_queue": "inbox",
        "queues": ["inbox", *queues],
        "endpoints": ["router", *queues],
        "endpoint_queues": {"router": ["inbox"], **{q: [q] for q in queues}},
    }
    out = cli.json(
        "rules",
        "check",
        _write(tmp_path, "lanes.json", lanes["config"]),
        "--grant",
        _write(tmp_path, "g.json", grant),
    )
    assert out["ok"] is True


def test_json_files_refuse_unknown_keys_naming_them(tmp_path: Path) -> None:
    # A misspelt key is never dropped without a word: the grant, the routing config
    # (its schema is closed) and the diff's candidate each refuse it by name.
    cli = _cli(tmp_path)
    config = _write(tmp_path, "r.json", {"rules": []})
    grant = _write(tmp_path, "g.json", {"target_queue": "inbox", "queus": ["inbox"]})
    proc = cli.run("rules", "check", config, "--grant", grant, check=False)
    assert proc.returncode == 2 and proc.stdout == ""  # a bad input file: exit 2, as below
    assert "invalid_argument: --grant: unknown key 'queus'" in proc.stderr
    config = _write(tmp_path, "r2.json", {"rules": [], "on_faults": "hold"})
    proc = cli.run("rules", "check", config, check=False)
    assert (
        proc.returncode == 2
        and "'on_faults'" in json.loads(proc.stderr.splitlines()[-1])["error"]["message"]
    )
    # on_fault itself is a key of the config (issue 36): checked, not refused
    held = _write(tmp_path, "r3.json", {"rules": [], "on_fault": "hold"})
    assert cli.run("rules", "check", held, check=False).returncode == 0
    wrong = _write(tmp_path, "r4.json", {"rules": [], "on_fault": "later"})
    assert cli.run("rules", "check", wrong, check=False).returncode == 2


def test_the_diff_candidate_refuses_unknown_keys(tmp_path: Path) -> None:
    from switchboard_rules import history_cli

    from switchboard.errors import InvalidArgument

    path = _write(tmp_path, "c.json", {"rules": [], "default_actoin": None, "x": 1})
    with pytest.raises(InvalidArgument, match=r"CANDIDATE: unknown keys 'default_actoin', 'x'"):
        history_cli._read(path)
    assert history_cli._read(_write(tmp_path, "ok.json", {"params": {}})) == {
        "params": {},
        "rules": [],
    }

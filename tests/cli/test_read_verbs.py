"""The operator's read verbs: ``webhook list``, ``events list|show``, ``todos list``.

One scene per module, built through the real CLI and the service layer: alice's signed
github webhook (a ``ping`` rule drops) and her generic one (routed to her ``pool`` too),
bob's generic one; deliveries through ``ingest`` as the receiver runs it; one todo done,
one claimed. Every verb is read back once through the installed ``switchboard`` script (``s.cli``); its
variations run the same ``main`` in this process (``s.fast``), without a child's start-up.
"""

from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
from pathlib import Path
from typing import Any, TypeVar

import pytest
from rich.console import Console
from sbtest import CLI, SWITCHBOARD, make_env
from sbworld import World, on_runtime

from switchboard.cli.render import cell
from switchboard.cli.render import table as make_table
from switchboard.cli.send import build_request
from switchboard.errors import NotFound
from switchboard.runtime import Runtime
from switchboard.service import events, rules, todos
from switchboard.service.ingest import ingest
from switchboard.sources import Headers

T = TypeVar("T")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MISSING = "00000000-0000-0000-0000-000000000000"
TEXT_BODY = b"disk full on host-7\n"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def token_of(hook: dict[str, Any]) -> str:
    return str(hook["ingest_url"]).rsplit("/", 1)[1]


class Scene:
    def __init__(self, cli: CLI, w: World) -> None:
        self.cli, self.w = cli, w
        self.fast = cli.fast()
        self.ids = {name: ep["endpoint_id"] for name, ep in w.endpoints.items()}
        self.hooks: dict[str, dict[str, Any]] = {}
        self.events: dict[str, str] = {}
        self.secrets: list[str] = []


@pytest.fixture(scope="module")
def scene(module_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Scene:
    cli = CLI(make_env(module_dsn, tmp_path_factory.mktemp("read-verbs") / "data"))
    w = World(cli, direct=True)
    for human in ("alice", "bob"):
        w.human(human)
    w.endpoint(
        "alice",
        "router",
        queues="inbox,alerts",
        webhook_queues="inbox,alerts",
        sources="github,generic",
    )
    w.endpoint("alice", "pool", queues="alerts", webhook_queues="", sources="")
    w.endpoint("bob", "bobs", queues="inbox", webhook_queues="inbox", sources="generic")
    s = Scene(cli, w)
    s.hooks["gh"] = w.webhook("router", "github", "inbox")
    s.hooks["gen"] = w.webhook("router", "generic", "alerts")
    s.hooks["bob"] = w.webhook("bobs", "generic", "inbox")
    w.route(s.hooks["gen"]["webhook_id"], "pool")
    for hook in s.hooks.values():
        s.secrets.append(token_of(hook))
    s.secrets.append(s.hooks["gh"]["signing_secret"])

    issue = (FIXTURES / "github_issues_opened.json").read_bytes()
    secret = s.hooks["gh"]["signing_secret"].encode()

    def github(event: str, body: bytes, delivery: str) -> tuple[dict[str, str], bytes]:
        data, headers = build_request(
            "github", body, secret, event, {"X-GitHub-Delivery": delivery}, stamp=False
        )
        return headers, data

    async def build(rt: Runtime) -> None:
        await rules.set_rules(
            rt,
            None,
            s.hooks["gh"]["webhook_id"],
            [{"id": "ping", "expr": '.kind == "ping"', "action": {"drop": True}}],
        )
        posts = [
            ("issue-1", "gh", *github("issues", issue, "gh-1")),
            ("ping", "gh", *github("ping", b'{"zen": "Keep it logically awesome."}', "gh-2")),
            ("issue-2", "gh", *github("issues", issue, "gh-3")),
            ("text", "gen", {"Content-Type": "text/plain", "X-Delivery-Id": "g-1"}, TEXT_BODY),
            (
                "bob",
                "bob",
                {"Content-Type": "application/json", "X-Delivery-Id": "b-1"},
                b'{"host": "b-7", "level": "warn"}',
            ),
        ]
        for name, hook, headers, body in posts:
            reply = await ingest(
                rt, token_of(s.hooks[hook]), Headers(headers), body, headers.get("Content-Type")
            )
            assert reply.status == 202, (name, reply)
            row = await rt.store.db.fetchone(
                "SELECT id FROM events WHERE webhook_id = %s ORDER BY received_at DESC LIMIT 1",
                (s.hooks[hook]["webhook_id"],),
            )
            assert row is not None
            s.events[name] = row["id"]
        router = await rt.store.get_endpoint(s.ids["router"])
        first = await todos.claim_next(rt, router, owner="worker-1", queue="inbox")
        await todos.complete(rt, router, first["todo"]["todo_id"], owner="worker-1")
        await todos.claim_next(rt, router, owner="worker-1", queue="inbox")

    on_runtime(cli.env, build)
    return s


def assert_no_secret(s: Scene, text: str) -> None:
    leaked = [secret for secret in s.secrets if secret in text]
    assert not leaked, leaked


def refused(cli: CLI, *args: str) -> subprocess.CompletedProcess[str]:
    proc = cli.run(*args, check=False)
    assert proc.returncode != 0 and proc.stdout == "", proc
    return proc


# -- webhook list --------------------------------------------------------------------------


def test_webhook_list_every_one_and_by_owner(scene: Scene) -> None:
    s = scene
    proc = s.cli.run("webhook", "list")
    assert_no_secret(s, proc.stdout)
    listed = json.loads(proc.stdout)["webhooks"]
    assert [h["webhook_id"] for h in listed] == [
        s.hooks[k]["webhook_id"] for k in ("gh", "gen", "bob")
    ]
    gh = listed[0]
    assert gh["owner_name"] == "alice" and gh["endpoint_name"] == "router"
    assert gh["endpoint_id"] == s.ids["router"]
    assert gh["source_type"] == "github" and gh["target_queue"] == "inbox"
    assert gh["trust_mode"] == "signed" and gh["rule_count"] == 1
    assert "signing_secret" not in gh and "ingest_url" not in gh
    assert listed[1]["trust_mode"] == "token" and listed[1]["rule_count"] == 0

    alice = s.fast.json("webhook", "list", "--owner", "alice")["webhooks"]
    assert [h["webhook_id"] for h in alice] == [
        s.hooks["gh"]["webhook_id"],
        s.hooks["gen"]["webhook_id"],
    ]
    bob_id = listed[2]["owner_human"]
    bob = s.fast.json("webhook", "list", "--owner", bob_id)["webhooks"]
    assert [(h["webhook_id"], h["owner_name"]) for h in bob] == [
        (s.hooks["bob"]["webhook_id"], "bob")
    ]


def test_unknown_ids_are_refused_as_rotate_refuses_them(scene: Scene) -> None:
    s = scene
    rotate = refused(s.cli, "webhook", "rotate", MISSING)
    assert rotate.stderr.startswith("switchboard: error: not_found: ")
    for args, what in (
        (("webhook", "list", "--owner", "nobody"), "human 'nobody'"),
        (("events", "list", "--webhook", MISSING), f"webhook {MISSING}"),
        (("events", "list", "--webhook", "not-a-uuid"), "webhook not-a-uuid"),
        (("events", "show", MISSING), f"event {MISSING}"),
        (("events", "show", "nope"), "event nope"),
        (("todos", "list", "--endpoint", MISSING), f"endpoint {MISSING}"),
    ):
        proc = refused(s.cli if args[:2] == ("events", "show") else s.fast, *args)
        assert proc.returncode == rotate.returncode, args
        assert proc.stderr == f"switchboard: error: not_found: {what} not found\n", proc.stderr


# -- events list ---------------------------------------------------------------------------


def test_events_list_newest_first_with_filters_and_pages(scene: Scene) -> None:
    s = scene
    gh = s.hooks["gh"]["webhook_id"]
    doc = s.cli.json("events", "list", "--webhook", gh)
    assert doc["webhook_id"] == gh and doc["next_cursor"] is None
    got = [(e["event_id"], e["kind"], e["disposition"]) for e in doc["events"]]
    assert got == [
        (s.events["issue-2"], "issues", "routed"),
        (s.events["ping"], "ping", "dropped"),
        (s.events["issue-1"], "issues", "routed"),
    ]
    first = doc["events"][0]
    assert first["source"] == "github" and first["verified"] is True
    assert first["trust_mode"] == "signed"
    assert first["routing_trace"]["stage"] == "default"
    assert doc["events"][1]["routing_trace"]["rule_id"] == "ping"
    assert "headers" not in first and "payload" not in first

    dropped = s.fast.json("events", "list", "--webhook", gh, "--disposition", "dropped")
    assert [e["event_id"] for e in dropped["events"]] == [s.events["ping"]]
    routed = s.fast.json("events", "list", "--webhook", gh, "--disposition", "routed")
    assert [e["event_id"] for e in routed["events"]] == [s.events["issue-2"], s.events["issue-1"]]

    page = s.fast.json("events", "list", "--webhook", gh, "--limit", "2")
    assert [e["event_id"] for e in page["events"]] == [s.events["issue-2"], s.events["ping"]]
    rest = s.fast.json(
        "events", "list", "--webhook", gh, "--limit", "2", "--cursor", page["next_cursor"]
    )
    assert [e["event_id"] for e in rest["events"]] == [s.events["issue-1"]]
    assert rest["next_cursor"] is None

    # Another webhook's events are not listed under this one.
    bob = s.fast.json("events", "list", "--webhook", s.hooks["bob"]["webhook_id"])
    assert [e["event_id"] for e in bob["events"]] == [s.events["bob"]]


# -- events show ---------------------------------------------------------------------------


def test_events_show_a_signed_json_delivery(scene: Scene) -> None:
    s = scene
    proc = s.cli.run("events", "show", s.events["issue-2"])
    assert_no_secret(s, proc.stdout)
    assert "sha256=" not in proc.stdout
    doc = json.loads(proc.stdout)
    assert doc["event_id"] == s.events["issue-2"]
    assert doc["webhook_id"] == s.hooks["gh"]["webhook_id"]
    assert doc["kind"] == "issues" and doc["disposition"] == "routed" and doc["verified"] is True
    assert doc["headers"]["x-github-event"] == "issues"
    assert doc["headers"]["x-github-delivery"] == "gh-3"
    assert doc["headers"]["x-hub-signature-256"] == "«redacted»"
    assert doc["payload_format"] == "json"
    assert doc["payload"] == json.loads((FIXTURES / "github_issues_opened.json").read_bytes())
    assert doc["routing_trace"] == {
        "stage": "default",
        "cause": "no_match_default",
        "action": {"queue": "inbox"},
    }
    # The raw body and header block never come out.
    assert not {"body", "raw_headers", "verify_detail"} & set(doc)
    [todo] = doc["todos"]
    assert todo["endpoint_id"] == s.ids["router"] and todo["endpoint_name"] == "router"
    assert todo["queue"] == "inbox" and todo["state"] == "claimed"
    assert todo["event_id"] == s.events["issue-2"] and todo["owner"] == "worker-1"
    assert "payload" not in todo and "work_order" not in todo


def test_events_show_a_text_delivery_and_a_dropped_one(scene: Scene) -> None:
    s = scene
    doc = s.fast.json("events", "show", s.events["text"])
    assert doc["payload_format"] == "text" and doc["payload_truncated"] is False
    assert doc["payload"] == TEXT_BODY.decode()
    assert doc["verified"] is False and doc["trust_mode"] == "token"
    assert sorted((t["endpoint_name"], t["queue"], t["state"]) for t in doc["todos"]) == [
        ("pool", "alerts", "pending"),
        ("router", "alerts", "pending"),
    ]

    dropped = s.fast.json("events", "show", s.events["ping"])
    assert dropped["disposition"] == "dropped" and dropped["todos"] == []
    assert dropped["payload"] == {"zen": "Keep it logically awesome."}
    assert dropped["routing_trace"]["rule_id"] == "ping"


def test_show_event_for_an_endpoint_sees_only_its_humans_events(scene: Scene) -> None:
    """The service function the CLI calls takes a caller, as the MCP tools would pass it."""
    s = scene

    async def check(rt: Runtime) -> None:
        bobs = await rt.store.get_endpoint(s.ids["bobs"])
        router = await rt.store.get_endpoint(s.ids["router"])
        assert (await events.show_event(rt, bobs, s.events["bob"]))["todos"]
        assert (await events.show_event(rt, router, s.events["text"]))["payload_format"]
        with pytest.raises(NotFound, match="event .* not found"):
            await events.show_event(rt, bobs, s.events["text"])

    on_runtime(s.cli.env, check)


# -- todos list ----------------------------------------------------------------------------


def _ids(doc: dict[str, Any]) -> list[str]:
    return [t["todo_id"] for t in doc["todos"]]


def test_todos_list_every_one_newest_first_and_each_filter(scene: Scene) -> None:
    s = scene
    every = s.cli.json("todos", "list")["todos"]
    assert len(every) == 5
    stamps = [t["created_at"] for t in every]
    assert stamps == sorted(stamps, reverse=True)
    assert {t["endpoint_name"] for t in every} == {"router", "pool", "bobs"}
    assert every[0]["event_id"] == s.events["bob"]
    for t in every:
        assert {
            "todo_id",
            "endpoint_id",
            "endpoint_name",
            "queue",
            "state",
            "title",
            "attempts",
            "event_id",
            "created_at",
            "owner",
        } <= set(t)
        assert "payload" not in t

    def where(**match: str) -> list[str]:
        return sorted(t["todo_id"] for t in every if all(t[k] == v for k, v in match.items()))

    router = s.ids["router"]
    cases = [
        (("--endpoint", router), where(endpoint_id=router)),
        (("--endpoint", s.ids["pool"]), where(endpoint_id=s.ids["pool"])),
        (("--queue", "alerts"), where(queue="alerts")),
        (("--queue", "inbox"), where(queue="inbox")),
        (("--state", "done"), where(state="done")),
        (("--state", "claimed"), where(state="claimed")),
        (("--state", "pending"), where(state="pending")),
        (("--state", "dead"), []),
        (
            ("--endpoint", router, "--queue", "inbox", "--state", "claimed"),
            where(endpoint_id=router, queue="inbox", state="claimed"),
        ),
    ]
    sizes = {args: len(expected) for args, expected in cases}
    assert sizes[("--endpoint", router)] == 3 and sizes[("--queue", "alerts")] == 2
    assert sizes[("--state", "done")] == 1 and sizes[("--state", "pending")] == 3
    assert sizes[("--endpoint", router, "--queue", "inbox", "--state", "claimed")] == 1
    for args, expected in cases:
        assert sorted(_ids(s.fast.json("todos", "list", *args))) == expected, args

    two = s.fast.json("todos", "list", "--limit", "2")
    assert _ids(two) == [t["todo_id"] for t in every[:2]]


# -- tables --------------------------------------------------------------------------------


def table(s: Scene, *args: str) -> str:
    env = dict(s.cli.env, COLUMNS="220")
    proc = CLI(env, in_process=True).run(*args, "--table")
    assert "\x1b[" not in proc.stdout  # not a terminal: plain text
    with pytest.raises(json.JSONDecodeError):
        json.loads(proc.stdout)
    return proc.stdout


def test_table_output_has_the_key_columns(scene: Scene) -> None:
    s = scene
    out = table(s, "webhook", "list")
    for word in (
        "WEBHOOK",
        "OWNER",
        "ENDPOINT",
        "SOURCE",
        "QUEUE",
        "TRUST",
        "RULES",
        s.hooks["gh"]["webhook_id"],
        "alice",
        "router",
        "github",
        "signed",
    ):
        assert word in out, word
    assert_no_secret(s, out)

    out = table(s, "events", "list", "--webhook", s.hooks["gh"]["webhook_id"])
    for word in (
        "EVENT",
        "RECEIVED",
        "KIND",
        "DISPOSITION",
        "STAGE",
        "RULE",
        s.events["ping"],
        "dropped",
        "routed",
        "ping",
    ):
        assert word in out, word

    out = table(s, "events", "show", s.events["text"])
    for word in (
        "headers (sanitized)",
        "routing trace",
        "payload (text)",
        "disk full on host-7",
        "no_match_default",
        "TODO",
        "STATE",
        "pool",
        "alerts",
        "pending",
    ):
        assert word in out, word
    out = table(s, "events", "show", s.events["issue-2"])
    assert "payload (json)" in out and "«redacted»" in out and "claimed" in out
    assert "sha256=" not in out
    assert_no_secret(s, out)

    out = table(s, "todos", "list", "--state", "claimed")
    for word in (
        "TODO",
        "ENDPOINT",
        "QUEUE",
        "STATE",
        "ATTEMPTS",
        "TITLE",
        "claimed",
        "router",
        "inbox",
    ):
        assert word in out, word
    assert "pending" not in out


def test_stored_text_is_neither_markup_nor_terminal_control() -> None:
    hostile = "[bold]loud[/bold] \x1b[31mred\x07 [/oops]\nnext"
    buf = io.StringIO()
    out = Console(file=buf, width=200)
    out.print(make_table("[red]t[/red]", [("TITLE", lambda r: r["title"])], [{"title": hostile}]))
    out.print(cell(hostile, lines=True))
    text = buf.getvalue()
    assert "\x1b" not in text and "\x07" not in text
    assert "[red]t[/red]" in text
    assert "[bold]loud[/bold] \ufffd[31mred\ufffd [/oops] next" in text
    assert "[/oops]\nnext" in text


def test_a_terminal_gets_a_table_and_json_forces_json(scene: Scene) -> None:
    s = scene
    env = dict(s.cli.env, COLUMNS="200", LINES="50", TERM="xterm")
    env.pop("NO_COLOR", None)

    def on_tty(*args: str) -> str:
        master, slave = pty.openpty()
        proc = subprocess.Popen(
            [*SWITCHBOARD, *args],
            env=env,
            stdout=slave,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        os.close(slave)
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(master)
        assert proc.wait(120) == 0, proc.stderr.read() if proc.stderr else ""
        return ANSI.sub("", b"".join(chunks).decode())

    out = on_tty("todos", "list", "--state", "done")
    assert "STATE" in out and "done" in out
    forced = on_tty("todos", "list", "--state", "done", "--json")
    assert json.loads(forced)["todos"][0]["state"] == "done"


# -- bad flag values -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (
            ("events", "list", "--webhook", MISSING, "--limit", "0"),
            ("argument --limit", f"from 1 to {events.LIMIT_MAX}", "'0'"),
        ),
        (
            ("events", "list", "--webhook", MISSING, "--limit", "101"),
            ("argument --limit", f"from 1 to {events.LIMIT_MAX}"),
        ),
        (
            ("events", "list", "--webhook", MISSING, "--limit", "many"),
            ("argument --limit", "'many'"),
        ),
        (
            ("events", "list", "--webhook", MISSING, "--disposition", "maybe"),
            ("argument --disposition", "routed", "dropped"),
        ),
        (("events", "list"), ("--webhook",)),
        (("todos", "list", "--limit", "500"), ("argument --limit", f"from 1 to {todos.LIMIT_MAX}")),
        (("todos", "list", "--state", "lost"), ("argument --state", "pending", "dead")),
        (("webhook", "list", "--json", "--table"), ("--table", "not allowed with", "--json")),
    ],
)
def test_bad_flag_values_are_refused_naming_the_flag(
    scene: Scene, args: tuple[str, ...], needles: tuple[str, ...]
) -> None:
    proc = refused(scene.fast, *args)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    for needle in needles:
        assert needle in last, (needle, last)


def test_values_the_service_refuses_are_one_line(scene: Scene) -> None:
    for args, needle in (
        (("todos", "list", "--queue", "bad queue!"), "invalid_argument: queue: queue names"),
        (
            ("events", "list", "--webhook", scene.hooks["gh"]["webhook_id"], "--cursor", "x"),
            "invalid_argument: cursor: not a cursor",
        ),
    ):
        proc = refused(scene.cli if args[0] == "todos" else scene.fast, *args)
        lines = proc.stderr.splitlines()
        # a value the service refuses is the caller's to fix: exit 2, as a bad flag
        assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], proc.stderr


@pytest.mark.parametrize("width", [80, 132])
def test_every_list_is_readable_at_80_and_132_columns(scene: Scene, width: int) -> None:
    # The newcomer's terminal: each list shows its key columns, one line per row, cut with
    # "…" (never broken mid-word); --json is the same bytes as the JSON a pipe gets.
    s = scene
    env = dict(s.cli.env, COLUMNS=str(width))
    run = CLI(env, in_process=True).run
    hook = s.hooks["gh"]["webhook_id"]
    lists = {
        ("webhook", "list"): ["WEBHOOK", "OWNER", "ENDPOINT", "SOURCE", "QUEUE", "RULES"],
        ("events", "list", "--webhook", hook): ["EVENT", "RECEIVED", "KIND", "DISPOSITION"],
        ("todos", "list"): ["TODO", "ENDPOINT", "QUEUE", "STATE", "TITLE"],
        ("endpoint", "list"): ["ID", "OWNER", "NAME", "STATE", "QUEUES", "VERBS"],
    }
    for args, keys in lists.items():
        out = run(*args, "--table").stdout
        lines = out.splitlines()
        assert all(len(line) <= width for line in lines), out
        header = next(line for line in lines if line.startswith("┃"))
        assert [h.strip() for h in header.split("┃")[1:-1]][: len(keys)] == keys, out
        rows = [line for line in lines if line.startswith("│")]
        doc = json.loads(run(*args, "--json").stdout)
        items = (
            doc if isinstance(doc, list) else next(v for v in doc.values() if isinstance(v, list))
        )
        assert len(rows) == len(items), out  # one line per row
        for line in rows:
            for got in (c.strip() for c in line.split("│")[1:-1]):
                # a cut value ends in "…" right after a character of it, never mid-line
                assert "…" not in got[:-1], (args, got)
        assert run(*args, "--json").stdout == run(*args).stdout  # a pipe gets the same JSON
    assert "dropped" in run("events", "list", "--webhook", hook, "--table").stdout


def test_events_list_on_a_deleted_webhook_marks_it_deleted(scene: Scene) -> None:
    # Last in this module: it adds (and deletes) a webhook of its own.
    hook = scene.w.webhook("bobs", "generic", "inbox")
    scene.secrets.append(token_of(hook))

    async def post(rt: Runtime) -> None:
        headers = {"Content-Type": "application/json", "X-Delivery-Id": "gone-1"}
        reply = await ingest(
            rt, token_of(hook), Headers(headers), b'{"a": 1}', headers["Content-Type"]
        )
        assert reply.status == 202, reply

    on_runtime(scene.cli.env, post)
    wid = hook["webhook_id"]
    scene.fast.json("webhook", "delete", wid)
    doc = scene.fast.json("events", "list", "--webhook", wid, "--json")
    assert doc["webhook_id"] == wid and doc["webhook_deleted_at"]
    assert len(doc["events"]) == 1
    out = table(scene, "events", "list", "--webhook", wid)
    title = out.strip().splitlines()[0]
    assert f"events of deleted webhook {wid}, deleted {doc['webhook_deleted_at']}" in title
    assert doc["events"][0]["event_id"][:8] in out
    # A live webhook's title says nothing of the kind
    live = table(scene, "events", "list", "--webhook", scene.hooks["bob"]["webhook_id"])
    assert "deleted" not in live.strip().splitlines()[0]


# -- what a producer or a tenant wrote never steers the terminal --------------------------

#: C1 controls (CSI, OSC, ST), DEL and a bidi override: JSON leaves them as they are.
STEERING = "a\u009b2J\u009d0;TITLE\u009c\u202e\u007fz"


def test_events_show_and_an_error_line_escape_what_would_steer_the_terminal(
    scene: Scene, tmp_path: Path
) -> None:
    s = scene

    async def deliver(rt: Runtime) -> str:
        body = json.dumps({"note": STEERING, "é": "café"}, ensure_ascii=False).encode()
        headers = {"Content-Type": "application/json", "X-Delivery-Id": "steer-1"}
        reply = await ingest(rt, token_of(s.hooks["gen"]), Headers(headers), body, None)
        assert reply.status == 202, reply
        row = await rt.store.db.fetchone(
            "SELECT id FROM events WHERE webhook_id = %s ORDER BY received_at DESC LIMIT 1",
            (s.hooks["gen"]["webhook_id"],),
        )
        return str(row["id"])

    event = on_runtime(s.cli.env, deliver)
    shown = s.fast.run("events", "show", event, "--table").stdout
    assert not set("\u009b\u009d\u009c\u202e\u007f") & set(shown), repr(shown)
    assert "\\u009b2J\\u009d0;TITLE\\u009c\\u202e\\u007fz" in shown
    assert '"é": "café"' in shown  # printable text as it is
    # an error line quotes a rule's name: escaped too (a candidate an agent wrote)
    candidate = tmp_path / "rules.json"
    rule = {"id": "r", "name": "n\x1b]0;PWNED\x07\x1b[2J", "expr": ".", "action": {"queue": "x"}}
    candidate.write_text(json.dumps({"rules": [rule]}))
    proc = refused(s.fast, "webhook", "rules", "set", s.hooks["gen"]["webhook_id"], str(candidate))
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr, repr(proc.stderr)
    assert "name n\\x1b]0;PWNED\\x07\\x1b[2J" in proc.stderr, proc.stderr

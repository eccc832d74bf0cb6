"""The facets of an agent handle (``tasks``, ``insights``, ``profile``, ``directory``; ``case_log()``), on every
backend: each acts as the handle's agent, under exactly the rules of the compatible view (``AgentMemory``),
which delegates to them.

The conftest spreads ``backend_name`` over the backends for tests/contract/ only, so these tests carry a small
store fixture of their own, parametrized over the same three backends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autogen_shared_memory import (
    InvalidInputError,
    InvalidInputTypeError,
    MemoryAccessDenied,
    SharedMemoryError,
    SharedMemoryStore,
)
from autogen_shared_memory.errors import TaskNotFoundError, UnknownAgentError
from autogen_shared_memory.settings import WritePolicy
from autogen_shared_memory.testing import HashEmbedder, InMemoryBackend, MemoryDatabase
from autogen_shared_memory.views.agents import TASK_STATUSES

BACKENDS = ("sqlite", "postgres", "memory")
HOSTILE = settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
# text of every kind: NUL, lone surrogates, controls, long runs
ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=1100)
ANY_VALUE = st.one_of(st.none(), st.integers(), st.floats(), st.booleans(), ANY_TEXT, st.lists(st.integers()))


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SharedMemoryStore]:
    """A store on each backend; alice, bob and lead are members of the group ``crew``, mallory is not."""
    policy = WritePolicy(operator_id="ops")
    if request.param == "memory":
        s = SharedMemoryStore(InMemoryBackend(MemoryDatabase()), embedder=HashEmbedder(), policy=policy)
    elif request.param == "postgres":
        import uuid

        from autogen_shared_memory.backends.postgres import PostgresBackend

        backend = PostgresBackend(request.getfixturevalue("pg_dsn"), schema=f"t{uuid.uuid4().hex[:16]}", max_size=4)
        s = SharedMemoryStore(backend, embedder=HashEmbedder(), policy=policy)
    else:
        s = SharedMemoryStore(tmp_path / "mem", embedder=HashEmbedder(), policy=policy)
    for agent in ("alice", "bob", "lead"):
        s.operator.add_member("crew", agent)
    yield s
    s.close()


def _facts(store: SharedMemoryStore) -> int:
    """Every fact of every scope, whatever its status (a forgotten stray result counts too)."""
    return sum(sum(s.counts.values()) for s in store.stats())


def _state(store: SharedMemoryStore) -> tuple[Any, ...]:
    reader = store.as_agent("reader")
    return (store.operator.tasks(), _facts(store), reader.profile.all(), reader.directory.list())


# ------------------------------------------------------------------------------------------------ tasks
def test_a_task_goes_from_creation_to_a_result_fact(store: SharedMemoryStore) -> None:
    lead, alice = store.as_agent("lead", "crew"), store.as_agent("alice", "crew")
    task = lead.tasks.create("Summarise the Q3 report", assignee="alice", context={"doc": "q3.pdf"})
    assert (task.agent_id, task.created_by, task.status, task.scope) == ("alice", "lead", "assigned", "group:crew")
    assert [t.id for t in alice.tasks.list(assigned_to="alice")] == [task.id]
    assert alice.tasks.set_status(task.id, "in_progress").status == "in_progress"
    done = alice.tasks.complete(task.id, "Revenue up 12%")
    assert (done.status, done.result) == ("completed", "Revenue up 12%")
    result = lead.get(done.fact_id or "")
    assert (str(result.scope), result.created_by, result.category) == ("group:crew", "alice", "task_result")
    assert "Revenue up 12%" in result.content
    # the compatible view is the same logic under the seed's names
    view = store.for_agent("lead", "crew")
    assert view.get_task(task.id) == lead.tasks.get(task.id)
    assert view.list_tasks("completed") == lead.tasks.list("completed") == [done]


def test_a_non_member_is_refused_every_task_verb_and_nothing_changes(store: SharedMemoryStore) -> None:
    task = store.as_agent("lead", "crew").tasks.create("Patch the gateway", assignee="alice")
    mallory = store.as_agent("mallory", "crew")  # bound to the group, never enrolled
    before = _state(store)
    verbs: dict[str, Callable[[], object]] = {
        "create": lambda: mallory.tasks.create("Exfiltrate the report"),
        "get": lambda: mallory.tasks.get(task.id),
        "list": lambda: mallory.tasks.list(),
        "assign": lambda: mallory.tasks.assign(task.id, "bob"),
        "set_status": lambda: mallory.tasks.set_status(task.id, "cancelled"),
        "complete": lambda: mallory.tasks.complete(task.id, "done"),
    }
    for name, call in verbs.items():
        with pytest.raises(MemoryAccessDenied, match="not a member"):
            call()
        assert _state(store) == before, name
    with pytest.raises(MemoryAccessDenied):
        store.for_agent("mallory", "crew").list_tasks()  # the compatible view keeps the rule


def test_a_task_goes_only_to_a_member(store: SharedMemoryStore) -> None:
    lead = store.as_agent("lead", "crew")
    task = lead.tasks.create("Patch the gateway", assignee="alice")
    before = _state(store)
    with pytest.raises(UnknownAgentError, match="not a member"):
        lead.tasks.create("Patch the gateway", assignee="mallory")
    with pytest.raises(UnknownAgentError, match="not a member"):
        lead.tasks.assign(task.id, "mallory")
    assert _state(store) == before
    assert lead.tasks.assign(task.id, "bob").agent_id == "bob"


def test_without_a_group_an_agent_keeps_its_own_tasks(store: SharedMemoryStore) -> None:
    solo = store.as_agent("solo")
    with pytest.raises(InvalidInputError, match="only create tasks for itself"):
        solo.tasks.create("Water the plants", assignee="bob")
    assert store.operator.tasks() == []
    task = solo.tasks.create("Water the plants")
    assert (task.status, task.scope) == ("pending", "agent:solo")
    assert store.as_agent("bob").tasks.list() == []  # bob's own tasks live in bob's file
    done = solo.tasks.complete(task.id, {"litres": 3})
    assert str(solo.get(done.fact_id or "").scope) == "agent:solo"


def test_only_the_assignee_completes_a_task_and_a_refusal_writes_no_fact(store: SharedMemoryStore) -> None:
    task = store.as_agent("lead", "crew").tasks.create("Patch the gateway", assignee="alice")
    facts = _facts(store)
    with pytest.raises(MemoryAccessDenied, match="assigned to 'alice'"):
        store.as_agent("bob", "crew").tasks.complete(task.id, "I did it")
    assert _facts(store) == facts  # not even a forgotten result fact
    assert store.as_agent("bob", "crew").tasks.get(task.id).status == "assigned"


def test_a_closed_task_stays_closed(store: SharedMemoryStore) -> None:
    alice = store.as_agent("alice", "crew")
    task = alice.tasks.create("Patch the gateway")
    with pytest.raises(InvalidInputError, match="tasks.complete"):
        alice.tasks.set_status(task.id, "completed")  # completing keeps a result: complete() does it
    alice.tasks.complete(task.id, "patched")
    before = _state(store)
    closing: list[Callable[[], object]] = [
        lambda: alice.tasks.complete(task.id, "again"),
        lambda: alice.tasks.set_status(task.id, "in_progress"),
        lambda: alice.tasks.assign(task.id, "bob"),
    ]
    for call in closing:
        with pytest.raises(InvalidInputError, match="already completed"):
            call()
    assert _state(store) == before
    with pytest.raises(TaskNotFoundError):
        alice.tasks.get("k_000000000000deadbeef")


@HOSTILE
@given(title=ANY_TEXT, assignee=st.one_of(st.none(), ANY_TEXT), context=st.dictionaries(ANY_TEXT, ANY_VALUE))
def test_hostile_task_input_is_stored_as_given_or_refused_changing_nothing(
    store: SharedMemoryStore, title: str, assignee: str | None, context: dict[str, Any]
) -> None:
    lead = store.as_agent("lead", "crew")
    before = _state(store)
    try:
        task = lead.tasks.create(title, assignee, context)
    except SharedMemoryError:
        assert _state(store) == before
        return
    assert lead.tasks.get(task.id) == task
    assert (task.title, task.agent_id) == (title, assignee or "lead")


@HOSTILE
@given(task_id=ANY_TEXT, agent=ANY_TEXT, status=ANY_TEXT.filter(lambda s: s not in TASK_STATUSES), result=ANY_VALUE)
def test_hostile_ids_and_values_on_task_verbs_are_refused_changing_nothing(
    store: SharedMemoryStore, task_id: str, agent: str, status: str, result: Any
) -> None:
    alice = store.as_agent("alice", "crew")
    if not alice.tasks.list():
        alice.tasks.create("Patch the gateway")
    before = _state(store)
    for call in (
        lambda: alice.tasks.get(task_id),
        lambda: alice.tasks.assign(task_id, agent),
        lambda: alice.tasks.set_status(task_id, status),  # type: ignore[arg-type]
        lambda: alice.tasks.complete(task_id, result),
        lambda: alice.tasks.list(status),
    ):
        with pytest.raises(SharedMemoryError):
            call()
        assert _state(store) == before


# --------------------------------------------------------------------------------------------- insights
def test_insights_are_categorised_facts_of_the_agents_own_scope(store: SharedMemoryStore) -> None:
    doc = store.as_agent("doc")
    receipt = doc.insights.add("sales_report.pdf has poor OCR quality", category="quality", source="observed")
    doc.remember("an uncategorised fact is not an insight", "agent")
    fact = doc.get(receipt.id)
    assert (str(fact.scope), fact.category, fact.metadata["source"]) == ("agent:doc", "quality", "observed")
    assert [f.id for f in doc.insights.list()] == [receipt.id]
    assert doc.insights.list("speed") == []
    assert [f.id for f in store.as_agent("gaia").insights.list(agent="doc")] == [receipt.id]  # cross-agent read
    assert store.for_agent("gaia").get_agent_insights("doc") == store.as_agent("gaia").insights.list(agent="doc")


def test_another_agents_insights_are_refused_when_private_or_unknown(store: SharedMemoryStore) -> None:
    store.as_agent("doc").insights.add("the scanner jams on A3", category="hardware")
    store.operator.set_private("doc")
    gaia = store.as_agent("gaia")
    with pytest.raises(MemoryAccessDenied):
        gaia.insights.list(agent="doc")
    with pytest.raises(UnknownAgentError):
        gaia.insights.list(agent="nobody")
    assert len(store.as_agent("doc").insights.list()) == 1  # its own, private or not


def test_an_insight_needs_a_category(store: SharedMemoryStore) -> None:
    doc = store.as_agent("doc")
    with pytest.raises(InvalidInputTypeError, match="category"):
        doc.insights.add("a fact no insight list would show", category=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputTypeError, match="category"):
        store.for_agent("doc").store_insight(None, "the same through the compatible view")  # type: ignore[arg-type]
    assert _facts(store) == 0


@HOSTILE
@given(text=ANY_TEXT, category=ANY_TEXT, confidence=st.floats(), agent=ANY_TEXT, limit=st.integers())
def test_hostile_insight_input_is_refused_changing_nothing_or_stored(
    store: SharedMemoryStore, text: str, category: str, confidence: float, agent: str, limit: int
) -> None:
    doc = store.as_agent("doc")
    facts = _facts(store)
    try:
        receipt = doc.insights.add(text, category=category, confidence=confidence)
    except SharedMemoryError:
        assert _facts(store) == facts
    else:  # (a text said before reinforces the fact that holds it, with its category)
        assert receipt.status == "reinforced" or doc.get(receipt.id).category == category
    try:
        found = doc.insights.list(category, agent=agent, limit=limit)
    except SharedMemoryError:
        pass
    else:
        assert len(found) <= limit and all(f.category == category for f in found)


# ---------------------------------------------------------------------------------- profile and directory
def test_the_profile_is_shared_and_names_who_set_each_entry(store: SharedMemoryStore) -> None:
    entry = store.as_agent("gaia").profile.set("briefing_time", "08:00", confidence=0.9)
    seen = store.as_agent("calendar").profile.get("briefing_time")
    assert seen == entry and (seen.value, seen.source_agent, seen.confidence) == ("08:00", "gaia", 0.9)
    assert store.as_agent("calendar").profile.get("unset") is None
    assert (
        store.for_agent("calendar").get_user_profile() == store.as_agent("x").profile.all() == {"briefing_time": entry}
    )
    with pytest.raises(InvalidInputTypeError):
        store.as_agent("gaia").profile.set("bad", object())
    assert list(store.as_agent("x").profile.all()) == ["briefing_time"]


def test_an_agent_registers_its_own_directory_entry(store: SharedMemoryStore) -> None:
    info = store.as_agent("doc_agent").directory.register(display_name="DocAgent", capabilities=["pdf", "ocr"])
    store.as_agent("web_agent").directory.register(capabilities=["browse"], status="idle")
    gaia = store.as_agent("gaia")
    assert (info.agent_id, info.status, info.capabilities) == ("doc_agent", "active", ("pdf", "ocr"))
    assert [a.agent_id for a in gaia.directory.list()] == ["doc_agent", "web_agent"]
    assert [a.agent_id for a in gaia.directory.list("idle")] == ["web_agent"]
    assert gaia.directory.get("doc_agent") == store.for_agent("gaia").get_agent("doc_agent") == info
    with pytest.raises(UnknownAgentError):
        gaia.directory.get("gaia")  # never registered
    with pytest.raises(InvalidInputError):
        gaia.directory.register(status="asleep")
    assert len(gaia.directory.list()) == 2


@HOSTILE
@given(key=ANY_TEXT, value=ANY_VALUE, name=ANY_TEXT, capabilities=st.lists(ANY_TEXT, max_size=3))
def test_hostile_profile_and_directory_input_is_refused_changing_nothing(
    store: SharedMemoryStore, key: str, value: Any, name: str, capabilities: list[str]
) -> None:
    agent = store.as_agent("gaia")
    before = _state(store)
    try:
        agent.profile.set(key, value)
    except SharedMemoryError:
        assert _state(store) == before
    else:
        assert agent.profile.get(key) is not None
    before = _state(store)
    try:
        agent.directory.register(display_name=name, capabilities=capabilities)
    except SharedMemoryError:
        assert _state(store) == before
    else:
        assert agent.directory.get("gaia").capabilities == tuple(capabilities)


# ---------------------------------------------------------------------------------------------- twins
def test_the_async_twins_act_as_the_handle(store: SharedMemoryStore) -> None:
    async def run() -> None:
        alice = store.as_agent("alice", "crew")
        task = await alice.tasks.acreate("Patch the gateway", assignee="bob")
        assert (await alice.tasks.aget(task.id)).created_by == "alice"
        receipt = await alice.insights.aadd("the gateway needs a retry budget", category="ops")
        assert [f.id for f in await alice.insights.alist()] == [receipt.id]
        assert (await alice.profile.aset("tz", "UTC")).source_agent == "alice"
        assert (await alice.directory.aregister(model="gpt-4o")).agent_id == "alice"
        appended = await alice.case_log().aappend("gateway patched")
        assert [e.author for e in await alice.case_log().aentries()] == ["alice"] and appended.context_version == 1

    asyncio.run(run())

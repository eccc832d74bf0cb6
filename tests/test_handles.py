"""The front door: identity-bound handles, the store's small surface, grouped settings.

The rules (src/autogen_shared_memory/handles.py): an agent acts through a handle bound once to it; trusted
code names its privilege (``store.operator``); no public method grants trust because an argument was left out;
binding a handle never changes the policy unless asked.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from autogen_shared_memory import (
    AgentHandle,
    DedupSettings,
    FactStore,
    InvalidInputError,
    InvalidInputTypeError,
    MemoryAccessDenied,
    MemoryHandle,
    OperatorHandle,
    RecallSettings,
    SharedMemoryError,
    SharedMemoryStore,
    WritePolicy,
)
from autogen_shared_memory.component import ComponentLoader
from autogen_shared_memory.testing import HashEmbedder
from autogen_shared_memory.views.agents import Directory, Insights, Profile, Tasks
from autogen_shared_memory.views.caselog import CaseLog

IDENTITY = ("agent_id", "actor")
FACETS = (Tasks, Insights, Profile, Directory, CaseLog)  # what a handle offers beside its own methods


def _public_methods(cls: type) -> dict[str, Any]:
    return {n: getattr(cls, n) for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n, None))}


@pytest.mark.parametrize("cls", [SharedMemoryStore, AgentHandle, OperatorHandle, MemoryHandle, FactStore, *FACETS])
def test_no_public_method_grants_trust_by_a_left_out_argument(cls: type) -> None:
    trusting = []
    for name, method in _public_methods(cls).items():
        try:
            params = inspect.signature(method).parameters
        except (TypeError, ValueError):
            continue
        for param in params.values():
            if name == "scope_ref":  # names a scope (an owner's), acts as nobody
                continue
            if param.name in IDENTITY and param.default is None:
                trusting.append(f"{name}({param.name}=None)")
    assert trusting == []


@pytest.mark.parametrize("cls", [AgentHandle, OperatorHandle, *FACETS])
def test_handle_methods_never_take_the_identity_they_act_as(cls: type) -> None:
    taking = [
        name
        for name, method in _public_methods(cls).items()
        if not isinstance(inspect.getattr_static(cls, name), property)
        and any(p in inspect.signature(method).parameters for p in ("agent_id", "group_id"))
    ]
    assert taking == []


def test_the_store_surface_is_small() -> None:
    params = [p for p in inspect.signature(SharedMemoryStore.__init__).parameters if p != "self"]
    assert len(params) <= 8, params
    public = [n for n in dir(SharedMemoryStore) if not n.startswith("_")]
    assert len(public) <= 40, public


def _verbs(cls: type) -> list[str]:
    """The public sync methods of a class (its async twins mirror them)."""
    return [
        n
        for n in dir(cls)
        if not n.startswith("_")
        and callable(getattr(cls, n))
        and not inspect.iscoroutinefunction(getattr(cls, n))
        and not isinstance(inspect.getattr_static(cls, n), property)
    ]


@pytest.mark.parametrize("cls", FACETS)
def test_a_facet_is_a_few_verbs_each_with_its_async_twin(cls: type) -> None:
    verbs = _verbs(cls)
    assert len(verbs) <= 7, verbs
    assert [v for v in verbs if not inspect.iscoroutinefunction(getattr(cls, f"a{v}", None))] == []


def test_the_agent_handle_surface_is_the_fact_vocabulary_records_and_facets() -> None:
    facets = [n for n in dir(AgentHandle) if isinstance(inspect.getattr_static(AgentHandle, n), property)]
    assert sorted(facets) == ["agent_id", "directory", "engine", "group_id", "insights", "profile", "tasks"]
    assert len(_verbs(AgentHandle)) <= 16, _verbs(AgentHandle)


@pytest.fixture
def store(tmp_path: Path) -> SharedMemoryStore:
    s = SharedMemoryStore(tmp_path / "mem", embedder=HashEmbedder(), policy=WritePolicy(operator_id="ops"))
    yield s
    s.close()


def test_binding_changes_no_policy_unless_asked(store: SharedMemoryStore) -> None:
    alice = store.as_agent("alice", group="crew")
    assert store.operator.members("crew") == set()
    with pytest.raises(MemoryAccessDenied):
        alice.remember("The build runs on Fridays.", "group")
    assert store.stats() == [] or all(s.counts.get("active", 0) == 0 for s in store.stats())
    joined = store.as_agent("alice", group="crew", join=True)
    assert store.operator.members("crew") == {"alice"}
    receipt = joined.remember("The build runs on Fridays.", "group")
    assert alice.get(receipt.id).created_by == "alice"


def test_an_agent_handle_cannot_be_the_operator_or_nobody(store: SharedMemoryStore) -> None:
    with pytest.raises(InvalidInputError, match="operator"):
        store.as_agent("ops")
    with pytest.raises(InvalidInputTypeError):
        store.as_agent(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        store.as_agent("alice", join=True)  # joining needs a group


def test_the_operator_is_named_in_the_audit_trail(store: SharedMemoryStore) -> None:
    receipt = store.operator.remember("Answers are markdown tables.", "global")
    fact = store.operator.get(receipt.id)
    assert fact.created_by == "ops"
    assert [e.actor for e in store.operator.history(receipt.id)] == ["ops"]


def test_an_agent_handle_is_held_to_the_policy(store: SharedMemoryStore) -> None:
    alice = store.as_agent("alice", group="crew", join=True)
    bob = store.as_agent("bob", group="crew")  # bound, never enrolled
    secret = alice.remember("alice's private note", "agent")
    with pytest.raises(MemoryAccessDenied):
        alice.remember("agents may not write global", "global")
    with pytest.raises(MemoryAccessDenied):
        bob.forget(secret.id)
    with pytest.raises(MemoryAccessDenied):
        bob.search("note", "group")
    assert store.operator.forget(secret.id).status == "forgotten"  # the operator may, and says so


def test_a_handle_identity_is_fixed(store: SharedMemoryStore) -> None:
    alice = store.as_agent("alice", group="crew")
    with pytest.raises(AttributeError):
        alice.agent_id = "ops"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        alice.other = 1  # type: ignore[attr-defined]
    assert (alice.agent_id, alice.group_id) == ("alice", "crew")
    assert store.operator.agent_id is None


async def test_async_twins_act_as_the_handle(store: SharedMemoryStore) -> None:
    alice = store.as_agent("alice", group="crew", join=True)
    receipt = await alice.aremember("The deploy window is 14:00 UTC.", "group")
    hits = await alice.asearch("deploy window")
    assert [h.fact.id for h in hits][:1] == [receipt.id]
    assert hits[0].fact.created_by == "alice"


@pytest.mark.parametrize("cls", [SharedMemoryStore, AgentHandle, OperatorHandle, *FACETS])
def test_every_public_method_documents_its_arguments_or_result(cls: type) -> None:
    from autogen_shared_memory.component import ComponentBase

    bare = []
    for name in dir(cls):
        if (
            name.startswith(("_", "component_"))
            or hasattr(ComponentBase, name)
            or isinstance(inspect.getattr_static(cls, name), property)
        ):
            continue
        doc = inspect.getdoc(getattr(cls, name)) or ""
        if callable(getattr(cls, name)) and "Args:" not in doc and "Returns:" not in doc and "Async version" not in doc:
            bare.append(name)
    assert bare == []


# ------------------------------------------------------------------------------------ settings
@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda: RecallSettings(rrf_k=-1), InvalidInputError),
        (lambda: RecallSettings(search_depth=0), InvalidInputError),
        (lambda: RecallSettings(scope_weights={"team": 1.0}), InvalidInputError),
        (lambda: RecallSettings(context_weights=(0.3,)), InvalidInputError),  # type: ignore[arg-type]
        (lambda: RecallSettings(min_similarity=float("nan")), InvalidInputError),
        (lambda: DedupSettings(near_duplicate=0), InvalidInputError),
        (lambda: WritePolicy(write_budget=0), InvalidInputError),
        (lambda: WritePolicy(review_global_writes="yes"), InvalidInputTypeError),  # type: ignore[arg-type]
        (lambda: WritePolicy(global_writers=["bad id\n"]), InvalidInputError),
    ],
)
def test_bad_settings_are_refused_where_they_are_made(make: Any, kind: type[Exception]) -> None:
    with pytest.raises(kind):
        make()
    assert issubclass(kind, SharedMemoryError)


def test_a_settings_object_of_the_wrong_type_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputTypeError, match="recall must be a RecallSettings"):
        SharedMemoryStore(tmp_path, embedder=HashEmbedder(), recall={"rrf_k": 60})  # type: ignore[arg-type]


def test_an_unsupported_backend_option_is_an_error_never_ignored(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="does not support schema"):
        SharedMemoryStore(tmp_path / "a", embedder=HashEmbedder(), backend_options={"schema": "x"})
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").iterdir())
    made = SharedMemoryStore(tmp_path / "b", embedder=HashEmbedder())
    with pytest.raises(InvalidInputError, match="backend_options"):
        SharedMemoryStore(made.backend, embedder=HashEmbedder(), backend_options={"vector_index": "hnsw"})
    made.close()


def test_the_declarative_config_nests_the_settings_objects(tmp_path: Path) -> None:
    recall = RecallSettings(context_weights=(0.3, 0.1), rrf_k=7)
    policy = WritePolicy(global_writers=["crew:lead"], write_budget=50)
    store = SharedMemoryStore(tmp_path / "m", embedder=HashEmbedder(), recall=recall, policy=policy)
    dumped = store.dump_component()
    assert list(dumped.config["recall"]["context_weights"]) == [0.3, 0.1]
    assert list(dumped.config["policy"]["global_writers"]) == ["crew:lead"]
    store.close()
    loaded = ComponentLoader.load_component(dumped, SharedMemoryStore)
    assert (loaded.recall, loaded.policy, loaded.dedup) == (recall, policy, DedupSettings())
    loaded.close()

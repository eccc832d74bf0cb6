"""Memory calls from AG2's sync code paths (``initiate_chat``'s tool calls, the recall hook): bounded threads
and file descriptors however many calls a chat makes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from autogen import UserProxyAgent
from scripted_agents import agent

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.integration.ag2.scripted import tool_call
from autogen_shared_memory.integration.ag2.tools import recall_hook
from autogen_shared_memory.integration.toolkit import CAPSULE_PREAMBLE, Recall
from autogen_shared_memory.testing import HashEmbedder

# A sync two-agent chat whose model asks for 10 memory calls a turn (a remember, then searches), 1,000 calls in
# all, in a process that may open 256 files: AG2 runs a tool that returns a coroutine in a new thread with a
# new event loop each call, and each new thread used to keep its own connections to the scope files open.
CHAT = textwrap.dedent(
    """
    import json, os, resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    from autogen import ConversableAgent, UserProxyAgent
    from autogen_shared_memory import SharedMemoryStore
    from autogen_shared_memory.integration.ag2.scripted import ScriptedModelClient, scripted_llm_config, tool_call
    from autogen_shared_memory.testing import HashEmbedder

    TURNS, PER_TURN = 100, 10
    script = []
    for turn in range(TURNS):
        calls = [
            tool_call("memory_remember", fact=f"fact {turn}-{i}: the heron nests by pond {turn}", scope="agent")
            if i == 0 else tool_call("memory_search", query=f"heron pond {turn}", scope="all")
            for i in range(PER_TURN)
        ]
        script.append({**calls[0], "tool_calls": [c["tool_calls"][0] for c in calls]})
    carol = ConversableAgent("carol", llm_config=scripted_llm_config("carol"), human_input_mode="NEVER")
    carol.register_model_client(ScriptedModelClient, script=script, then="Done.")
    user = UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False)
    store = SharedMemoryStore(sys.argv[1], embedder=HashEmbedder())
    store.attach([carol, user], group_id="crew")
    user.initiate_chat(carol, message="Take notes.", max_turns=TURNS + 1, silent=True)
    answers = [r["content"] for m in user.chat_messages[carol] for r in m.get("tool_responses") or []]
    print(json.dumps({"answers": answers, "fds": len(os.listdir("/proc/self/fd"))}))
    """
)


def test_a_sync_chat_makes_1000_memory_calls_with_256_file_descriptors(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHAT, str(tmp_path)], capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    answers = report["answers"]
    assert len(answers) == 1000
    failed = [a for a in answers if a.startswith(("ERROR", "DENIED"))]
    assert not failed, (len(failed), failed[:3])  # it used to fail for good after 130-150 calls
    assert sum(a.startswith("created fact") for a in answers) == 100
    for n, answer in enumerate(answers):  # each turn's searches find the fact it remembered
        assert n % 10 == 0 or f"fact {n // 10}-0:" in answer, answer
    assert "fact 99-0: the heron nests by pond 99" in answers[-1]
    assert report["fds"] < 128


@pytest.fixture
def thread_starts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the threads started meanwhile."""
    started: list[str] = []
    start = threading.Thread.start

    def counted(self: threading.Thread) -> None:
        started.append(self.name)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", counted)
    yield started


def test_tool_calls_of_a_sync_chat_start_no_thread_per_call(tmp_path: Path, thread_starts: list[str]) -> None:
    """The memory tools answer sync chats themselves, on the process's one memory loop: given a coroutine,
    AG2 runs it in a new thread with a new event loop (whose executor starts another thread) per call."""
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    script = [tool_call("memory_remember", fact=f"note {n} about the heron", scope="agent") for n in range(25)]
    script += [tool_call("memory_search", query=f"note {n} heron") for n in range(25)]
    carol = agent("carol", *script, then="Done.")
    user = UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False)
    store.attach([carol, user], group_id="crew")
    user.initiate_chat(carol, message="Take notes.", max_turns=51, silent=True)
    answers = [m["content"] for m in user.chat_messages[carol] if m.get("role") == "tool"]
    assert len(answers) == 50 and all(a.startswith(("created fact", "[memory: ")) for a in answers), answers
    assert "note 24 about the heron" in answers[-1]
    assert len(thread_starts) <= 8, thread_starts  # the memory loop and its executor's threads, at most
    store.close()


def test_recall_from_sync_code_starts_no_thread_per_reply(tmp_path: Path, thread_starts: list[str]) -> None:
    """The recall hook runs in AG2's sync reply path, with or without an event loop running in the thread
    (``a_initiate_chat`` calls hooks synchronously too)."""
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    store.as_agent("carol").remember("The heron nests by the north pond", "agent")
    inject = recall_hook(Recall(store, "carol"))

    def recall(n: int) -> str:
        messages = inject([{"role": "user", "content": f"where does the heron nest? ({n})"}])
        assert len(messages) == 2 and messages[0]["content"].startswith(CAPSULE_PREAMBLE)
        return str(messages[0]["content"])

    for n in range(40):
        assert "north pond" in recall(n)

    async def inside_a_loop() -> None:
        for n in range(40):
            assert "north pond" in recall(n)

    asyncio.run(inside_a_loop())
    starts = [name for name in thread_starts if not name.startswith("asyncio_")]  # asyncio.run's own executor
    assert len(starts) <= 8, thread_starts
    store.close()


def test_the_memory_loop_is_a_new_one_in_a_forked_process(tmp_path: Path) -> None:
    """A forked child does not inherit the parent's loop thread: it starts its own."""
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    store.as_agent("carol").remember("The heron nests by the north pond", "agent")
    inject = recall_hook(Recall(store, "carol"))
    assert "north pond" in inject([{"role": "user", "content": "heron?"}])[0]["content"]
    store.close()
    code = textwrap.dedent(
        """
        import os, signal, sys
        from autogen_shared_memory import SharedMemoryStore
        from autogen_shared_memory.integration.ag2.tools import recall_hook
        from autogen_shared_memory.integration.toolkit import Recall
        from autogen_shared_memory.testing import HashEmbedder
        store = SharedMemoryStore(sys.argv[1], embedder=HashEmbedder())
        inject = recall_hook(Recall(store, "carol"))
        assert "north pond" in inject([{"role": "user", "content": "heron?"}])[0]["content"]
        pid = os.fork()
        if pid == 0:
            signal.alarm(30)  # a child waiting on the parent's loop, which no thread runs here, ends
            ok = "north pond" in inject([{"role": "user", "content": "heron, child?"}])[0]["content"]
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
        """
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "0", out.stderr[-2000:]

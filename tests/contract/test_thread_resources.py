"""A thread per call, on every backend: what a thread opened is released when it ends (file descriptors,
connections), so a process that runs each call in a new thread never runs out of them."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.integration.toolkit import BoundTools
from autogen_shared_memory.settings import WritePolicy


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_calls_in_new_threads_and_new_loops_leave_file_descriptors_bounded(
    make_store: Callable[..., SharedMemoryStore],
) -> None:
    store = make_store(policy=WritePolicy(global_writers=["alice"]))
    store.operator.add_member("crew", "alice")
    for scope in ("agent", "group", "global"):
        store.as_agent("alice", "crew").remember(f"the {scope} launch is on March 3", scope)
    tools = BoundTools(store, "alice", "crew")

    def call(n: int) -> None:
        assert len(store.as_agent("alice", "crew").search("launch")) == 3
        if n % 10 == 0:
            store.as_agent("alice").remember(f"note {n}", "agent")

    errors: list[BaseException] = []

    def in_a_thread(n: int) -> None:
        try:
            call(n)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    def calls(count: int) -> None:
        for n in range(count):  # a new thread per call
            thread = threading.Thread(target=in_a_thread, args=(n,))
            thread.start()
            thread.join()
        for n in range(count // 2):  # asyncio.run per call: a new loop, whose executor starts a new thread
            answer = asyncio.run(tools.search("launch") if n % 2 else tools.remember(f"memo {n}", "agent"))
            assert not answer.startswith("ERROR"), answer

    calls(10)  # the threads a search keeps for itself have opened what they open
    before = _fds()
    calls(100)
    assert errors == []
    # the last thread's connections at most, or a pool thread's first ones: SQLite measured +900 for these
    # 150 calls when each thread's connections stayed open
    assert _fds() - before <= 30

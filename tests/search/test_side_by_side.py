"""``engine.side_by_side``: jobs shared between the caller and helper threads finish, in order, even when
every helper thread is busy, and a failing job's error reaches the caller."""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from autogen_shared_memory.search.engine import side_by_side


def test_results_come_back_in_the_jobs_order() -> None:
    assert side_by_side([lambda i=i: i * i for i in range(7)], threads=3) == [i * i for i in range(7)]
    assert side_by_side([]) == []


def test_jobs_finish_on_the_caller_when_the_pool_is_busy() -> None:
    pool = ThreadPoolExecutor(1)
    release = threading.Event()
    blocker = pool.submit(release.wait)  # the pool's only thread is taken until the jobs are done
    try:
        ran_on = side_by_side([threading.get_ident for _ in range(4)], threads=2, pool=pool)
        assert set(ran_on) == {threading.get_ident()}
    finally:
        release.set()
        blocker.result()
        pool.shutdown()


def test_an_error_in_a_job_reaches_the_caller() -> None:
    def fail() -> int:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        side_by_side([lambda: 1, fail, lambda: 3], threads=2)


def test_the_caller_runs_the_first_job_itself() -> None:
    # a search's semantic leg (first) stays on the caller's thread: a helper taking it would put two thread
    # hand-offs on the search's critical path
    caller = threading.get_ident()
    pool = ThreadPoolExecutor(1)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the GIL changes hands as often as it can: a helper would win some races
    try:
        for _ in range(3000):
            pool.submit(time.sleep, 0).result()  # the helper is awake and idle
            assert side_by_side([threading.get_ident, threading.get_ident], 2, pool)[0] == caller
    finally:
        sys.setswitchinterval(interval)
        pool.shutdown()

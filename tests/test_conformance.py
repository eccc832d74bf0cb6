"""The packaged backend contract (autogen_shared_memory.testing.conformance) on every backend, and as a third
party runs it: a test file of its own, with its own backend, in a folder of its own.

The three classes below are how this package runs the suite (SQLite files, PostgreSQL, the in-memory backend);
the subprocess tests run docs/backends.md's test file, as written there, on a small backend of a third party's,
and on that backend with one rule broken, which the suite must catch.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from xml.etree import ElementTree

import pytest
import setuptools

import autogen_shared_memory
from autogen_shared_memory.backends.sqlite import SQLiteBackend
from autogen_shared_memory.testing import InMemoryBackend, MemoryDatabase
from autogen_shared_memory.testing.conformance import BackendConformance, BackendFactory

ROOT = Path(__file__).resolve().parent.parent


class TestSQLite(BackendConformance):
    @pytest.fixture
    def backend_factory(self, tmp_path: Path) -> BackendFactory:
        return lambda place: SQLiteBackend(tmp_path / place)


class TestPostgres(BackendConformance):
    @pytest.fixture
    def backend_factory(self, pg_dsn: str) -> BackendFactory:
        from autogen_shared_memory.backends.postgres import PostgresBackend

        prefix = f"t{uuid.uuid4().hex[:16]}"
        return lambda place: PostgresBackend(pg_dsn, schema=f"{prefix}_{place}", max_size=4)


class TestInMemory(BackendConformance):
    @pytest.fixture
    def backend_factory(self) -> BackendFactory:
        databases: dict[str, MemoryDatabase] = {}
        return lambda place: InMemoryBackend(databases.setdefault(place, MemoryDatabase()))


# ------------------------------------------------------------------------------------- as a third party
# The third party's backend: the in-memory one with its storage named by a path (as a backend of files or of a
# server would be), and four variants of it that each break one rule of the contract.
THIRD_PARTY_BACKEND = """
from autogen_shared_memory.testing import InMemoryBackend, MemoryDatabase

_DATABASES = {}


class MyBackend(InMemoryBackend):
    def __init__(self, path):
        super().__init__(_DATABASES.setdefault(str(path), MemoryDatabase()))


class _Dropped(Exception):
    pass


class DropsAForget(MyBackend):
    def transact(self, scope, fn, event="write"):
        if event != "forgotten":
            return super().transact(scope, fn, event)
        result = []

        def run(tx):  # runs the forget, then throws it away: the caller is told it happened
            result.append(fn(tx))
            raise _Dropped

        try:
            super().transact(scope, run, event)
        except _Dropped:
            return result[0]


class NewestFirst(MyBackend):
    def select_ids(self, scope, filters, limit):
        return list(reversed(super().select_ids(scope, filters, 10**9)))[:limit]


class AlwaysOldestFirst(MyBackend):
    def rows(self, scope, table, where=None, **options):
        options.pop("oldest_first", None)
        return super().rows(scope, table, where, **options)


class IgnoresAfterSeq(MyBackend):
    def rows(self, scope, table, where=None, **options):
        options.pop("after_seq", None)
        return super().rows(scope, table, where, **options)
"""
# Each broken variant, and the test of the suite that must catch it.
BROKEN = {
    "DropsAForget": "test_history_of_a_purged_fact_is_its_trail_for_whoever_could_read_it",
    "NewestFirst": "test_select_ids_lists_the_matching_facts_oldest_first_up_to_the_limit",
    "AlwaysOldestFirst": "test_rows_keep_seq_order_and_on_conflict_as_documented",
    "IgnoresAfterSeq": "test_changes_pages_through_with_limit",  # fails: its callers refuse it, none pages forever
}
BROKEN_TESTS = (
    "import my_backend\nimport pytest\n\nfrom autogen_shared_memory.testing import BackendConformance\n"
    + "".join(
        f"""

class Test{name}(BackendConformance):
    @pytest.fixture
    def backend_factory(self, tmp_path):
        return lambda place: my_backend.{name}(tmp_path / place)
"""
        for name in BROKEN
    )
)


def _docs_test_file() -> str:
    """The third party's test file, as docs/backends.md shows it."""
    text = (ROOT / "docs" / "backends.md").read_text()
    (code,) = [c for c in re.findall(r"```py\n(.*?)```", text, re.S) if "BackendConformance" in c]
    return code


@pytest.fixture(scope="module")
def third_party_run(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], str]:
    """Run, in a folder of their own and a process of its own, the third party's test file (the whole suite on
    their backend) and the tests that must catch each broken variant; the outcome of each test by
    ``(class, test)``: ``passed``, ``failed``, ``error`` or ``skipped``."""
    folder = tmp_path_factory.mktemp("their_project")
    (folder / "my_backend.py").write_text(THIRD_PARTY_BACKEND)
    (folder / "test_my_backend.py").write_text(_docs_test_file())
    (folder / "test_broken.py").write_text(BROKEN_TESTS)
    package = Path(autogen_shared_memory.__file__).resolve().parent.parent  # this run's, installed or not
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(folder), str(package)])
    report = folder / "report.xml"
    selected = " or ".join(["TestMyBackend", *BROKEN.values()])
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(folder)]
    command += ["--basetemp", str(folder / "tmp"), f"--junitxml={report}", "-k", selected, "."]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    outcomes: dict[tuple[str, str], str] = {}
    for case in ElementTree.parse(report).iter("testcase"):
        kinds = {child.tag for child in case} & {"failure", "error", "skipped"}
        outcomes[(case.get("classname", "").rsplit(".", 1)[-1], case.get("name", ""))] = (
            "failed" if "failure" in kinds else kinds.pop() if kinds else "passed"
        )
    return outcomes


def test_a_third_party_backend_runs_the_whole_suite_from_its_own_folder_and_passes(
    third_party_run: dict[tuple[str, str], str],
) -> None:
    theirs = {test: outcome for (cls, test), outcome in third_party_run.items() if cls == "TestMyBackend"}
    methods = {name for name in dir(BackendConformance) if name.startswith("test_")}
    assert {test.split("[")[0] for test in theirs} == methods
    assert {test for test, outcome in theirs.items() if outcome != "passed"} == set()


@pytest.mark.parametrize("variant", sorted(BROKEN))
def test_the_suite_fails_a_backend_that_breaks_a_rule(
    third_party_run: dict[tuple[str, str], str], variant: str
) -> None:
    assert third_party_run[(f"Test{variant}", BROKEN[variant])] == "failed"
    assert third_party_run[("TestMyBackend", BROKEN[variant])] == "passed"  # the same test, the rule kept


def test_the_testing_package_is_packaged_and_imports_pytest_only_for_the_suite() -> None:
    # The embedder and the in-memory backend serve programs too (a store's config names
    # autogen_shared_memory.testing.HashEmbedder), where pytest may not be installed.
    assert "autogen_shared_memory.testing" in setuptools.find_packages(where=str(ROOT / "src"))
    probe = (
        "import sys\n"
        "from autogen_shared_memory.testing import HashEmbedder, InMemoryBackend\n"
        "assert 'pytest' not in sys.modules\n"
        "from autogen_shared_memory.testing import BackendConformance\n"
        "assert 'pytest' in sys.modules and BackendConformance.__module__.endswith('.conformance')\n"
    )
    package = Path(autogen_shared_memory.__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(package)}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr

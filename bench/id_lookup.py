"""Looking a fact up by id in a store with many group files: the id index against a baseline revision.

A model can send any id to ``memory_forget``; before the index, an invented id opened every group file. This
runs the baseline (extracted with ``git archive``) and the current tree in alternating worker processes
(A B A B) over the same store layout and prints a markdown table of medians:

    python bench/id_lookup.py --baseline 56959ae --groups 400 --rounds 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common.revisions import REPO, extract

WORKER = r"""
import json, statistics, sys, tempfile, time
from autogen_shared_memory import FactNotFoundError, SharedMemoryStore
from autogen_shared_memory.testing import HashEmbedder

groups = int(sys.argv[1])
root = tempfile.mkdtemp()
store = SharedMemoryStore(root, embedder=HashEmbedder())
real = [store.remember(f"fact of group {g}", "group", group_id=f"g{g}").id for g in range(groups)]
store.close()

store = SharedMemoryStore(root, embedder=HashEmbedder())  # a new process's view: nothing open yet
def timed(fact_id):
    t = time.perf_counter()
    try:
        store.get(fact_id)
    except FactNotFoundError:
        pass
    return (time.perf_counter() - t) * 1e3
first = timed("g_0000000000000000beef")
invented = statistics.median(timed(f"g_00000000000000{i:06x}") for i in range(20))
found = statistics.median(timed(real[(i * 37) % groups]) for i in range(20))
t = time.perf_counter()
for i in range(300):
    store.remember(f"fact number {i} about the crew", "group", group_id="g1")
rate = 300 / (time.perf_counter() - t)
print(json.dumps({"first": first, "invented": invented, "found": found, "remember": rate}))
"""


def run(src: Path, groups: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, "-c", WORKER, str(groups)], env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr)
    result: dict[str, float] = json.loads(out.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="56959ae", help="git revision to compare with")
    parser.add_argument("--groups", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sources = {"baseline": extract(args.baseline, Path(tmp)), "now": REPO / "src"}
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in sources}
        for _ in range(args.rounds):
            for name, src in sources.items():  # A B A B
                runs[name].append(run(src, args.groups))
    rows = [
        ("first lookup of an invented id (ms)", "first", "{:.1f}"),
        ("invented id, later lookups (ms)", "invented", "{:.2f}"),
        ("existing id without its scope (ms)", "found", "{:.2f}"),
        ("single `remember` into a group (facts/s)", "remember", "{:.0f}"),
    ]
    print(f"{args.groups} group files, HashEmbedder, medians of {args.rounds} alternating rounds\n")
    print(f"| measure | baseline {args.baseline} | now | now / baseline |")
    print("| --- | --- | --- | --- |")
    for label, key, fmt in rows:
        base = statistics.median(r[key] for r in runs["baseline"])
        now = statistics.median(r[key] for r in runs["now"])
        print(f"| {label} | {fmt.format(base)} | {fmt.format(now)} | {now / base:.3f} |")


if __name__ == "__main__":
    main()

"""A write batch's near-duplicate pass, baseline revision vs now, side by side (A B B A, fresh processes).

One 100,000-fact group scope is filled once (near-duplicate check off; pooled-noise vectors around the
real model's vectors of 5,000 core sentences, bench_store.py's scheme) and copied for every worker.
Each worker, on one tree:

* ``storage``: the cheap pooled-noise embedder, default thresholds (0.95 / similar 0.8): one warm-up
  ``remember_many`` of 1,000 into the 100k scope (index load and, now, the sketch's fit), then 3 timed
  batches of 1,000 there, then 3 batches of 1,000 into a fresh group scope;
* ``model``: ``OnnxEmbedder(cache_size=0)``: the model's own batch rate (one ``embed`` of the texts, before
  and after), ``remember_many`` of the same count into a fresh scope in batches of 256 (bench_store.py's
  measure), then a warm-up batch and 2,000 facts in batches of 256 into the copied 100k scope; then, paired per
  batch of 256 (other texts, into a fresh scope and into the 100k scope), the model alone on the batch and
  ``remember_many`` of it (which embeds it again), in alternating order: the median of their time ratio is
  ``remember_many`` / the model at the same batch size, with the machine's drift cancelled batch by batch.

    python bench/ab_dedup.py --baseline 4e30bec --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common.corpus import make_corpus, make_facts
from common.embedders import PooledNoiseEmbedder
from common.measure import Quiet, cpu_window, log
from common.revisions import REPO, extract
from common.workloads import GROUP

from autogen_shared_memory.embedding import DEFAULT_MODEL_ID
from autogen_shared_memory.store import SharedMemoryStore

SIZE, POOL, SIGMA = 100_000, 5000, 0.0185  # SIGMA: bench_store.py's calibrated value (cos to core ~0.94)

WORKER = r"""
import json, pickle, shutil, statistics, sys, time
sys.path.insert(0, sys.argv[4])
mode, root, data = sys.argv[1], sys.argv[2], sys.argv[3]
from common.embedders import PooledNoiseEmbedder
from autogen_shared_memory import SharedMemoryStore
d = pickle.load(open(data, "rb"))
cheap = PooledNoiseEmbedder(d["model_id"], d["cores"], d["core_of"], d["sigma"], 1)
out = {}
def timed(store, texts, batch, group):
    t = time.perf_counter()
    for lo in range(0, len(texts), batch):
        store.remember_many(texts[lo : lo + batch], "group", group_id=group)
    return len(texts) / (time.perf_counter() - t)
if mode == "storage":
    store = SharedMemoryStore(root, embedder=cheap)
    t = time.perf_counter()
    store.remember_many(d["warm"], "group", group_id="g1")
    out["first_batch_s"] = time.perf_counter() - t
    out["big"] = timed(store, d["big"], 1000, "g1")
    out["fresh"] = timed(store, d["fresh"], 1000, "fresh")
else:
    from autogen_shared_memory.onnx_embedding import OnnxEmbedder
    model = OnnxEmbedder(cache_size=0)
    model.embed(["warm up the model once", "and with a batch of two"])
    store = SharedMemoryStore(root, embedder=model)
    def model_rate(texts):
        t = time.perf_counter(); model.embed(texts); return len(texts) / (time.perf_counter() - t)
    store.remember("warm-up fact: the scope exists", "group", group_id="fresh")
    before = model_rate(d["model_fresh"])
    out["fresh"] = timed(store, d["model_fresh"], 256, "fresh")
    after = model_rate(d["model_fresh"])
    out["model_fresh"] = (before + after) / 2
    store.remember_many(d["model_warm"], "group", group_id="g1")
    before = model_rate(d["model_big"])
    out["big"] = timed(store, d["model_big"], 256, "g1")
    after = model_rate(d["model_big"])
    out["model_big"] = (before + after) / 2
    def paired(texts, group):
        ratios = []
        for k, lo in enumerate(range(0, len(texts), 256)):
            batch, times = texts[lo : lo + 256], {}
            for step in (("embed", "write") if k % 2 == 0 else ("write", "embed")):
                t = time.perf_counter()
                model.embed(batch) if step == "embed" else store.remember_many(batch, "group", group_id=group)
                times[step] = time.perf_counter() - t
            ratios.append(times["embed"] / times["write"])
        return statistics.median(ratios)
    store.remember("warm-up fact: the paired scope exists", "group", group_id="paired")
    out["paired_fresh"] = paired(d["model_paired"], "paired")
    out["paired_big"] = paired(d["model_paired_big"], "g1")
print(json.dumps(out))
"""


def prepare(tmp: Path) -> tuple[Path, Path]:
    """The 100k-fact store (filled once, by the tree on the path) and the workers' data."""
    import pickle

    corpus = make_corpus(SIZE + 20_000, POOL, 0)
    from autogen_shared_memory.onnx_embedding import OnnxEmbedder

    cores = OnnxEmbedder(cache_size=0).embed(corpus.cores)  # real core vectors: their main directions matter
    cheap = PooledNoiseEmbedder(DEFAULT_MODEL_ID, cores, corpus.core_of, SIGMA, 1)
    root = tmp / "store"
    with SharedMemoryStore(root, embedder=cheap, near_duplicate_threshold=1.01, similar_threshold=1.01) as store:
        for lo in range(0, SIZE, 5000):
            store.remember_many(corpus.facts[lo : lo + 5000], "group", group_id=GROUP)
    rest = corpus.facts[SIZE:]
    used = set(corpus.facts)
    texts = make_facts(8000, 11, used)
    data = {
        "model_id": DEFAULT_MODEL_ID,
        "cores": cores,
        "core_of": corpus.core_of,
        "sigma": SIGMA,
        "warm": rest[:1000],
        "big": rest[1000:4000],
        "fresh": rest[4000:7000],
        "model_fresh": texts[:2000],
        "model_warm": texts[2000:2256],
        "model_big": texts[2256:4256],
        "model_paired": texts[4256:6256],
        "model_paired_big": texts[6256:8000],
    }
    path = tmp / "data.pkl"
    path.write_bytes(pickle.dumps(data))
    return root, path


def run(mode: str, src: Path, template: Path, data: Path, tmp: Path) -> dict[str, float]:
    root = tmp / "copy"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(template, root)
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-c", WORKER, mode, str(root), str(data), str(REPO / "bench")]
    with cpu_window() as w:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    result["other_cores"] = w.other_cores
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--modes", default="storage,model")
    args = parser.parse_args()
    quiet = Quiet(per_phase=30, budget=120, retries=0)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        sources = {"baseline": extract(args.baseline, tmp / "baseline"), "now": REPO / "src"}
        # Filled by the baseline's tree: a newer tree migrates an older file on open, never the reverse.
        env = {**os.environ, "PYTHONPATH": str(sources["baseline"]), "HF_HUB_OFFLINE": "1"}
        filler = f"import sys; sys.path.insert(0, {str(REPO / 'bench')!r}); import ab_dedup, pathlib; "
        subprocess.run(
            [sys.executable, "-c", filler + f"ab_dedup.prepare(pathlib.Path({str(tmp)!r}))"], env=env, check=True
        )
        template, data = tmp / "store", tmp / "data.pkl"
        log("store filled")
        runs: dict[tuple[str, str], list[dict[str, float]]] = {}
        for mode in args.modes.split(","):
            for r in range(args.rounds):
                order = list(sources) if r % 2 == 0 else list(reversed(sources))  # A B, then B A
                for tree in order:
                    quiet.wait(f"{mode} {tree} {r}")
                    result = run(mode, sources[tree], template, data, tmp)
                    log(f"{mode} {tree} round {r}: {result}")
                    runs.setdefault((mode, tree), []).append(result)
    print(f"medians of {args.rounds} rounds (A B, B A), one fresh process per tree and round\n")
    print(f"| measure | baseline {args.baseline} | now | now / baseline |")
    print("| --- | ---: | ---: | ---: |")
    rows = [
        ("storage", "first_batch_s", "storage only: first batch of 1,000 into the 100k scope (s, index load incl.)"),
        ("storage", "big", "storage only: `remember_many` into the 100k scope, 3 x 1,000 (facts/s)"),
        ("storage", "fresh", "storage only: `remember_many` into a fresh scope, 3 x 1,000 (facts/s)"),
        ("model", "fresh", "ONNX model: `remember_many` into a fresh scope, 2,000 in 256s (facts/s)"),
        ("model", "model_fresh", "ONNX model: its own batch rate, same texts (texts/s)"),
        ("model", "big", "ONNX model: `remember_many` into the 100k scope, 2,000 in 256s (facts/s)"),
        ("model", "model_big", "ONNX model: its own batch rate, same texts (texts/s)"),
        ("model", "paired_fresh", "ONNX model, paired per batch of 256: `remember_many` / model rate, fresh scope"),
        ("model", "paired_big", "ONNX model, paired per batch of 256: `remember_many` / model rate, 100k scope"),
        ("storage", "other_cores", "other processes' cores during the storage workers"),
        ("model", "other_cores", "other processes' cores during the model workers"),
    ]
    for mode, key, label in rows:
        if (mode, "now") not in runs:
            continue
        base = statistics.median(r[key] for r in runs[(mode, "baseline")])
        now = statistics.median(r[key] for r in runs[(mode, "now")])
        print(f"| {label} | {base:.2f} | {now:.2f} | {now / base if base else float('nan'):.2f} |")
    if ("model", "now") in runs:
        for tree in sources:
            ratios = [(r["fresh"] / r["model_fresh"], r["big"] / r["model_big"]) for r in runs[("model", tree)]]
            print(
                f"\n{tree}: remember_many / model batch rate, fresh scope {[round(a, 2) for a, _ in ratios]}, "
                f"100k scope {[round(b, 2) for _, b in ratios]}"
            )


if __name__ == "__main__":
    main()

"""Deduplication: the merge rule of a baseline revision and of this tree, side by side in one run.

Quality, on bench/dedup_corpus.json (hand-written: pairs that differ in one detail, corrections, true
duplicates), with the real all-MiniLM-L6-v2 vectors: distinct facts kept, corrections applied (declared
with ``supersedes``; and kept at all when undeclared), true duplicates merged. Speed: ``remember_many``
throughput (batches of 250, and single ``remember`` calls) into a scope already holding ``--fill`` facts,
with the same precomputed real vectors on both sides, so the write path is what is compared.

``--cells`` compares, in this tree only, the near-duplicate candidates of a big scope's cells with the exact
scan on the same writes (the corpus, and LoCoMo's turns with ``--locomo``): every receipt, decisions and
similar lists. The baseline is the package source at ``--baseline`` (a git revision, default: the last commit before
the lifecycle change), extracted with ``git archive`` and imported in a worker process; the current tree
is imported the same way. Rounds alternate baseline and current (A B A B); rates are medians.

    python bench/dedup.py --out docs/benchmarks.md
    python bench/dedup.py --cells --locomo /path/to/locomo.json
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

import numpy as np
from common.revisions import REPO, extract

HERE = Path(__file__).resolve().parent
BASELINE = "5cc1c74"  # main before the fact lifecycle
SECTION = "## Deduplication: quality and write speed"
PAIRS = {"distinct": ("a", "b"), "corrections": ("old", "new"), "duplicates": ("a", "b")}


# ------------------------------------------------------------------------------------------ the worker
class LookupEmbedder:
    """Precomputed real-model vectors by text (both sides embed nothing at run time)."""

    model_id = "sentence-transformers/all-MiniLM-L6-v2"
    dimension = 384

    def __init__(self, texts: list[str], vectors: np.ndarray) -> None:
        self.rows = {t: i for i, t in enumerate(texts)}
        self.vectors = vectors

    def embed(self, texts: Any) -> np.ndarray:
        return self.vectors[[self.rows[t] for t in texts]]


def quality(store_cls: Any, embedder: LookupEmbedder, corpus: dict[str, Any], root: Path) -> dict[str, Any]:
    store = store_cls(root, embedder=embedder)
    out: dict[str, Any] = {}
    kept: dict[str, list[int]] = {}
    for i, pair in enumerate(corpus["distinct"]):
        a = store.as_operator(f"d{i}").remember(pair["a"], "group")
        b = store.as_operator(f"d{i}").remember(pair["b"], "group")
        kept.setdefault(pair["kind"], []).append(int(b.id != a.id))
    out["distinct_kept"] = {k: [sum(v), len(v)] for k, v in sorted(kept.items())}
    applied = undeclared = 0
    for i, pair in enumerate(corpus["corrections"]):
        old = store.as_operator(f"c{i}").remember(pair["old"], "group")
        new = store.as_operator(f"c{i}").remember(pair["new"], "group", supersedes=[old.id])
        after = store.as_operator(f"c{i}").get(new.id)
        applied += int(new.id != old.id and after.content == pair["new"] and after.status == "active")
        plain = store.as_operator(f"u{i}").remember(pair["old"], "group")
        undeclared += int(store.as_operator(f"u{i}").remember(pair["new"], "group").id != plain.id)
    out["corrections_applied"] = [applied, len(corpus["corrections"])]
    out["corrections_kept_undeclared"] = [undeclared, len(corpus["corrections"])]
    merged: dict[str, list[int]] = {}
    for i, pair in enumerate(corpus["duplicates"]):
        a = store.as_operator(f"x{i}").remember(pair["a"], "group")
        b = store.as_operator(f"x{i}").remember(pair["b"], "group")
        merged.setdefault(pair["kind"], []).append(int(b.id == a.id))
    out["duplicates_merged"] = {k: [sum(v), len(v)] for k, v in sorted(merged.items())}
    store.close()
    return out


def stored_in_global(store: Any) -> int:
    return sum(sum(st.counts.values()) for st in store.stats() if st.scope.kind == "global")


def speed(store_cls: Any, embedder: LookupEmbedder, fill: list[str], fresh: list[str], root: Path) -> dict[str, float]:
    store = store_cls(root, embedder=embedder)
    store.as_agent("warm").remember_many(["warm-up"], "agent")
    for lo in range(0, len(fill), 2000):
        store.operator.remember_many(fill[lo : lo + 2000], "global")
    before = stored_in_global(store)
    t0 = time.perf_counter()
    for lo in range(0, len(fresh) - 100, 250):
        store.operator.remember_many(
            fresh[lo : lo + 250 if lo + 250 <= len(fresh) - 100 else len(fresh) - 100], "global"
        )
    batched = (len(fresh) - 100) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for text in fresh[-100:]:
        store.operator.remember(text, "global")
    single = 100 / (time.perf_counter() - t0)
    stored = stored_in_global(store) - before
    store.close()
    return {"remember_many_per_s": batched, "remember_per_s": single, "stored": stored}


def worker(data: Path, out: Path) -> None:
    import autogen_shared_memory
    from autogen_shared_memory import SharedMemoryStore

    payload = json.loads((data / "payload.json").read_text())
    embedder = LookupEmbedder(payload["texts"], np.load(data / "vectors.npy"))
    with tempfile.TemporaryDirectory() as tmp:
        result = {
            "package": autogen_shared_memory.__file__,
            "quality": quality(SharedMemoryStore, embedder, payload["corpus"], Path(tmp) / "q"),
            "speed": {
                name: speed(SharedMemoryStore, embedder, work["fill"], work["fresh"], Path(tmp) / name)
                for name, work in payload["workloads"].items()
            },
        }
    out.write_text(json.dumps(result))


# ------------------------------------------------------------------------------------------ the parent
def templated(n: int, seed: int) -> list[str]:
    """Facts of a few shapes with different numbers, names and days: near neighbours that must all stay."""
    rng = np.random.default_rng(seed)
    names = ["Dana", "Priya", "Omar", "Lena", "Kenji", "Ana", "Tom", "Sofia"]
    days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
    shapes = [
        "Order {n} ships from warehouse {w} on {d}.",
        "{p} owns ticket INC-{n} until {d}.",
        "The staging host {w} listens on port {n}.",
        "Invoice {n} for customer {p} is due on {d}.",
        "Build {n} of service {w} failed on {d}, reported by {p}.",
    ]
    out = []
    for i in range(n):
        shape = shapes[i % len(shapes)]
        out.append(
            shape.format(
                n=1000 + i, w=int(rng.integers(1, 40)), d=days[int(rng.integers(5))], p=names[int(rng.integers(8))]
            )
        )
    return out


def locomo_turns(path: Path) -> list[str]:
    """The dialogue turns of a LoCoMo file, in order, as ``speaker: text`` (read from its path; never copied)."""
    turns: list[str] = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        conv = sample["conversation"]
        sessions = sorted(int(k.split("_")[1]) for k, v in conv.items() if k.count("_") == 1 and isinstance(v, list))
        for n in sessions:
            turns += [f"{item['speaker']}: {item['text']}" for item in conv[f"session_{n}"]]
    return turns


def run_worker(src: Path, data: Path, out: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, __file__, "--worker", str(data), str(out)], check=True, env=env)
    result: dict[str, Any] = json.loads(out.read_text())
    if not result["package"].startswith(str(src)):
        raise RuntimeError(f"the worker imported {result['package']}, not the source under {src}")
    return result


def frac(pair: list[int]) -> str:
    return f"{pair[0]}/{pair[1]}"


def report(
    args: argparse.Namespace,
    runs: dict[str, list[dict[str, Any]]],
    machine: str,
    payload_workloads: dict[str, dict[str, list[str]]],
) -> str:
    base, cur = runs["baseline"][0]["quality"], runs["current"][0]["quality"]
    workloads = {name: (len(w["fill"]), len(w["fresh"])) for name, w in payload_workloads.items()}
    med = {
        side: {
            name: {k: statistics.median(r["speed"][name][k] for r in rs) for k in rs[0]["speed"][name] if k != "stored"}
            for name in workloads
        }
        for side, rs in runs.items()
    }

    def total(d: dict[str, list[int]]) -> list[int]:
        return [sum(v[0] for v in d.values()), sum(v[1] for v in d.values())]

    exact = {k: v for k, v in base["duplicates_merged"].items() if k != "word_order"}
    exact_now = {k: v for k, v in cur["duplicates_merged"].items() if k != "word_order"}
    lines = [
        SECTION,
        "",
        f"Command: `{' '.join(['python bench/dedup.py', *sys.argv[1:]])}` ({machine}). Baseline: `{args.baseline}` "
        "(main before the lifecycle change); current: this tree. Corpus: `bench/dedup_corpus.json` (hand-written); "
        "vectors: the real all-MiniLM-L6-v2, computed once and given to both sides (so the write path is what is "
        "timed). Each corpus pair is written into a group scope of its own.",
        "",
        "| measure | goal | baseline | current |",
        "| --- | --- | --- | --- |",
        f"| distinct facts kept (one detail differs) | all | {frac(total(base['distinct_kept']))} | "
        f"{frac(total(cur['distinct_kept']))} |",
        f"| corrections applied (`supersedes`: the new value stored, the old closed) | all | "
        f"{frac(base['corrections_applied'])} | {frac(cur['corrections_applied'])} |",
        f"| corrections kept when not declared (the new value stored at all) | all | "
        f"{frac(base['corrections_kept_undeclared'])} | {frac(cur['corrections_kept_undeclared'])} |",
        f"| true duplicates merged, exact after normalisation | all | {frac(total(exact))} | "
        f"{frac(total(exact_now))} |",
        f"| true duplicates merged, word order changed | (reported) | "
        f"{frac(base['duplicates_merged']['word_order'])} | {frac(cur['duplicates_merged']['word_order'])} |",
    ]
    for name, (fill, fresh) in workloads.items():
        stored = [int(runs[side][0]["speed"][name]["stored"]) for side in ("baseline", "current")]
        lines.append(
            f"| facts stored of the {fresh:,} written, {name} | all distinct ones | {stored[0]:,} | {stored[1]:,} |"
        )
        for key, label in (
            ("remember_many_per_s", "`remember_many` facts/s"),
            ("remember_per_s", "`remember` calls/s"),
        ):
            b, c = med["baseline"][name][key], med["current"][name][key]
            lines.append(
                f"| {label}, {name} ({fill:,} facts in the scope, {fresh:,} written) | >= 90% | {b:,.0f} | "
                f"{c:,.0f} ({c / b:.0%}) |"
            )
    lines += ["", "Distinct facts kept, per kind (baseline / current):", ""]
    lines.append(
        ", ".join(
            f"{k} {frac(base['distinct_kept'][k])} / {frac(cur['distinct_kept'][k])}"
            for k in sorted(cur["distinct_kept"])
        )
    )
    lines += ["", "Duplicates merged, per kind (baseline / current):", ""]
    lines.append(
        ", ".join(
            f"{k} {frac(base['duplicates_merged'][k])} / {frac(cur['duplicates_merged'][k])}"
            for k in sorted(cur["duplicates_merged"])
        )
    )
    for name in workloads:
        rates = "; ".join(
            f"{side}: " + ", ".join(f"{r['speed'][name]['remember_many_per_s']:,.0f}" for r in rs)
            for side, rs in runs.items()
        )
        lines += ["", f"Every round's `remember_many` rate, {name}: {rates}."]
    lines.append("")
    return "\n".join(lines)


def write_section(path: Path, text: str) -> None:
    doc = path.read_text(encoding="utf-8") if path.exists() else ""
    if SECTION in doc:
        start = doc.index(SECTION)
        rest = doc.find("\n## ", start + len(SECTION))
        doc = doc[:start] + text + ("\n" + doc[rest + 1 :] if rest != -1 else "")
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    path.write_text(doc, encoding="utf-8")


def cells_check(corpus: dict[str, Any], locomo: Path | None) -> str:
    """The near-duplicate candidates of a big scope's cells against the exact scan, in this tree: the same
    writes into one group scope of a fresh SQLite store each way (LoCoMo's turns with the check on in batches
    of 256, then the corpus's first texts in one batch, its second texts in batches of 64 and the first 100 of
    them again one by one), every receipt compared. The cells serve from the first batch on here
    (``CELLS_FROM`` = 1), where by default they serve scopes of 4,096 facts and more."""
    from autogen_shared_memory.backends.base import ModelInfo
    from autogen_shared_memory.backends.sqlite import SQLiteBackend
    from autogen_shared_memory.core.lifecycle import content_hash
    from autogen_shared_memory.core.types import Draft, ScopeRef, new_fact_id
    from autogen_shared_memory.onnx_embedding import OnnxEmbedder
    from autogen_shared_memory.search import index as index_module

    firsts = [p[PAIRS[sec][0]] for sec in PAIRS for p in corpus[sec]]
    seconds = [p[PAIRS[sec][1]] for sec in PAIRS for p in corpus[sec]]
    background = [t for t in dict.fromkeys(locomo_turns(locomo) if locomo else []) if t not in {*firsts, *seconds}]
    texts = list(dict.fromkeys([*background, *firsts, *seconds]))
    vectors = dict(zip(texts, np.asarray(OnnxEmbedder().embed(texts), dtype=np.float32), strict=True))
    model = ModelInfo("sentence-transformers/all-MiniLM-L6-v2", 384)
    writes = [background[i : i + 256] for i in range(0, len(background), 256)] + [firsts]
    writes += [seconds[i : i + 64] for i in range(0, len(seconds), 64)] + [[t] for t in seconds[:100]]

    def run(cells_from: int) -> list[tuple[str, str, str | None, tuple[str, ...]]]:
        index_module.CELLS_FROM = cells_from
        out = []
        with tempfile.TemporaryDirectory() as tmp:
            backend, scope, said = SQLiteBackend(tmp), ScopeRef("group", "g"), {}
            for batch in writes:
                now = time.time()
                drafts = [Draft(new_fact_id("group"), t, "system", now, content_hash=content_hash(t)) for t in batch]
                said.update((d.id, d.content) for d in drafts)
                receipts = backend.write(scope, drafts, np.stack([vectors[t] for t in batch]), model, 0.95, 0.8)
                for d, r in zip(drafts, receipts, strict=True):
                    merged = said[r.duplicate_of] if r.duplicate_of else None
                    out.append((d.content, r.status, merged, tuple(sorted(said[i] for i in r.similar))))
            backend.close()
        return out

    exact, cells = run(10**9), run(1)
    differ = [(a, b) for a, b in zip(exact, cells, strict=True) if a != b]
    decisions = sum(a[1:3] != b[1:3] for a, b in differ)
    lines = [
        f"Cells against the exact scan: {len(exact):,} writes ({len(background):,} LoCoMo turns, "
        f"{len(firsts) + len(seconds)} corpus texts, 100 single writes); reinforced: exact "
        f"{sum(a[1] == 'reinforced' for a in exact)}, cells {sum(b[1] == 'reinforced' for b in cells)}; "
        f"decisions that differ: {decisions}; receipts whose similar list differs: {len(differ) - decisions} "
        f"(similar facts named: exact {sum(len(a[3]) for a in exact):,}, cells {sum(len(b[3]) for b in cells):,})."
    ]
    lines += [f"- {a[0]!r}: exact {a[1:]}, cells {b[1:]}" for a, b in differ]
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(Path(sys.argv[2]), Path(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default=BASELINE, help="git revision of the old rule")
    parser.add_argument("--corpus", type=Path, default=HERE / "dedup_corpus.json")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fill", type=int, default=5000, help="facts in the scope before timing writes")
    parser.add_argument("--locomo", type=Path, help="a LoCoMo JSON file: its dialogue turns are a second workload")
    parser.add_argument("--out", type=Path, help="write the section into this markdown file")
    parser.add_argument("--cells", action="store_true", help="only compare a big scope's cells with the exact scan")
    args = parser.parse_args()
    if args.cells:
        print(cells_check(json.loads(args.corpus.read_text(encoding="utf-8")), args.locomo))
        return

    from autogen_shared_memory import SentenceTransformerEmbedder

    corpus = json.loads(args.corpus.read_text(encoding="utf-8"))
    fresh = [f"{t} (batch)" for t in templated(2100, 2)]
    workloads = {"templated near neighbours": {"fill": templated(args.fill, 1), "fresh": fresh}}
    if args.locomo:
        turns = locomo_turns(args.locomo)
        workloads["LoCoMo dialogue turns"] = {"fill": turns[: len(turns) // 2], "fresh": turns[len(turns) // 2 :]}
    texts = sorted(
        {
            *(t for w in workloads.values() for part in w.values() for t in part),
            *(p[k] for sec, ks in PAIRS.items() for p in corpus[sec] for k in ks),
            "warm-up",
        }
    )
    t0 = time.perf_counter()
    vectors = np.asarray(SentenceTransformerEmbedder().embed(texts), dtype=np.float32)
    print(f"embedded {len(texts)} texts in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    machine = f"{os.cpu_count()} cores, Python {sys.version.split()[0]}"
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        np.save(tmpdir / "vectors.npy", vectors)
        payload = {"texts": texts, "corpus": corpus, "workloads": workloads}
        (tmpdir / "payload.json").write_text(json.dumps(payload))
        (tmpdir / "base").mkdir()
        sources = {"baseline": extract(args.baseline, tmpdir / "base"), "current": REPO / "src"}
        runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "current": []}
        for r in range(args.rounds):
            for side in ("baseline", "current"):  # A B A B
                result = run_worker(sources[side], tmpdir, tmpdir / f"{side}{r}.json")
                runs[side].append(result)
                print(f"round {r} {side}: {result['speed']}", file=sys.stderr)
    text = report(args, runs, machine, workloads)
    print(text)
    if args.out:
        write_section(args.out, text)


if __name__ == "__main__":
    main()

"""PNG plots of the benchmark JSON files (matplotlib, headless), for the docs.

Run from the repository root::

    python bench/plots.py --locomo bench/results/locomo.json --store bench/results/store.json \\
        --capsules bench/results/capsule_economy.json --scale bench/results/scale.json --out-dir docs/img

Each plot is made from one JSON file and skipped, with a message, if that file is missing:

* ``locomo_recall.png``: recall by method and LoCoMo category, from ``bench/locomo.py --json`` (the main-table
  methods of each indexed-text variant; ``--metric`` picks R@1/R@5/R@10/R@20/MRR/NDCG@10, default R@10).
* ``store_latency_rss.png``: search latency p50/p95 and RSS against the number of facts, from
  ``bench/bench_store.py --json``.
* ``capsule_tokens.png`` and ``capsule_recall.png``: tokens injected per turn by capsule recall vs ListMemory
  (log-log), and the fraction of relevant facts the capsule keeps, from ``bench/capsule_economy.py --json``.
* ``scale.png``: search latency p50/p95 with the exact index vs HNSW, and RSS, against the number of facts
  (log x, up to 1M), from ``bench/bench_scale.py --json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter

DPI = 130
_THOUSANDS = FuncFormatter(lambda x, _pos: f"{x:,.0f}")


def _load(path: Path | None, what: str) -> dict[str, Any] | None:
    if path is None:
        print(f"skip {what}: no input given", file=sys.stderr)
        return None
    if not path.is_file():
        print(f"skip {what}: {path} does not exist", file=sys.stderr)
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        print(f"skip {what}: cannot read {path} ({exc})", file=sys.stderr)
        return None
    if not isinstance(data, dict):
        print(f"skip {what}: {path} is not a JSON object", file=sys.stderr)
        return None
    return data


def _save(fig: Any, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    print(f"wrote {out}", file=sys.stderr)
    return out


# ------------------------------------------------------------------------------------------ (a) LoCoMo
def plot_locomo(data: dict[str, Any], out: Path, metric: str = "R@10") -> Path | None:
    """Grouped bars: one group per category (overall first), one bar per method; one panel per indexed text."""
    rows = [r for r in data.get("results", []) if str(r.get("section", "")).startswith("methods:")]
    if not rows:
        print("skip LoCoMo plot: no 'methods:' rows in the JSON", file=sys.stderr)
        return None
    names = {str(k): v for k, v in (data.get("setup", {}).get("category_names") or {}).items()}
    texts = list(dict.fromkeys(r["section"].split(":", 1)[1] for r in rows))
    counts = data.get("data", {}).get("per_category", {})
    cats = {k for r in rows for k in r.get("summary", {}) if k.startswith("cat") and k[3:].isdigit()}
    groups = ["all", *sorted(cats, key=lambda k: int(k[3:]))]

    def label(g: str) -> str:
        if g == "all":
            n = rows[0]["summary"].get("all", {}).get("n")
            return f"overall\n(n={n})" if n else "overall"
        name = names.get(g[3:], "")
        n = rows[0]["summary"].get(g, {}).get("n") or counts.get(f"{g[3:]} {name}")
        return f"{g[3:]} {name}" + (f"\n(n={n})" if n else "")

    fig, axes = plt.subplots(len(texts), 1, figsize=(13, 4.6 * len(texts)), squeeze=False)
    cmap = plt.get_cmap("tab10")
    methods = list(dict.fromkeys(r["name"] for r in rows))
    for ax, text in zip(axes[:, 0], texts, strict=True):
        sub = [r for r in rows if r["section"] == f"methods:{text}"]
        width = 0.8 / max(1, len(sub))
        for i, r in enumerate(sub):
            xs = [g + (i - (len(sub) - 1) / 2) * width for g in range(len(groups))]
            ys = [r["summary"].get(g, {}).get(metric, float("nan")) for g in groups]
            ax.bar(xs, ys, width=width, color=cmap(methods.index(r["name"]) % 10), label=r["name"])
        ax.set_xticks(range(len(groups)), [label(g) for g in groups])
        ax.set_ylim(0, 1)
        ax.set_ylabel(f"{metric} (fraction of evidence turns)" if metric.startswith("R@") else metric)
        ax.set_title(f"LoCoMo {metric} by method and question category — indexed text: {text}")
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(
        handles, labels, loc="lower center", ncol=min(4, len(labels)), frameon=False, bbox_to_anchor=(0.5, -0.01)
    )
    top_k = data.get("setup", {}).get("top_k")
    fig.suptitle(
        "Recall of the dialogue turns a question needs (LoCoMo, bench/locomo.py"
        + (f", top_k={top_k}" if top_k else "")
        + ")",
        y=1.0,
    )
    fig.tight_layout(rect=(0, 0.07, 1, 0.98))
    return _save(fig, out)


# ------------------------------------------------------------------------------------------ (b) store
def plot_store(data: dict[str, Any], out: Path) -> Path | None:
    """Left: search latency p50/p95 vs facts (log x); right: RSS vs facts."""
    search = data.get("search") or []
    memory = data.get("memory") or []
    if not search and not memory:
        print("skip store plot: no 'search' or 'memory' entries in the JSON", file=sys.stderr)
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    series: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in search:
        series.setdefault((r.get("layout", "?"), r.get("scope", "?"), r.get("variant", "?")), []).append(r)
    cmap = plt.get_cmap("tab10")
    for i, ((_layout, scope, variant), rs) in enumerate(
        sorted(series.items(), key=lambda kv: kv[0][2] != "library default")
    ):
        rs = sorted(rs, key=lambda r: r["size"])
        xs = [r["size"] for r in rs]
        n_scopes = rs[0].get("n_scopes")
        name = f'scope="{scope}" ({n_scopes} scope{"s" if n_scopes != 1 else ""})'
        if variant != "library default":
            name += f", {variant}"
        color = cmap(i % 10)
        ax1.plot(xs, [r["latency"]["p50_ms"] for r in rs], "o-", color=color, label=f"{name}: p50")
        ax1.plot(xs, [r["latency"]["p95_ms"] for r in rs], "s--", color=color, alpha=0.8, label=f"{name}: p95")
    embed = (data.get("model") or {}).get("query_embed", {}).get("p50_ms")
    if embed:
        ax1.axhline(embed, color="grey", lw=1, ls=":", label=f"query embedding alone, p50 ({embed:.1f} ms)")
    ax1.set_xscale("log")
    ax1.xaxis.set_major_formatter(_THOUSANDS)
    ax1.set_xlabel("facts in the store (log scale)")
    ax1.set_ylabel("search latency (ms, real model embeds each query)")
    ax1.set_title("Search latency, top_k=5")
    ax1.set_ylim(bottom=0)
    ax1.grid(alpha=0.3, which="both")
    ax1.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    if memory:
        ms = sorted(memory, key=lambda m: m["size"])
        xs = [m["size"] for m in ms]
        ax2.plot(xs, [m["ru_maxrss_mb"] for m in ms], "o-", label="peak RSS so far (ru_maxrss)")
        ax2.plot(xs, [m["vmrss_mb"] for m in ms], "s--", label="RSS after populating and searching (VmRSS)")
        ax2.set_xscale("log")
        ax2.xaxis.set_major_formatter(_THOUSANDS)
        ax2.set_ylim(bottom=0)
        ax2.set_xlabel("facts in each store (log scale)")
        ax2.set_ylabel("MB")
        ax2.set_title("Process memory (model loaded; two stores of this size open)")
        ax2.grid(alpha=0.3, which="both")
        ax2.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1)
    else:
        ax2.set_axis_off()
    date = (data.get("meta") or {}).get("date", "")
    fig.suptitle(f"Core store benchmark (bench/bench_store.py{', ' + date if date else ''})")
    fig.tight_layout()
    return _save(fig, out)


# ------------------------------------------------------------------------------------------ (c) capsules
def _tokens_panel(ax: Axes, summary: Sequence[dict[str, Any]], overheads: dict[str, Any], key: str, unit: str) -> None:
    xs = [s["size"] for s in summary]
    t = [s["tokens"] for s in summary]
    tool_fixed = overheads["tool_schemas_json"][key] + overheads["default_scaffolding"][key]
    read_fixed = overheads["read_only_scaffolding"][key]
    lm = [x["listmemory"][f"{key}_mean"] for x in t]
    tool = [x["tool_2048"][f"{key}_mean"] for x in t]
    upd = [x["update_1024"][f"{key}_mean"] for x in t]
    ax.plot(xs, lm, "o-", color="tab:red", lw=2, label="ListMemory: all facts in the prompt")
    ax.plot(xs, tool, "o-", color="tab:blue", lw=2, label="memory_search capsule (top 5, ≤2048 B)")
    ax.plot(xs, upd, "o-", color="tab:green", lw=2, label="update_context capsule (top 5, ≤1024 B)")
    if all("tool_top10_2048" in x for x in t):
        top10 = [x["tool_top10_2048"][f"{key}_mean"] for x in t]
        ax.plot(xs, top10, "^:", color="tab:blue", label="memory_search capsule (top 10, ≤2048 B)")
    ax.plot(
        xs, [v + tool_fixed for v in tool], "--", color="tab:blue", label="tool path incl. tool schemas + scaffolding"
    )
    ax.plot(xs, [v + read_fixed for v in upd], "--", color="tab:green", label="update_context incl. scaffolding")
    ax.axhline(128_000, color="grey", ls=":", lw=1, label="128k-token context window")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(_THOUSANDS)
    ax.yaxis.set_major_formatter(_THOUSANDS)
    ax.set_xlabel("facts in the crew's memory (log scale)")
    ax.set_ylabel(unit)
    ax.grid(alpha=0.3, which="both")
    for i, (x, y) in enumerate(zip(xs, lm, strict=True)):
        first = i == 0
        ax.annotate(
            f"{y:,.0f}",
            (x, y),
            textcoords="offset points",
            xytext=(4 if first else -4, 6),
            ha="left" if first else "right",
            fontsize=8,
        )
    ax.annotate(
        f"{tool[-1]:,.0f}", (xs[-1], tool[-1]), textcoords="offset points", xytext=(-4, -12), ha="right", fontsize=8
    )


def plot_capsule_tokens(data: dict[str, Any], out: Path) -> Path | None:
    summary = data.get("summary") or []
    overheads = data.get("fixed_overheads")
    if not summary or not overheads:
        print("skip capsule tokens plot: no 'summary' / 'fixed_overheads' in the JSON", file=sys.stderr)
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    _tokens_panel(ax1, summary, overheads, "minilm_tokens", "tokens per turn (MiniLM WordPiece, log scale)")
    ax1.set_title("Counted with the packaged MiniLM tokenizer")
    _tokens_panel(ax2, summary, overheads, "bytes_div_4", "≈ tokens per turn (UTF-8 bytes / 4, log scale)")
    ax2.set_title("Estimated as UTF-8 bytes / 4")
    ax2.yaxis.set_tick_params(labelleft=True)
    handles, labels = ax1.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=9, frameon=False)
    q = data.get("setup", {}).get("queries")
    fig.suptitle(
        "Tokens injected per turn: capsule recall vs loading all memory"
        + (f" (mean over {q} questions per size)" if q else "")
    )
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    return _save(fig, out)


def plot_capsule_recall(data: dict[str, Any], out: Path) -> Path | None:
    """Left: relevant facts kept by each capsule path; right: search top-5 recall under each fusion setting."""
    summary = data.get("summary") or []
    if not summary:
        print("skip capsule recall plot: no 'summary' in the JSON", file=sys.stderr)
        return None
    xs = [s["size"] for s in summary]
    fusion = [s.operator.get("search_top5_recall_by_fusion") or {} for s in summary]
    knobs = [k for k in fusion[0] if all(k in f for f in fusion)]
    fig, axes = plt.subplots(1, 2 if knobs else 1, figsize=(13 if knobs else 7.5, 4.8), squeeze=False)
    ax = axes[0, 0]
    series = [
        ("search_top5", "search top 5 (no size limit)", ":", "o", "black"),
        ("tool_2048", "memory_search capsule (top 5, ≤2048 B)", "-", "o", "tab:blue"),
        ("update_1024", "update_context capsule (top 5, ≤1024 B)", "--", "s", "tab:green"),
        ("tool_top10_2048", "memory_search capsule (top 10, ≤2048 B)", "-", "^", "tab:purple"),
    ]
    for key, label, style, marker, color in series:
        ys = [s["recall"].get(key) for s in summary]
        if all(y is not None for y in ys):
            ax.plot(xs, ys, style, marker=marker, color=color, label=label)
    ax.plot(xs, [1.0] * len(xs), color="tab:red", lw=1, alpha=0.6, label="ListMemory (everything, by construction)")
    q = data.get("setup", {}).get("queries")
    lib = data.get("library") or {}
    defaults = (
        f"library defaults: rrf_k={lib['rrf_k']:g}, semantic_weight={lib['semantic_weight']:g}"
        if "rrf_k" in lib
        else "library defaults"
    )
    ax.set_title(f"Relevant facts inside the capsule\n({defaults}" + (f"; {q} questions per size)" if q else ")"))
    panels = [ax]
    if knobs:
        ax2 = axes[0, 1]
        styles = ["o-", "s--", "^-.", "v:", "x-", "d--"]
        for i, k in enumerate(knobs):
            ax2.plot(xs, [f[k] for f in fusion], styles[i % len(styles)], label=k)
        ax2.set_title("Search top-5 recall under other fusion settings\n(same stores and questions)")
        panels.append(ax2)
    for a in panels:
        a.set_xscale("log")
        a.xaxis.set_major_formatter(_THOUSANDS)
        a.set_ylim(0, 1.05)
        a.set_xlabel("facts in the crew's memory (log scale)")
        a.set_ylabel("relevant facts kept (fraction)")
        a.grid(alpha=0.3, which="both")
        a.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    return _save(fig, out)


# ------------------------------------------------------------------------------------------ (d) scale
def plot_scale(data: dict[str, Any], out: Path) -> Path | None:
    """Left: search p50/p95, exact index vs HNSW, vs facts (log x); right: process RSS vs facts."""
    rows = sorted(data.get("sizes") or [], key=lambda r: r["n_facts"])
    if not rows:
        print("skip scale plot: no 'sizes' entries in the JSON", file=sys.stderr)
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    ef = (data.get("meta") or {}).get("hnsw_params", {}).get("ef_search")
    for name, label, color in (("exact", "exact scan (default)", "tab:red"), ("hnsw", "HNSW", "tab:blue")):
        rs = [r for r in rows if name in r]
        if not rs:
            continue
        if name == "hnsw" and ef:
            label += f" (ef {ef})"
        xs = [r["n_facts"] for r in rs]
        ax1.plot(xs, [r[name]["latency"]["p50_ms"] for r in rs], "o-", color=color, label=f"{label}: p50")
        ax1.plot(xs, [r[name]["latency"]["p95_ms"] for r in rs], "s--", color=color, alpha=0.8, label=f"{label}: p95")
    ax1.plot(
        [r["n_facts"] for r in rows],
        [r["query_embed"]["p50_ms"] for r in rows],
        ":",
        color="grey",
        marker=".",
        label="query embedding alone, p50",
    )
    skipped = [r for r in rows if "hnsw" not in r]
    if skipped:
        ax1.annotate(
            "HNSW skipped at " + ", ".join(f"{r['n_facts']:,}" for r in skipped),
            (0.02, 0.95),
            xycoords="axes fraction",
            fontsize=8,
            va="top",
        )
    ax1.set_xscale("log")
    ax1.xaxis.set_major_formatter(_THOUSANDS)
    ax1.set_xlabel("facts in the group scope (log scale)")
    ax1.set_ylabel("search latency (ms, real model embeds each query)")
    ax1.set_title("Search latency, top_k=5: exact index vs HNSW")
    ax1.set_ylim(bottom=0)
    ax1.grid(alpha=0.3, which="both")
    ax1.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    xs = [r["n_facts"] for r in rows]
    ax2.plot(xs, [r["rss_after_exact_mb"] for r in rows], "o-", color="tab:red", label="RSS after exact searches")
    built = [r for r in rows if "rss_after_hnsw_mb" in r]
    if built:
        ax2.plot(
            [r["n_facts"] for r in built],
            [r["rss_after_hnsw_mb"] for r in built],
            "s-",
            color="tab:blue",
            label="RSS after HNSW load + build (second backend)",
        )
    ax2.plot(xs, [r["peak_rss_mb"] for r in rows], "^:", color="black", label="peak RSS so far (ru_maxrss)")
    ax2.set_xscale("log")
    ax2.xaxis.set_major_formatter(_THOUSANDS)
    ax2.yaxis.set_major_formatter(_THOUSANDS)
    ax2.set_ylim(bottom=0)
    ax2.set_xlabel("facts in the group scope (log scale)")
    ax2.set_ylabel("MB")
    ax2.set_title("Benchmark process memory (model loaded)")
    ax2.grid(alpha=0.3, which="both")
    ax2.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1)
    date = (data.get("meta") or {}).get("date", "")
    fig.suptitle(f"Scale benchmark (bench/bench_scale.py{', ' + date if date else ''})")
    fig.tight_layout()
    return _save(fig, out)


# ------------------------------------------------------------------------------------------ main
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--locomo", type=Path, default=Path("bench/results/locomo.json"), help="bench/locomo.py --json")
    p.add_argument("--store", type=Path, default=Path("bench/results/store.json"), help="bench/bench_store.py --json")
    p.add_argument(
        "--capsules",
        type=Path,
        default=Path("bench/results/capsule_economy.json"),
        help="bench/capsule_economy.py --json",
    )
    p.add_argument("--scale", type=Path, default=Path("bench/results/scale.json"), help="bench/bench_scale.py --json")
    p.add_argument("--out-dir", type=Path, default=Path("docs/img"))
    p.add_argument("--metric", default="R@10", help="LoCoMo metric to plot (default %(default)s)")
    args = p.parse_args(argv)
    made: list[Path] = []
    if (d := _load(args.locomo, "LoCoMo plot")) is not None and (
        out := plot_locomo(d, args.out_dir / "locomo_recall.png", args.metric)
    ):
        made.append(out)
    if (d := _load(args.store, "store plot")) is not None and (
        out := plot_store(d, args.out_dir / "store_latency_rss.png")
    ):
        made.append(out)
    if (d := _load(args.capsules, "capsule plots")) is not None:
        for fn, name in ((plot_capsule_tokens, "capsule_tokens.png"), (plot_capsule_recall, "capsule_recall.png")):
            if out := fn(d, args.out_dir / name):
                made.append(out)
    if (d := _load(args.scale, "scale plot")) is not None and (out := plot_scale(d, args.out_dir / "scale.png")):
        made.append(out)
    print(f"{len(made)} plot(s) written", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

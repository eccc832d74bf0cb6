"""OnnxEmbedder: the same vectors as sentence-transformers without torch, and a graph cache that heals itself.

Only the parity test against a live SentenceTransformer needs torch; the reference vectors in data/
(made by data/make_minilm_reference.py) check parity where torch is absent.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import autogen_shared_memory
from autogen_shared_memory import EmbeddingModelError
from autogen_shared_memory import onnx_embedding as oe
from autogen_shared_memory.embedding import DEFAULT_MODEL_ID
from autogen_shared_memory.onnx_embedding import OnnxEmbedder, OnnxEmbedderConfig, weights_sha256

pytestmark = pytest.mark.model

DATA = Path(__file__).parent / "data"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache root holding the built graph, made once for the module."""
    root = tmp_path_factory.mktemp("onnx-cache")
    OnnxEmbedder(cache_dir=root).load()
    return root


@pytest.fixture(scope="module")
def onnx_minilm(built_cache: Path) -> OnnxEmbedder:
    embedder = OnnxEmbedder(cache_dir=built_cache)
    embedder.load()
    return embedder


def copy_cache(built: Path, to: Path) -> Path:
    shutil.copytree(built, to)
    return to


def graph_files(root: Path) -> list[Path]:
    return sorted((root / "onnx").glob("*.onnx"))


# ------------------------------------------------------------------------------------------ parity
def varied_texts(n: int = 520, seed: int = 7) -> list[str]:
    """Sentences, long texts past 256 tokens, scripts, emoji, one-word, punctuation, empty and blank texts."""
    rng = random.Random(seed)
    words = (
        "the staging database invoice approved finance payment customer contact email gateway rejected card "
        "mobile app supports coffee machine descaled monday pull request approvals merging reviewers tests "
        "summary bullet points weekly kubernetes cluster latency budget outage incident postmortem agent memory "
        "scope group global recall embedding vector index snapshot backup restore migration schema"
    ).split()
    foreign = [
        "Straße",
        "naïve",
        "façade",
        "Ærøskøbing",
        "Привет",
        "мир",
        "مرحبا",
        "ελληνικά",
        "שלום",
        "हिन्दी",
        "東京",
        "日本語の文章",
        "机器学习",
        "向量检索",
        "한국어",
        "ภาษาไทย",
        "Tiếng Việt",
    ]
    emoji = ["🚀", "🎉", "✅", "👍🏽", "🙂", "👨‍👩‍👧", "🇫🇷", "❤️", "🔥"]
    punct = ["?", "!", "...", ";", "—", "()", "[]", "«»", "¿¡", "@#$%", "&&", "::", "~~~"]
    fixed = [
        "",
        " ",
        "   \t\n ",
        "\n",
        "\u00a0",
        "\u200b",
        "word",
        "Word",
        "WORD",
        "a",
        "🚀",
        "東",
        "?!",
        "...",
        "—",
        "x" * 600,
        "漢字" * 300,
        "🙂" * 300,
        "control\x00chars\x07here",
        "tabs\tand\nnew\r\nlines",
    ]
    texts: list[str] = list(fixed)
    kinds = ["sentence", "long", "foreign", "cjk", "emoji", "one_word", "punct", "mixed", "numbers", "code"]
    while len(texts) < n:
        kind = rng.choice(kinds)
        if kind == "sentence":
            text = " ".join(rng.choice(words) for _ in range(rng.randint(3, 25))).capitalize() + "."
        elif kind == "long":  # past 256 tokens: the truncation must match
            text = " ".join(rng.choice(words + foreign) for _ in range(rng.randint(200, 500)))
        elif kind == "foreign":
            text = " ".join(rng.choice(foreign + words) for _ in range(rng.randint(2, 15)))
        elif kind == "cjk":
            text = "".join(
                rng.choice(["東京", "日本", "的", "是", "学习", "模型", "한국", "語", "。", "、"]) for _ in range(30)
            )
        elif kind == "emoji":
            text = " ".join(rng.choice(emoji + words) for _ in range(rng.randint(1, 12)))
        elif kind == "one_word":
            text = rng.choice(words + foreign + emoji)
        elif kind == "punct":
            text = "".join(rng.choice(punct) for _ in range(rng.randint(1, 8)))
        elif kind == "mixed":
            text = "".join(rng.choice([w.upper(), w, f"  {w}\t"]) for w in rng.sample(words, 8))
        elif kind == "numbers":
            text = " ".join(str(rng.choice([rng.randint(-(10**9), 10**9), round(rng.random(), 6)])) for _ in range(6))
        else:
            text = f"def {rng.choice(words)}(x):\n    return x ** {rng.randint(2, 9)}  # {rng.choice(words)}"
        texts.append(text)
    return texts


def top5(vectors: np.ndarray) -> np.ndarray:
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -np.inf)
    return np.argsort(-sims, axis=1, kind="stable")[:, :5]


def test_parity_with_sentence_transformers(onnx_minilm: OnnxEmbedder) -> None:
    pytest.importorskip("sentence_transformers", exc_type=ImportError)  # also: installed, but torch is not
    from autogen_shared_memory import SentenceTransformerEmbedder

    texts = varied_texts()
    reference = SentenceTransformerEmbedder().embed(texts)
    ours = onnx_minilm.embed(texts)
    assert len(texts) >= 500 and ours.shape == reference.shape == (len(texts), 384) and ours.dtype == np.float32
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    distance = 1.0 - np.sum(ours.astype(np.float64) * reference, axis=1)
    assert distance.max() <= 1e-5, f"max cosine distance {distance.max():.2e} at {texts[int(distance.argmax())]!r}"
    # Neighbours over texts that tokenise differently (texts with equal tokens tie exactly, in any order).
    tokenizer = onnx_minilm._tokenizer
    assert tokenizer is not None
    seen: dict[tuple[int, ...], int] = {}
    for i, encoding in enumerate(tokenizer.encode_batch(texts)):
        seen.setdefault(tuple(encoding.ids), i)
    keep = sorted(seen.values())
    assert len(keep) >= 450
    assert np.array_equal(top5(ours[keep]), top5(reference[keep]))


def test_reference_vectors_without_torch(onnx_minilm: OnnxEmbedder) -> None:
    """Parity against vectors sentence-transformers once wrote, so it is checked where torch is absent."""
    data = np.load(DATA / "minilm_reference.npz")
    texts = [str(t) for t in data["texts"]]
    ours = onnx_minilm.embed(texts)
    distance = 1.0 - np.sum(ours.astype(np.float64) * data["vectors"], axis=1)
    assert len(texts) == 40 and distance.max() <= 1e-5, f"max cosine distance {distance.max():.2e}"
    one_by_one = np.vstack([onnx_minilm.embed([t]) for t in texts[:8]])  # no padding at all: same vectors
    assert np.allclose(one_by_one, ours[:8], atol=1e-6)


# ------------------------------------------------------------------------------------------ the embedder
def test_identity_dimension_and_config_without_loading(tmp_path: Path) -> None:
    embedder = OnnxEmbedder(cache_dir=tmp_path, threads=1, batch_size=8)
    assert embedder.model_id == DEFAULT_MODEL_ID and embedder.dimension == 384
    assert embedder._session is None and not (tmp_path / "onnx").exists()  # nothing loaded, nothing written
    assert embedder.embed([]).shape == (0, 384) and embedder._session is None
    config = embedder.dump_component()
    assert config.provider == "autogen_shared_memory.OnnxEmbedder"
    assert OnnxEmbedderConfig.model_validate(config.config) == OnnxEmbedderConfig(
        batch_size=8, threads=1, cache_dir=str(tmp_path)
    )
    again = OnnxEmbedder._from_config(embedder._to_config())
    assert again._to_config() == embedder._to_config() and again.threads == 1
    if hasattr(autogen_shared_memory, "OnnxEmbedder"):  # once exported, the provider path resolves
        loaded = OnnxEmbedder.load_component(config)
        assert isinstance(loaded, OnnxEmbedder) and loaded._to_config() == embedder._to_config()
    with pytest.raises(ValueError):
        OnnxEmbedder(batch_size=0)


def test_model_folder_of_its_own_gets_its_name_as_id(tmp_path: Path) -> None:
    minilm = OnnxEmbedder().model_dir  # the default model's files, wherever they came from
    folder = tmp_path / "my-minilm"
    shutil.copytree(minilm, folder, ignore=shutil.ignore_patterns("model.safetensors"))
    os.symlink(minilm / "model.safetensors", folder / "model.safetensors")
    assert OnnxEmbedder(folder, cache_dir=tmp_path / "cache").model_id == "my-minilm"
    with pytest.raises(EmbeddingModelError, match="does not exist"):
        OnnxEmbedder(tmp_path / "missing", cache_dir=tmp_path / "cache").embed(["x"])


def test_query_cache_and_threads(onnx_minilm: OnnxEmbedder) -> None:
    first = onnx_minilm.embed(["a repeated query"])
    assert onnx_minilm.embed(["a repeated query"]) is first
    texts = [f"concurrent text number {i} about {w}" for i, w in enumerate(["cats", "taxes", "rust", "tea"] * 10)]
    expected = onnx_minilm.embed(texts)
    results: dict[int, np.ndarray] = {}

    def work(k: int) -> None:
        results[k] = onnx_minilm.embed(texts[k::4] if k % 2 else texts)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, got in results.items():
        assert np.allclose(got, expected[k::4] if k % 2 else expected, atol=1e-6)


# ------------------------------------------------------------------------------------------ the cache
def test_cache_file_is_keyed_by_weights_and_builder(built_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = graph_files(built_cache)
    assert len(files) == 1 and f"-b{oe.BUILDER_VERSION}." in files[0].name
    assert not list((built_cache / "onnx").glob(".*.tmp"))  # no temp file left behind
    model_dir = OnnxEmbedder().model_dir
    assert oe.graph_file_name(model_dir, built_cache / "onnx") == files[0].name
    monkeypatch.setattr(oe, "BUILDER_VERSION", oe.BUILDER_VERSION + 1)
    assert oe.graph_file_name(model_dir, built_cache / "onnx") != files[0].name


def test_weights_hash_is_memoised_by_path_size_and_mtime(tmp_path: Path) -> None:
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"weights v1")
    real = weights_sha256(weights, tmp_path / "cache")
    (memo,) = (tmp_path / "cache" / "hashes").iterdir()
    assert memo.read_text() == real
    memo.write_text("f" * 64)  # a planted memo is believed: the file is not read again
    assert weights_sha256(weights, tmp_path / "cache") == "f" * 64
    weights.write_bytes(b"weights v2")  # new size and mtime: a new memo entry, a real hash
    os.utime(weights, ns=(1, 2))
    assert weights_sha256(weights, tmp_path / "cache") not in (real, "f" * 64)
    memo.write_text("not a hash")
    os.utime(weights, ns=(memo.stat().st_mtime_ns, memo.stat().st_mtime_ns))
    assert len(weights_sha256(weights, None)) == 64  # no cache dir: hashed every time


def test_default_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(oe.CACHE_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert OnnxEmbedder().cache_dir == tmp_path / "xdg" / "autogen-shared-memory" / "onnx"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert oe.default_cache_dir() == Path.home() / ".cache" / "autogen-shared-memory"
    monkeypatch.setenv(oe.CACHE_DIR_ENV, str(tmp_path / "override"))
    assert OnnxEmbedder().cache_dir == tmp_path / "override" / "onnx"
    assert OnnxEmbedder(cache_dir=tmp_path / "arg").cache_dir == tmp_path / "arg" / "onnx"


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "missing"])
def test_damaged_or_missing_graph_is_rebuilt(
    built_cache: Path, onnx_minilm: OnnxEmbedder, tmp_path: Path, damage: str
) -> None:
    root = copy_cache(built_cache, tmp_path / "cache")
    (graph,) = graph_files(root)
    size = graph.stat().st_size
    if damage == "garbage":
        graph.write_bytes(os.urandom(4096))
    elif damage == "truncated":
        graph.write_bytes(graph.read_bytes()[: size // 2])
    elif damage == "empty":
        graph.write_bytes(b"")
    else:
        graph.unlink()
    stale, fresh = root / "onnx" / f".{graph.name}.dead.tmp", root / "onnx" / f".{graph.name}.busy.tmp"
    stale.write_bytes(b"left by a killed process")
    os.utime(stale, (1, 1))
    fresh.write_bytes(b"another process is writing this one")
    embedder = OnnxEmbedder(cache_dir=root)
    vectors = embedder.embed(["rebuilt graph, same vectors", "second text"])
    assert np.allclose(vectors, onnx_minilm.embed(["rebuilt graph, same vectors", "second text"]), atol=1e-6)
    assert embedder.graph_path == graph and graph.stat().st_size == size and graph_files(root) == [graph]
    assert not stale.exists() and fresh.exists()  # an old temp file is swept, a live one is left alone


def test_a_build_removes_the_graphs_of_older_builders(built_cache: Path, tmp_path: Path) -> None:
    root = copy_cache(built_cache, tmp_path / "cache")
    (graph,) = graph_files(root)
    older = [root / "onnx" / f"bert-{'a' * 40}-b{v}.onnx" for v in range(1, oe.BUILDER_VERSION)]
    kept = [root / "onnx" / f"bert-{'b' * 40}-b{oe.BUILDER_VERSION + 1}.onnx", root / "onnx" / "notes.onnx"]
    for path in older + kept:
        path.write_bytes(b"a graph")
    OnnxEmbedder(cache_dir=root).load()  # read from the cache: nothing is removed
    assert all(path.exists() for path in older + kept)
    graph.unlink()
    OnnxEmbedder(cache_dir=root).load()  # built: the older builders' graphs go, newer and foreign files stay
    assert graph.exists() and not any(path.exists() for path in older) and all(path.exists() for path in kept)


def test_a_graph_that_still_fails_after_the_rebuild_raises(
    built_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import onnx

    root = copy_cache(built_cache, tmp_path / "cache")
    (graph,) = graph_files(root)
    graph.write_bytes(b"corrupt")
    builds: list[Path] = []

    def broken(model_dir: Path) -> onnx.ModelProto:
        builds.append(Path(model_dir))
        return onnx.ModelProto()

    monkeypatch.setattr(oe, "build_minilm_graph", broken)
    with pytest.raises(EmbeddingModelError, match="onnxruntime cannot load the graph"):
        OnnxEmbedder(cache_dir=root).embed(["x"])
    assert len(builds) == 1  # rebuilt once, not in a loop


def test_unwritable_cache_dir_builds_in_memory(onnx_minilm: OnnxEmbedder, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("the cache root is a file: nothing can be created beneath it (even as root)")
    embedder = OnnxEmbedder(cache_dir=blocker / "cache")
    vectors = embedder.embed(["works without a cache", "still works"])
    assert embedder.graph_path is None
    assert np.allclose(vectors, onnx_minilm.embed(["works without a cache", "still works"]), atol=1e-6)


WORKER = """
import json, os, sys, time
from autogen_shared_memory import onnx_embedding as oe
from autogen_shared_memory.onnx_embedding import OnnxEmbedder
if len(sys.argv) > 2:  # a barrier: every worker must be building before any may write its graph
    build, barrier = oe.build_minilm_graph, sys.argv[2]
    def build_at_once(model_dir):
        graph = build(model_dir)
        open(os.path.join(barrier, str(os.getpid())), "w").close()
        deadline = time.monotonic() + 60
        while len(os.listdir(barrier)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        return graph
    oe.build_minilm_graph = build_at_once
e = OnnxEmbedder(cache_dir=sys.argv[1])
v = e.embed(["two processes", "one cache"])
heavy = [m for m in ("torch", "transformers", "sentence_transformers", "onnx") if m in sys.modules]
print(json.dumps({"vector": v[0, :8].tolist(), "graph": str(e.graph_path), "heavy": heavy}))
"""


def run_worker(cache: Path, *barrier: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, str(cache), *map(str, barrier)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )


def test_two_processes_building_at_once_both_succeed(onnx_minilm: OnnxEmbedder, tmp_path: Path) -> None:
    cache, barrier = tmp_path / "cache", tmp_path / "barrier"
    barrier.mkdir()
    procs = [run_worker(cache, barrier), run_worker(cache, barrier)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert len(list(barrier.iterdir())) == 2  # both built the graph, at the same time, and both wrote it
    results = [json.loads(out) for out, _ in outputs]
    expected = onnx_minilm.embed(["two processes", "one cache"])[0, :8]
    for r in results:
        assert np.allclose(r["vector"], expected, atol=1e-6)
    (graph,) = graph_files(cache)
    assert {r["graph"] for r in results} == {str(graph)}
    assert not list((cache / "onnx").glob(".*.tmp"))
    assert OnnxEmbedder(cache_dir=cache).load() is not None  # the file that won is valid


def test_never_imports_torch_and_warm_start_skips_the_builder(built_cache: Path) -> None:
    proc = run_worker(built_cache)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert json.loads(out)["heavy"] == []  # not torch, transformers, sentence_transformers, nor even onnx


def test_build_reads_config_and_rejects_other_architectures(tmp_path: Path) -> None:
    minilm = OnnxEmbedder().model_dir
    folder = tmp_path / "model"
    folder.mkdir()
    config = json.loads((minilm / "config.json").read_text())
    os.symlink(minilm / "model.safetensors", folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
    with pytest.raises(EmbeddingModelError, match="unsupported BERT variant"):
        oe.build_minilm_graph(folder)
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 2, "layer_norm_eps": 1e-7}))
    graph = oe.build_minilm_graph(folder).graph
    layer_norms = [n for n in graph.node if n.op_type == "LayerNormalization"]
    assert len(layer_norms) == 1 + 2 * 2
    assert all(abs(a.f - 1e-7) < 1e-12 for n in layer_norms for a in n.attribute if a.name == "epsilon")


def test_word_embeddings_are_memory_mapped_not_in_the_graph(onnx_minilm: OnnxEmbedder) -> None:
    # The 47 MB table is the graph's input, gathered from a memory map of the weights: no process parses or
    # copies it (start-up, memory), and the rows are exactly the stored ones.
    import onnx
    from safetensors.numpy import load_file

    onnx_minilm.load()
    assert onnx_minilm.graph_path is not None
    graph = onnx.load(str(onnx_minilm.graph_path)).graph
    assert oe.WORD_EMBEDDINGS not in {init.name for init in graph.initializer}
    assert [i.name for i in graph.input] == list(oe.INPUT_NAMES)
    table = onnx_minilm._words
    assert table is not None and not table.flags.owndata and not table.flags.writeable
    assert isinstance(table.base, np.memmap)
    stored = load_file(str(onnx_minilm.model_dir / "model.safetensors"))
    key = next(k for k in stored if k.endswith(oe.WORD_EMBEDDINGS))
    assert np.array_equal(table, stored[key])


def test_word_embedding_table_of_other_dtypes_and_bad_files(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    half = np.random.default_rng(0).standard_normal((50, 8)).astype(np.float16)
    save_file({f"bert.{oe.WORD_EMBEDDINGS}": half}, str(tmp_path / "model.safetensors"))
    table = oe.word_embedding_table(tmp_path)  # float16 is copied as float32 (no memory map)
    assert table.dtype == np.float32 and table.flags.owndata and np.array_equal(table, half.astype(np.float32))
    save_file({"embeddings.other.weight": half}, str(tmp_path / "model.safetensors"))
    with pytest.raises(EmbeddingModelError, match="has no tensor"):
        oe.word_embedding_table(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(EmbeddingModelError, match="cannot read"):
        oe.word_embedding_table(tmp_path)
    table32 = np.ones((50, 8), dtype=np.float32)
    save_file({oe.WORD_EMBEDDINGS: table32}, str(tmp_path / "model.safetensors"))
    assert np.array_equal(oe.word_embedding_table(tmp_path), table32)  # no "bert." prefix: found as well
    whole = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(whole[: len(whole) - 100])  # the table's end cut off
    with pytest.raises(EmbeddingModelError, match="cannot read"):
        oe.word_embedding_table(tmp_path)

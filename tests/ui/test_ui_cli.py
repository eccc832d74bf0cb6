"""``autogen-shared-memory ui``: the operator token's rules, and a store that does not exist."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from autogen_shared_memory.cli import app
from autogen_shared_memory.cli.ui import ENV_UI_TOKEN, read_token


def run(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, args, env={"AUTOGEN_SHARED_MEMORY_TEST_EMBEDDER": "hash", **(env or {})})
    return result.exit_code, result.stdout + result.stderr


def test_the_token_comes_from_a_private_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_UI_TOKEN, raising=False)
    assert read_token(None) is None  # no token: read-only
    file = tmp_path / "token"
    file.write_text("0123456789abcdef0123\n")
    file.chmod(0o600)
    assert read_token(file) == "0123456789abcdef0123"
    monkeypatch.setenv(ENV_UI_TOKEN, "from-the-environment-0123")
    assert read_token(None) == "from-the-environment-0123"


@pytest.mark.parametrize(
    ("text", "mode", "message"),
    [
        ("0123456789abcdef0123\n", 0o644, "readable by other users"),
        ("short\n", 0o600, "at least 16 characters"),
        ("\n", 0o600, "at least 16 characters"),
    ],
)
def test_a_weak_or_exposed_token_is_refused(tmp_path: Path, text: str, mode: int, message: str) -> None:
    file = tmp_path / "token"
    file.write_text(text)
    file.chmod(mode)
    store = tmp_path / "memory"
    store.mkdir()
    code, output = run(["--root", str(store), "ui", "--operator-token-file", str(file), "--port", "0"])
    assert code == 1 and message in output


def test_a_store_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    code, output = run(["--root", str(tmp_path / "none"), "ui", "--port", "0"])
    assert code == 1 and "no memory store" in output
    assert not (tmp_path / "none").exists()


def test_the_command_is_listed() -> None:
    code, output = run(["ui", "--help"], env={"COLUMNS": "200"})
    assert code == 0 and "--operator-token-file" in output and "127.0.0.1" in output

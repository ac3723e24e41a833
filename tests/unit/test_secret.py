"""Secrets of `dettui agent` and `dettui serve` from a file or the environment (issue 29,
attack 9: `ps` showed `--token` and `--admin-password` to every local user)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dettui.cli import _parser
from dettui.commands import secret
from dettui.errors import InvalidArgument


def secret_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "secret"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_token_file_gives_the_token_without_its_newline(tmp_path: Path) -> None:
    path = secret_file(tmp_path, "dettui-agent-abc\n")
    assert secret.agent_token(None, path) == "dettui-agent-abc"
    assert _parser().parse_args(["agent", "--token-file", str(path)]).token_file == path


def test_a_password_file_keeps_the_passwords_own_spaces(tmp_path: Path) -> None:
    assert secret.admin_password(None, secret_file(tmp_path, " two words \n")) == " two words "
    assert secret.admin_password(None, secret_file(tmp_path, "crlf\r\n")) == "crlf"


@pytest.mark.parametrize(("text", "mode", "says"), [
    ("s\n", 0o644, r"open to every user \(mode 644\)"),
    ("s\n", 0o602, "open to every user"),
    ("\n", 0o600, "is empty"),
    ("x" * 5000, 0o600, "over 4096 bytes"),
])
def test_a_secret_file_open_to_all_empty_or_large_is_refused(
        tmp_path: Path, text: str, mode: int, says: str) -> None:
    with pytest.raises(InvalidArgument, match=says):
        secret.agent_token(None, secret_file(tmp_path, text, mode))


def test_a_missing_file_or_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="cannot read the agent token file .*: No such"):
        secret.agent_token(None, tmp_path / "nope")
    with pytest.raises(InvalidArgument, match="cannot read the agent token file .*directory"):
        secret.agent_token(None, tmp_path)


def test_a_group_readable_file_is_taken_with_a_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert secret.agent_token(None, secret_file(tmp_path, "t\n", 0o640)) == "t"
    assert "readable by its group" in capsys.readouterr().err


def test_a_secret_on_the_command_line_works_with_a_warning(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DETTUI_AGENT_TOKEN", "from-env")
    assert secret.agent_token("on-argv", None) == "on-argv"
    assert "--token on the command line is visible to every local user (ps)" in \
        capsys.readouterr().err
    assert secret.agent_token(None, None) == "from-env"  # the environment: no warning
    assert capsys.readouterr().err == ""
    monkeypatch.delenv("DETTUI_AGENT_TOKEN")
    assert secret.agent_token(None, None) is None
    monkeypatch.setenv("DETTUI_ADMIN_PASSWORD", "pw")
    assert secret.admin_password(None, None) == "pw"
    args = _parser().parse_args(["serve", "--admin-password-file", "p"])
    assert args.admin_password is None and args.admin_password_file == Path("p")


def test_a_flag_and_a_file_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="--token and --token-file both give"):
        secret.agent_token("t", secret_file(tmp_path, "t"))

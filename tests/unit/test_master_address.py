"""Which master a command uses, the parts without a master: an explicit one wins, a state dir
without a master falls back to the default quietly, and one this user may not read (another
user's) is not an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from dettui import client, master_address, statedir


def test_an_explicit_master_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_MASTER", "example.org:8080")
    assert master_address.choose(None, tmp_path) == master_address.Choice(
        "http://example.org:8080")
    assert master_address.choose("http://h:1/", tmp_path).url == "http://h:1"


def test_no_master_on_a_fresh_state_dir_is_the_default_quietly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DET_MASTER", raising=False)
    assert master_address.choose(None, tmp_path / "none") == master_address.Choice(
        client.DEFAULT_MASTER)


def test_a_state_dir_this_user_may_not_read_is_not_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DET_MASTER", raising=False)

    def refused(state_dir: Path, wait: float = 10.0) -> statedir.Holder | None:
        raise PermissionError(13, "Permission denied", str(state_dir / statedir.LOCK))

    monkeypatch.setattr(statedir, "holder", refused)
    assert master_address.choose(None, tmp_path).url == client.DEFAULT_MASTER

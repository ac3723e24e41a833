"""The venv an entrypoint names by absolute path (`venv_of`), which the sandbox binds back under
a directory closed to the trial's user: given by its resolved path, never the path the
entrypoint wrote (a user's link swapped after the check would name what the cover closes),
and only where no user could swap a directory on its way (attack review of issue 32)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from dettui.agent import trialuser
from dettui.agent.allocation import venv_of

THIS_VENV = Path(sys.prefix).resolve()
FIXED = (THIS_VENV / "pyvenv.cfg").is_file() and trialuser.unswappable(THIS_VENV) and (
    THIS_VENV / "pyvenv.cfg").stat().st_uid == os.geteuid()
needs_fixed_venv = pytest.mark.skipif(not FIXED, reason="the tests' venv is not one only root "
                                      "or this user could change (or not this user's)")


@needs_fixed_venv
def test_a_venv_named_through_a_link_is_given_by_its_resolved_path(tmp_path: Path) -> None:
    link = tmp_path / "v"
    link.symlink_to(THIS_VENV)
    assert venv_of(str(link / "bin" / "python3")) == [THIS_VENV]
    assert venv_of(str(THIS_VENV / "bin" / "python3")) == [THIS_VENV]
    # a link swapped away after the check changes nothing of what was returned
    got = venv_of(str(link / "bin" / "python3"))
    link.unlink()
    link.symlink_to(tmp_path)
    assert got == [THIS_VENV] and link not in got


def _fake_venv(where: Path) -> Path:
    (where / "bin").mkdir(parents=True)
    (where / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (where / "bin" / "python3").symlink_to(os.path.realpath(sys.executable))
    return where


def test_a_venv_under_a_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    opened = tmp_path / "open"
    opened.mkdir()
    for mode in (0o777, 0o775, 0o1777):
        opened.chmod(mode)
        venv = _fake_venv(opened / f"venv-{mode:o}")
        assert venv_of(str(venv / "bin" / "python3")) == []
        assert not trialuser.unswappable(venv)


def test_a_link_to_what_is_no_venv_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plain" / "bin").mkdir(parents=True)
    link = tmp_path / "v"
    link.symlink_to(tmp_path / "plain")
    assert venv_of(str(link / "bin" / "python3")) == []
    assert venv_of(str(tmp_path / "missing" / "bin" / "python3")) == []
    assert venv_of("bin/python3") == []  # relative: the work dir's, never bound


def test_a_pyvenv_cfg_that_is_a_link_is_refused(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").symlink_to("/etc/hostname")
    assert venv_of(str(venv / "bin" / "python3")) == []


@needs_fixed_venv
def test_unswappable_is_every_directory_up_to_the_root(tmp_path: Path) -> None:
    assert trialuser.unswappable(THIS_VENV)
    assert trialuser.unswappable(Path("/"))
    assert not trialuser.unswappable(Path("relative"))
    link = tmp_path / "v"
    link.symlink_to(THIS_VENV)
    assert not trialuser.unswappable(link)  # a link itself is never taken

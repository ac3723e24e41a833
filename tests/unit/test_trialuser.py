"""Who a trial runs as, what that user can pass, and what the sandbox covers for it."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dettui.agent import sandbox, trialuser
from dettui.agent.trialuser import TrialUser
from dettui.errors import InvalidArgument
from dettui.protocol import AgentUser

STRANGER = TrialUser(uid=54321, gid=54321, name="stranger")


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A directory every user can pass (pytest's own base is 0700), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="dettui-trialuser-"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_directory_the_user_cannot_pass_is_named(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    (closed / "inner" / "venv").mkdir(parents=True)
    os.chmod(tmp_path, 0o755)
    os.chmod(closed, 0o700)
    owner = TrialUser(os.stat(closed).st_uid, os.stat(closed).st_gid, "owner")
    assert trialuser.unreachable(closed / "inner" / "venv", STRANGER) == closed
    assert trialuser.unreachable(closed / "inner" / "venv", owner) is None
    os.chmod(closed, 0o711)  # passable without being listable
    assert trialuser.unreachable(closed / "inner" / "venv", STRANGER) is None
    group = TrialUser(99999, os.stat(closed).st_gid, "group-member")
    os.chmod(closed, 0o710)
    assert trialuser.unreachable(closed / "inner", group) is None
    assert trialuser.unreachable(closed / "inner", STRANGER) == closed


def test_links_are_followed_as_the_kernel_would(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    (closed / "real").mkdir(parents=True)
    os.chmod(tmp_path, 0o755)
    os.chmod(closed, 0o700)
    (tmp_path / "open").symlink_to(closed / "real")
    assert trialuser.unreachable(tmp_path / "open", STRANGER) == closed


def test_the_sandbox_covers_what_the_user_cannot_pass_and_keeps_what_it_needs(
        tmp_path: Path) -> None:
    state = tmp_path / "base" / "state"
    storage = state / "checkpoints"
    storage.mkdir(parents=True)
    os.chmod(tmp_path, 0o755)
    os.chmod(tmp_path / "base", 0o700)
    hidden = [state]
    covered = sandbox.covers(hidden, [storage], STRANGER)
    assert covered == [tmp_path / "base"]  # the state dir is inside it: one cover
    assert sandbox.covers(hidden, [storage], None) == [state]


@pytest.mark.skipif(os.geteuid() != 0, reason="changing user needs a root agent")
def test_a_root_agent_drops_to_the_user_with_no_capability_and_a_process_limit() -> None:
    support = sandbox.Support(("unshare",), None, root=True)
    nobody = trialuser.named("nobody")
    cmd = sandbox.become(support, nobody, 100)
    assert cmd[:3] == ["prlimit", "--nproc=100:100", "--"]
    assert f"--reuid={nobody.uid}" in cmd and "--bounding-set=-all" in cmd
    assert "--no-new-privs" in cmd and cmd[cmd.index("--pdeathsig") + 1] == "KILL"
    # root explicitly: no change of user, still no capability
    root = trialuser.named("root")
    cmd = sandbox.become(support, root, 100)
    assert "prlimit" not in cmd and not any(c.startswith("--reuid") for c in cmd)
    assert "--bounding-set=-all" in cmd


def test_the_owners_link_wins_over_the_default() -> None:
    default = trialuser.named("nobody")
    assert trialuser.linked(None, default) is default
    root = pwd.getpwuid(0)
    got = trialuser.linked(AgentUser(uid=0, gid=0, user=root.pw_name, group=None), default)
    assert (got.uid, got.name) == (0, root.pw_name)
    with pytest.raises(InvalidArgument, match="does not exist"):
        trialuser.linked(AgentUser(user="no-such-user-here"), default)
    with pytest.raises(InvalidArgument, match="has uid 0 here"):
        trialuser.linked(AgentUser(uid=12345, user=root.pw_name), default)
    bare = trialuser.linked(AgentUser(uid=4242424, gid=4242424), default)  # no entry here
    assert (bare.uid, bare.gid) == (4242424, 4242424)
    with pytest.raises(InvalidArgument, match="no such user"):
        trialuser.named("no-such-user-here")

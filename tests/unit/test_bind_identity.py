"""Checkpoint storage is bound into a trial's sandbox by identity, not by path: the agent pins
each storage directory when it checks it (its real path and st_dev:st_ino, `trialuser.pin`) and
the sandbox's root stage, after binding it, refuses the trial when what it bound is another
directory. A user's link (`host_path: /x/link`) or a user's `<root>/sub` in the master's sticky
root, swapped after the check for a link to a directory closed to the trial, would otherwise be
bound as root, its content readable by the trial (attack review of issue 32).

The swap happens between the agent's check (`_mounts`, `_kept`) and the sandbox's bind: here,
deterministically, between the two calls and the sandbox's run."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from dettui.agent import sandbox, trialuser
from dettui.agent.allocation import AllocationRun

SUPPORT = sandbox.probe()
needs_root_sandbox = pytest.mark.skipif(not (SUPPORT.on and os.geteuid() == 0),
                                        reason="needs a root agent's sandbox")
REFUSAL = "changed while the trial started; refusing"


def _allocation(tmp_path: Path, checkpoint_root: Path) -> AllocationRun:
    run = AllocationRun.__new__(AllocationRun)
    run.run_dir = tmp_path / "work" / "a.run"
    run.workdir = tmp_path / "work" / "a"
    run.workdir.mkdir(parents=True)
    run.run_dir.mkdir(parents=True)
    run.exposed = []
    run.user = None
    run.spec = SimpleNamespace(checkpoint_root=str(checkpoint_root))
    return run


def _env(storage: dict[str, str]) -> dict[str, str]:
    return {"DET_EXPERIMENT_CONFIG": json.dumps({"checkpoint_storage": storage})}


def _closed(tmp_path: Path) -> Path:
    closed = tmp_path / "hidden" / "closed"
    closed.mkdir(parents=True)
    (closed / "secret.txt").write_text("SECRET\n")
    closed.chmod(0o700)
    return closed


def _run(launch: sandbox.Launch) -> subprocess.CompletedProcess[str]:
    return subprocess.run(launch.argv, capture_output=True, text=True, timeout=60, cwd="/",
                          stdin=subprocess.DEVNULL,
                          env={**sandbox.stage_environment({}), **launch.env})


@needs_root_sandbox
def test_a_host_path_link_swapped_after_the_check_is_refused(tmp_path: Path) -> None:
    closed = _closed(tmp_path)
    opened = tmp_path / "open"
    opened.mkdir()
    (opened / "secret.txt").write_text("open\n")
    link = tmp_path / "link"
    link.symlink_to(opened)
    run = _allocation(tmp_path, tmp_path / "elsewhere")
    env = _env({"type": "shared_fs", "host_path": str(link)})
    hidden = [tmp_path / "hidden"]
    argv = ["/bin/cat", "/determined_shared_fs/secret.txt"]

    mounts = run._mounts(env)  # the check: the link names an open directory
    res = _run(sandbox.wrap(SUPPORT, argv, "/", hidden, [], mounts))
    assert res.returncode == 0 and res.stdout == "open\n", res.stderr

    mounts = run._mounts(env)
    link.unlink()  # swapped after the check, before the bind: the link, and the directory
    link.symlink_to(closed)  # it named (its owner's) for a link too
    opened.rename(tmp_path / "open.old")
    opened.symlink_to(closed)
    res = _run(sandbox.wrap(SUPPORT, argv, "/", hidden, [], mounts))
    assert "SECRET" not in res.stdout
    assert res.returncode != 0
    assert f"checkpoint storage {opened} {REFUSAL}" in res.stderr


@needs_root_sandbox
def test_a_storage_path_swapped_in_the_sticky_root_after_the_check_is_refused(
        tmp_path: Path) -> None:
    closed = _closed(tmp_path)
    root = tmp_path / "hidden" / "checkpoints"
    root.mkdir()
    root.chmod(0o1777)
    sub = root / "sub"
    sub.mkdir()  # a user's directory, in the master's root
    run = _allocation(tmp_path, root)
    env = _env({"type": "shared_fs", "host_path": str(root), "storage_path": "sub"})
    hidden = [tmp_path / "hidden"]
    argv = ["/bin/cat", str(closed / "secret.txt")]

    kept = run._kept(env)  # the check: <root>/sub is inside the master's root
    assert [k.path for k in kept if isinstance(k, trialuser.Pinned)] == [sub]
    res = _run(sandbox.wrap(SUPPORT, ["/bin/ls", "-d", str(sub)], "/", hidden, kept,
                            run._mounts(env)))
    assert res.returncode == 0 and res.stdout.strip() == str(sub), res.stderr

    kept, mounts = run._kept(env), run._mounts(env)
    sub.rename(root / "sub.old")  # its owner swaps it for a link after the check
    sub.symlink_to(closed)
    res = _run(sandbox.wrap(SUPPORT, argv, "/", hidden, kept, mounts))
    assert "SECRET" not in res.stdout
    assert res.returncode != 0
    assert f"checkpoint storage {sub} {REFUSAL}" in res.stderr


def test_pin_names_the_directory_a_link_resolves_to_now(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "a")
    got = trialuser.pin(link)
    st = os.stat(tmp_path / "a")
    assert got == trialuser.Pinned(tmp_path / "a", f"{st.st_dev}:{st.st_ino}")
    link.unlink()
    link.symlink_to(tmp_path / "b")
    assert trialuser.pin(link) != got
    (tmp_path / "f").write_text("")
    assert trialuser.pin(tmp_path / "f") is None
    assert trialuser.pin(tmp_path / "missing") is None

"""A trial renames and relinks inside its checkpoint while the master (root) reads or removes it:
the review's attack, `mv a a.real; ln -s /secret/dir a` between the master listing `a` and
opening or removing what it listed. Made deterministic by swapping right after the master's
scandir of `a` returns (every walk, os.walk's and shutil.rmtree's too, lists through
os.scandir). The secret file (0600, outside the storage) never reaches an archive and is never
removed, whichever route reads or removes; symlinks inside a checkpoint are stored as links,
never followed."""

from __future__ import annotations

import asyncio
import gzip
import io
import os
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dettui import dirfd
from dettui.paths import remove_under
from tests.master.conftest import SIMPLE_CONFIG, Api, allocate, ckpt_uuid
from tests.master.test_api import create

SECRET = b"-----BEGIN PRIVATE KEY----- the master's own"
DECOY = b"the trial's own file"


class Scene:
    """Experiment 1 with shared_fs storage, its trial's allocation, one reported checkpoint
    holding `0big` and `a/secret.key` (a decoy named like the target), and, outside the
    storage, `secret/secret.key` (0600)."""

    def __init__(self, api: Api, tmp: Path) -> None:
        self.api, self.storage, self.secret = api, tmp / "ckpts", tmp / "secret"
        self.uuid = ckpt_uuid(1)
        self.ckpt = self.storage / self.uuid
        self.task: dict[str, str] = {}

    def secret_intact(self) -> bool:
        target = self.secret / "secret.key"
        return (target.is_file() and target.read_bytes() == SECRET
                and stat.S_IMODE(target.stat().st_mode) == 0o600)


@pytest.fixture
async def scene(api: Api, tmp_path: Path) -> Scene:
    s = Scene(api, tmp_path)
    s.secret.mkdir(mode=0o700)
    (s.secret / "secret.key").write_bytes(SECRET)
    (s.secret / "secret.key").chmod(0o600)
    await create(api, SIMPLE_CONFIG + f"checkpoint_storage: {{type: shared_fs, host_path: "
                                      f"{s.storage}, save_trial_best: 0, save_trial_latest: 0}}\n")
    _, token = await allocate(api, 1, "agent-x", [0])
    s.task = {"Grpc-Metadata-x-allocation-token": f"Bearer {token}"}
    (s.ckpt / "a").mkdir(parents=True)
    (s.ckpt / "0big").write_bytes(os.urandom(1 << 20))
    (s.ckpt / "a" / "secret.key").write_bytes(DECOY)
    (s.ckpt / "metadata.json").write_text("{}")
    trial = (await api.call("GET", "/api/v1/trials/1", headers=s.task))["trial"]
    await api.call("POST", "/api/v1/checkpoints", {
        "uuid": s.uuid, "taskId": trial["taskId"], "metadata": {"steps_completed": 4},
        "resources": {"a/": "0", "0big": str(1 << 20), "a/secret.key": str(len(DECOY)),
                      "metadata.json": "2"}}, headers=s.task)
    return s


def swap_after_listing(monkeypatch: pytest.MonkeyPatch, victim: Path, target: Path) -> list[int]:
    """Once the master has listed the directory `victim`, the trial's move: `mv victim
    victim.real; ln -s target victim`. Returns a list that counts the swaps."""
    listed = victim.stat()
    real_scandir = os.scandir
    swaps: list[int] = []

    class Listed:
        """What os.scandir returned, read whole: an iterator and a context manager."""

        def __init__(self, entries: list[os.DirEntry[str]]) -> None:
            self.entries = iter(entries)

        def __iter__(self) -> Listed:
            return self

        def __next__(self) -> os.DirEntry[str]:
            return next(self.entries)

        def __enter__(self) -> Listed:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def close(self) -> None:
            pass

    def scandir(path: Any = ".") -> Any:
        st = os.stat(path)
        with real_scandir(path) as it:
            entries = Listed(list(it))
        if not swaps and (st.st_dev, st.st_ino) == (listed.st_dev, listed.st_ino):
            victim.rename(victim.with_name(victim.name + ".real"))
            victim.symlink_to(target, target_is_directory=True)
            swaps.append(1)
        return entries

    monkeypatch.setattr(os, "scandir", scandir)
    return swaps


def members(archive: bytes) -> dict[str, tarfile.TarInfo | bytes]:
    """Each member's data (regular files) or its TarInfo (the rest)."""
    out: dict[str, tarfile.TarInfo | bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(archive))) as tar:
        for m in tar:
            f = tar.extractfile(m) if m.isfile() else None
            out[m.name] = f.read() if f is not None else m
    return out


async def download(scene: Scene) -> bytes:
    resp = await scene.api.client.get(f"/checkpoints/{scene.uuid}",
                                      headers=scene.api.headers())
    assert resp.status == 200, await resp.text()
    return await resp.read()


async def test_download_never_follows_a_parent_swapped_for_a_link(
        scene: Scene, monkeypatch: pytest.MonkeyPatch) -> None:
    """The review's case: `a` listed, then moved and replaced by a link to a directory holding
    a file of the same name. The archive holds the trial's own file (from the directory the
    master had opened), never the secret."""
    swaps = swap_after_listing(monkeypatch, scene.ckpt / "a", scene.secret)
    archive = await download(scene)
    assert swaps, "the swap happened during the download"
    got = members(archive)
    assert SECRET not in archive and all(
        SECRET not in v for v in got.values() if isinstance(v, bytes))
    assert got["a/secret.key"] == DECOY and len(got["0big"]) == 1 << 20
    assert scene.secret_intact()


async def test_download_of_a_checkpoint_replaced_by_a_link_is_a_404(scene: Scene) -> None:
    """The checkpoint's own directory swapped for a link to the secret's directory before the
    download: it is not opened through the link."""
    scene.ckpt.rename(scene.storage / "elsewhere")
    scene.ckpt.symlink_to(scene.secret, target_is_directory=True)
    resp = await scene.api.client.get(f"/checkpoints/{scene.uuid}",
                                      headers=scene.api.headers())
    body = await resp.read()
    assert resp.status in (400, 404) and SECRET not in body


async def _rm(scene: Scene, globs: list[str]) -> None:
    await scene.api.call("POST", "/api/v1/checkpoints/rm", {
        "checkpointGlobs": globs, "checkpointUuids": [scene.uuid]})


async def _gc(scene: Scene) -> None:
    await scene.api.call("PATCH", "/api/v1/experiments/1", {"checkpointStorage": {
        "saveExperimentBest": 0, "saveTrialBest": 0, "saveTrialLatest": 0}})


async def _delete(scene: Scene) -> None:
    await scene.api.call("DELETE", "/api/v1/checkpoints", {"checkpointUuids": [scene.uuid]})


async def _delete_experiment(scene: Scene) -> None:
    await scene.api.call("POST", "/api/v1/experiments/1/kill")
    for _ in range(100):
        exp = (await scene.api.call("GET", "/api/v1/experiments/1"))["experiment"]
        if exp["state"] == "STATE_CANCELED":
            break
        await asyncio.sleep(0.05)
    await scene.api.call("DELETE", "/api/v1/experiments/1")


REMOVALS: dict[str, Callable[[Scene], Any]] = {
    "rm-globs": lambda s: _rm(s, ["a/*.key"]),
    "rm-dir-glob": lambda s: _rm(s, ["a/"]),
    "rm-everything": lambda s: _rm(s, ["**/*"]),
    "rm-leaving-nothing": lambda s: _rm(s, ["a", "*.json"]),
    "checkpoint-delete": _delete,
    "gc": _gc,
    "experiment-delete": _delete_experiment,
}


@pytest.mark.parametrize("how", list(REMOVALS))
async def test_removal_never_follows_a_parent_swapped_for_a_link(
        scene: Scene, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """`det checkpoint rm` (globs matching the decoy, its directory, everything), checkpoint
    delete, GC and experiment delete, with `a` swapped for a link to the secret's directory
    right after the master listed it: the secret stays, the trial's decoy goes."""
    swaps = swap_after_listing(monkeypatch, scene.ckpt / "a", scene.secret)
    await REMOVALS[how](scene)
    assert swaps, "the swap happened during the removal"
    assert scene.secret_intact()
    assert not (scene.ckpt / "a.real" / "secret.key").exists()


def test_remove_under_never_follows_a_parent_swapped_for_a_link(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """paths.remove_under (the Core API's and every whole-checkpoint removal) on its own."""
    tree, secret = tmp_path / "base" / "t", tmp_path / "secret"
    (tree / "a").mkdir(parents=True)
    (tree / "a" / "secret.key").write_bytes(DECOY)
    secret.mkdir()
    (secret / "secret.key").write_bytes(SECRET)
    swaps = swap_after_listing(monkeypatch, tree / "a", secret)
    assert remove_under(tmp_path / "base", "t")
    assert swaps and not tree.exists()
    assert (secret / "secret.key").read_bytes() == SECRET


async def test_symlinks_inside_a_checkpoint_are_links_in_its_archive(scene: Scene) -> None:
    """A link within the checkpoint is archived as that link; links out of it (absolute, or
    `..` past its top) are left out, as before (an extractor refuses them), and none is
    followed: no secret, no directory of it."""
    (scene.ckpt / "latest").symlink_to("a", target_is_directory=True)
    (scene.ckpt / "a" / "weights").symlink_to("../0big")
    (scene.ckpt / "key").symlink_to(scene.secret / "secret.key")
    (scene.ckpt / "dir").symlink_to(scene.secret, target_is_directory=True)
    (scene.ckpt / "a" / "up").symlink_to("../../../secret/secret.key")
    archive = await download(scene)
    got = members(archive)
    assert SECRET not in archive
    latest, weights = got["latest"], got["a/weights"]
    assert isinstance(latest, tarfile.TarInfo) and latest.issym() and latest.linkname == "a"
    assert isinstance(weights, tarfile.TarInfo) and weights.linkname == "../0big"
    assert not {"key", "dir", "a/up"} & set(got) and not any(n.startswith("dir/") for n in got)
    assert set(got) == {"0big", "a", "a/secret.key", "a/weights", "latest", "metadata.json"}


def test_a_tree_deeper_than_the_walk_is_still_removed(tmp_path: Path) -> None:
    """A checkpoint nested 2,000 directories deep (a trial can make one through relative
    mkdirs): removal holds at most dirfd.MAX_DEPTH descriptors, moves what lies deeper up, and
    removes it all (shutil.rmtree recursed once per level)."""
    top = tmp_path / "base" / "t"
    top.mkdir(parents=True)
    fd = os.open(top, os.O_RDONLY)
    for _ in range(2000):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    with open(os.open("f", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "wb") as f:
        f.write(b"deep")
    os.close(fd)
    assert remove_under(tmp_path / "base", "t")
    assert not top.exists() and list((tmp_path / "base").iterdir()) == []
    with dirfd.opened(tmp_path) as base:
        assert dirfd.remove(base, "base") and not (tmp_path / "base").exists()

"""The agent makes a trial's TensorBoard directory: the shared levels root's, the trial's own
its user's, so a second user's trials can write theirs (the first user's 0700 `experiment/`
made the real package fail at core.init()), and no level a user planted leads elsewhere."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dettui.agent import tensorboard_dirs

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root (the agent's case)")
ALICE, BOB = 2_000_100_001, 2_000_100_002


def _storage(tmp_path: Path) -> Path:
    root = tmp_path / "storage"
    root.mkdir()
    root.chmod(0o1777)
    return root


def test_each_user_gets_its_own_trial_directory_under_shared_levels(tmp_path: Path) -> None:
    root = _storage(tmp_path)
    assert tensorboard_dirs.prepare(root, "c1", "7", "11", ALICE, ALICE) is None
    assert tensorboard_dirs.prepare(root, "c1", "8", "12", BOB, BOB) is None
    for shared in ("c1", "c1/tensorboard", "c1/tensorboard/experiment",
                   "c1/tensorboard/experiment/7", "c1/tensorboard/experiment/7/trial"):
        st = (root / shared).stat()
        assert (st.st_uid, st.st_mode & 0o7777) == (0, 0o755), shared
    assert (root / "c1/tensorboard/experiment/7/trial/11").stat().st_uid == ALICE
    assert (root / "c1/tensorboard/experiment/8/trial/12").stat().st_uid == BOB


def test_a_level_a_user_made_first_is_taken_back(tmp_path: Path) -> None:
    root = _storage(tmp_path)
    squat = root / "c1" / "tensorboard" / "experiment" / "8"
    squat.mkdir(parents=True, mode=0o700)
    for p in (root / "c1", root / "c1/tensorboard", root / "c1/tensorboard/experiment", squat):
        os.chown(p, ALICE, ALICE)
    assert tensorboard_dirs.prepare(root, "c1", "8", "12", BOB, BOB) is None
    st = squat.stat()
    assert (st.st_uid, st.st_mode & 0o7777) == (0, 0o755)
    assert (squat / "trial" / "12").stat().st_uid == BOB


def test_a_planted_link_is_not_followed(tmp_path: Path) -> None:
    root = _storage(tmp_path)
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir(mode=0o700)
    (root / "c1").mkdir()
    (root / "c1" / "tensorboard").symlink_to(elsewhere)
    why = tensorboard_dirs.prepare(root, "c1", "8", "12", BOB, BOB)
    assert why is not None and "tensorboard" in why, why
    assert list(elsewhere.iterdir()) == []
    st = elsewhere.stat()
    assert (st.st_uid, st.st_mode & 0o7777) == (os.geteuid(), 0o700)


@pytest.mark.parametrize("bad", ["", "..", "a/b", "x\0y"])
def test_ids_that_are_not_one_name_are_refused(tmp_path: Path, bad: str) -> None:
    root = _storage(tmp_path)
    assert tensorboard_dirs.prepare(root, bad, "8", "12", BOB, BOB) is not None
    assert list(root.iterdir()) == []


def test_a_users_squatting_link_or_file_is_replaced_never_followed(tmp_path: Path) -> None:
    root = _storage(tmp_path)
    elsewhere = tmp_path / "victim"
    elsewhere.mkdir(mode=0o700)
    os.chown(elsewhere, 1234, 1234)
    (root / "c1").symlink_to(elsewhere)  # before the first trial: every user's events lost
    os.chown(root / "c1", ALICE, ALICE, follow_symlinks=False)
    assert tensorboard_dirs.prepare(root, "c1", "8", "12", BOB, BOB) is None
    assert not (root / "c1").is_symlink()
    assert (root / "c1/tensorboard/experiment/8/trial/12").stat().st_uid == BOB
    st = elsewhere.stat()
    assert (st.st_uid, st.st_mode & 0o7777, list(elsewhere.iterdir())) == (1234, 0o700, [])
    (root / "c1/tensorboard/experiment/9").write_text("squat")
    os.chown(root / "c1/tensorboard/experiment/9", ALICE, ALICE)
    assert tensorboard_dirs.prepare(root, "c1", "9", "13", BOB, BOB) is None
    assert (root / "c1/tensorboard/experiment/9/trial/13").is_dir()


def test_storage_under_the_root_is_made_without_following_a_planted_link(tmp_path: Path) -> None:
    """The agent makes `<root>/sub` (a user's storage_path) level by level: a link a user put
    at `sub` makes nothing where it points (it did: `path.resolve().mkdir(parents=True)`)."""
    from dettui import dirfd

    root = _storage(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "sub").symlink_to(outside)
    with pytest.raises(OSError):
        dirfd.make_under(root, ("sub", "deeper"))
    assert list(outside.iterdir()) == []
    dirfd.make_under(root, ("mine", "deeper"))
    assert (root / "mine" / "deeper").is_dir()
    with pytest.raises(OSError):
        dirfd.make_under(root, ("..", "x"))

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

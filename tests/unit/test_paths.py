"""dettui.paths: names from input stay under their base, and every user of it refuses escapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from dettui.errors import InvalidArgument
from dettui.paths import (
    PathEscape,
    checkpoint_uuid,
    component,
    confined,
    exposure,
    remove_under,
)

GOOD = "0b6e7c5e-3a1f-4d2b-9c1e-2f8a4b6d9e01"


@pytest.mark.parametrize("name", ["..", ".", "", "/etc", "a/b", "x\x00", "é" * 200, 7, None])
def test_component_refuses_anything_but_one_name(name: object) -> None:
    with pytest.raises(PathEscape):
        component(name)


def test_confined_resolves_and_stays_under(tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "base" / "out").symlink_to(tmp_path / "outside")
    assert confined(tmp_path / "base", "a", "b") == (tmp_path / "base" / "a" / "b").resolve()
    for names in (("..",), ("/etc",), ("out",), ("out", "x"), ("a/../../x",)):
        with pytest.raises(PathEscape):
            confined(tmp_path / "base", *names)


def test_checkpoint_uuid_is_canonical() -> None:
    assert checkpoint_uuid(GOOD) == GOOD
    for bad in (GOOD.upper(), "{" + GOOD + "}", GOOD.replace("-", ""), GOOD + "/..", "/srv",
                None, 5):
        with pytest.raises(InvalidArgument, match="must be a UUID"):
            checkpoint_uuid(bad)


def test_remove_under_removes_a_link_not_its_target(tmp_path: Path) -> None:
    base, target = tmp_path / "base", tmp_path / "target"
    base.mkdir()
    target.mkdir()
    (target / "keep").write_text("x")
    (base / GOOD).symlink_to(target)
    assert remove_under(base, GOOD)
    assert (target / "keep").exists() and not (base / GOOD).is_symlink()
    tree = base / "t"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "link").symlink_to(target)
    assert remove_under(base, "t") and not tree.exists()
    assert (target / "keep").exists()
    assert not remove_under(base, "missing")
    with pytest.raises(PathEscape):
        remove_under(base, "..")


def test_core_checkpoint_paths_are_confined(tmp_path: Path) -> None:
    from dettui.core._checkpoint import CheckpointContext
    from dettui.core._distributed import DistributedContext

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("x")
    ctx = CheckpointContext(tmp_path / "ckpts", DistributedContext())
    for bad in ("../victim", str(victim)):
        with pytest.raises(InvalidArgument), ctx.restore_path(bad):
            pass
        with pytest.raises(InvalidArgument):
            ctx.delete(bad)
    assert (victim / "keep").exists()


def test_agent_work_dirs_are_confined(tmp_path: Path) -> None:
    from dettui.agent.allocation import AllocationRun
    from dettui.protocol import StartWork

    for bad in ("../../x", "/etc", ".."):
        start = StartWork(allocation_id=bad, task_id="t", trial_id=1, experiment_id=1,
                          run_id=1, slots=[0])
        with pytest.raises(PathEscape):
            AllocationRun(start, None, "a", tmp_path, "http://x", set())  # type: ignore[arg-type]


def test_what_a_trial_may_be_shown(tmp_path: Path) -> None:
    """A path given to a trial may not be, hold or lie inside a hidden path, but for the
    exposed parts of one (the master's checkpoint root inside its state dir)."""
    state, work = tmp_path / "state", tmp_path / "work"
    hidden, exposed = [state, work], [state / "checkpoints"]
    cases = {
        tmp_path / "elsewhere": None,
        state / "checkpoints": None,
        state / "checkpoints" / "x": None,
        state / "checkpoints" / ".." / "master.db": "lies inside",
        state: "holds",
        tmp_path: "holds",
        Path("/"): "holds",
        state / "agent": "lies inside",
        work / "1.abc.1": "lies inside",
    }
    for path, want in cases.items():
        why = exposure(path, hidden, exposed)
        assert (why is None) if want is None else (why is not None and want in why), (path, why)
    (tmp_path / "link").symlink_to(state, target_is_directory=True)
    assert "holds" in (exposure(tmp_path / "link", hidden, exposed) or "")

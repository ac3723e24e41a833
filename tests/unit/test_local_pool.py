"""The embedded agent never joins a pool that Slurm backs."""

from __future__ import annotations

from pathlib import Path

import pytest

from dettui.commands.runtime import local_pool
from dettui.errors import InvalidArgument
from dettui.master.scheduler import PoolPolicy
from dettui.master.settings import MasterSettings, SlurmPool


def settings(pools: list[str], slurm: list[str], default: str) -> MasterSettings:
    return MasterSettings(state_dir=Path("/nonexistent"), default_pool=default,
                          policies={p: PoolPolicy() for p in pools},
                          slurm={p: SlurmPool(p, "debug") for p in slurm})


def test_the_default_pool_when_no_slurm_backs_it() -> None:
    assert local_pool(settings(["default"], [], "default"), None) == "default"


def test_the_first_local_pool_when_slurm_backs_the_default() -> None:
    assert local_pool(settings(["hpc", "cpu"], ["hpc"], "hpc"), None) == "cpu"


def test_no_local_agent_when_slurm_backs_every_pool() -> None:
    assert local_pool(settings(["hpc"], ["hpc"], "hpc"), None) is None


def test_asking_for_a_slurm_pool_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="backed by Slurm"):
        local_pool(settings(["hpc", "cpu"], ["hpc"], "hpc"), "hpc")
    assert local_pool(settings(["hpc", "cpu"], ["hpc"], "hpc"), "cpu") == "cpu"

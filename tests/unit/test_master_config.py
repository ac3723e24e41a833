"""The master config file: pools and their schedulers, validated with paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from dettui.errors import ConfigError, InvalidArgument
from dettui.master.scheduler import FAIR_SHARE, PRIORITY, PoolPolicy
from dettui.master.settings import MasterSettings, db_url, load_master_config, settings_from


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "master.yaml"
    path.write_text(text)
    return path


def test_pools_and_schedulers(tmp_path: Path) -> None:
    cfg = load_master_config(write(tmp_path, """
        port: 9000
        default_compute_pool: gpu
        resource_pools:
          - pool_name: gpu
            scheduler: {type: priority, preemption: true}
          - pool_name: shared
            scheduler: {type: fair_share}
        """.replace("\n        ", "\n")))
    kw = settings_from(cfg, host=None, port=None, state_dir=tmp_path)
    settings = MasterSettings(**kw)
    assert settings.port == 9000 and settings.default_pool == "gpu"
    assert settings.policies == {"gpu": PoolPolicy(PRIORITY, True),
                                 "shared": PoolPolicy(FAIR_SHARE, False)}
    assert MasterSettings(**settings_from(cfg, port=0, state_dir=tmp_path)).port == 0


@pytest.mark.parametrize(("text", "problem"), [
    ("resource_pools: [{pool_name: a, scheduler: {type: round_robin}}]",
     "resource_pools.0.scheduler.type"),
    ("resource_pools: [{pool_name: a, shceduler: {}}]", "resource_pools.0.shceduler"),
    ("resource_pools: [{pool_name: a}, {pool_name: a}]", "pool names must be unique"),
    ("default_compute_pool: b\nresource_pools: [{pool_name: a}]", "default_compute_pool"),
    ("port: 99999", "port"),
    ("resource_pools: [", "malformed YAML"),
])
def test_bad_master_configs_name_the_field(tmp_path: Path, text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_master_config(write(tmp_path, text))
    assert problem in str(exc.value) and "master.yaml" in str(exc.value)


@pytest.mark.parametrize(("value", "says"), [
    ("mysql://u:s3cret@h/d", "got mysql://u:***@h/d"),
    ("u:s3cret@h", "not shown: it may hold a password"),
    ("postgresql://u:s3cret@h:port/d", "not a valid database URL"),
    ("postgresql://u:s3cret@[::1/d", "not a valid database URL"),
])
def test_a_db_url_that_is_not_postgresql_is_refused_without_its_password(value: str,
                                                                          says: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        db_url(value)
    assert says in str(refused.value) and str(refused.value).startswith("--db: ")
    assert "s3cret" not in str(refused.value)


def test_a_db_url_is_taken_as_given_and_none_is_sqlite() -> None:
    assert db_url("postgresql://u:pw@db.example:5432/dettui") == (
        "postgresql://u:pw@db.example:5432/dettui")
    assert db_url(None) is None and db_url("") is None

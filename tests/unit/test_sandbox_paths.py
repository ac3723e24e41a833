"""A storage path with a line break cannot shift the sandbox's bind pairs: the sandbox's script
splits its lists at line breaks, so `host_path: "/tmp/d\\n/usr/sbin"` mounted a user's directory
over /usr/sbin as root (its next `umount` was then the user's). Refused at intake (a config
error naming the key) and by the sandbox itself (for a config that reached an agent anyway)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dettui.agent import runinfo, sandbox
from dettui.config import load_config
from dettui.errors import ConfigError, DettuiError

BASE = "name: n\nentrypoint: python3 t.py\nsearcher: {name: single, metric: x, max_length: 1}\n"


@pytest.mark.parametrize("key", ["host_path", "storage_path"])
def test_a_control_character_in_a_storage_path_is_refused_at_intake(key: str) -> None:
    paths = {"host_path": '"/tmp"', "storage_path": '"ckpt"'}
    paths[key] = '"/tmp/d\\n/usr/sbin"' if key == "host_path" else '"d\\t/x"'
    with pytest.raises(ConfigError) as err:
        load_config(BASE + "checkpoint_storage: {type: shared_fs, host_path: "
                    f"{paths['host_path']}, storage_path: {paths['storage_path']}}}\n")
    assert f"checkpoint_storage.{key}" in str(err.value)
    assert "control character" in str(err.value)


def test_a_plain_storage_path_is_accepted() -> None:
    storage = load_config(BASE + "checkpoint_storage: {type: shared_fs, host_path: /tmp/a b, "
                          "storage_path: ckpt}\n").checkpoint_storage
    assert (storage.host_path, storage.storage_path) == ("/tmp/a b", "ckpt")


def test_the_sandbox_refuses_a_mount_source_with_a_line_break(tmp_path: Path) -> None:
    odd = tmp_path / "d\n/usr/sbin"
    odd.mkdir(parents=True)
    on = sandbox.Support(prefix=("unshare", "--mount"), root=True)
    with pytest.raises(DettuiError, match="control character"):
        sandbox.wrap(on, ["true"], tmp_path, (), (), [runinfo.Mount(odd, "/run/determined/x")])
    plain = tmp_path / "plain"
    plain.mkdir()
    launch = sandbox.wrap(on, ["true"], tmp_path, (), (),
                          [runinfo.Mount(plain, "/run/determined/x")])
    assert str(plain) in launch.env[sandbox.ARGS_VAR]

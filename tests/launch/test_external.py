"""DeepSpeed and Horovod launchers: exact commands, and a clear error when the tool is absent."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dettui.launch import deepspeed, horovod, spec


@pytest.mark.parametrize("module", ["deepspeed", "horovod"])
def test_missing_tool_says_how_to_install(module: str) -> None:
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin"}
    res = subprocess.run([sys.executable, "-m", f"dettui.launch.{module}", "python3", "t.py"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 1
    package = "deepspeed" if module == "deepspeed" else "horovod"
    assert f"pip install {package}" in res.stderr and "was not found on PATH" in res.stderr


def test_deepspeed_command_two_nodes() -> None:
    topo = spec.Topology(("10.0.0.5", "10.0.0.6"), 0, (4, 4), 30001)
    cmd = deepspeed.build(["--deepspeed_config", "ds.json", "--", "--trial", "m:T"], topo,
                          "/bin/deepspeed", "/tmp/hostfile")
    argv = list(cmd.argv)
    assert argv[:7] == ["/bin/deepspeed", "--master_addr", "10.0.0.5", "--master_port", "30001",
                        "--hostfile", "/tmp/hostfile"]
    assert "--deepspeed_config" in argv and argv[-3:] == ["-m", "dettui.launch.harness", "m:T"]
    assert "dettui.launch.wrap_rank" in argv
    assert cmd.env["USE_DEEPSPEED"] == "1"


def test_horovod_command() -> None:
    topo = spec.Topology(("10.0.0.5", "10.0.0.6"), 0, (2, 2))
    cmd = horovod.build(["--fusion-threshold-mb", "1", "--", "python3", "t.py"], topo,
                        "/bin/horovodrun")
    argv = list(cmd.argv)
    assert argv[:5] == ["/bin/horovodrun", "-np", "4", "-H", "10.0.0.5:2,10.0.0.6:2"]
    assert argv[5:7] == ["--fusion-threshold-mb", "1"]
    assert argv[-2:] == ["python3", "t.py"]
    assert "HOROVOD_RANK,OMPI_COMM_WORLD_RANK,PMI_RANK" in argv

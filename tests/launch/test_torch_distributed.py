"""The torch_distributed launcher with real torchrun and 2 gloo processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from dettui.launch import forked_workers, spec
from tests.conftest import RUN

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(params=["fork", "fresh"])
def worker_start(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The launcher both ways: workers forked from itself (as under an agent that forks
    trials) and started by torchrun."""
    monkeypatch.setenv(forked_workers.WORKER_START, request.param)
    return str(request.param)


def launch(tmp_path: Path, script: str, *extra: str,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    (tmp_path / "w.py").write_text(textwrap.dedent(script))
    env = {**os.environ, "DET_SLOT_IDS": "[0,1]", "DETTUI_C10D_PORT": str(free_port()),
           "DETTUI_ALLOCATION_ID": f"test-{RUN}-{tmp_path.name}"}
    return subprocess.run([sys.executable, "-m", "dettui.launch.torch_distributed", *extra,
                           sys.executable, "w.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=timeout)


def leftovers(tag: str) -> list[int]:
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("DETTUI_ALLOCATION_ID") == tag and p.status() != "zombie":
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


def test_two_gloo_workers_allreduce(tmp_path: Path, worker_start: str) -> None:
    res = launch(tmp_path, """
        import torch, torch.distributed as dist
        dist.init_process_group("gloo")
        t = torch.tensor([dist.get_rank() + 1.0])
        dist.all_reduce(t)
        print("sum", int(t.item()), "world", dist.get_world_size())
        dist.destroy_process_group()
    """)
    assert res.returncode == 0, res.stderr
    assert "[rank=0] sum 3 world 2" in res.stdout
    assert "[rank=1] sum 3 world 2" in res.stdout


def test_one_failing_worker_ends_the_rest_with_its_code(tmp_path: Path, worker_start: str) -> None:
    t0 = time.monotonic()
    res = launch(tmp_path, """
        import os, sys, time
        if os.environ["RANK"] == "1":
            sys.exit(3)
        print("rank 0 waits", flush=True)
        time.sleep(600)
    """)
    assert res.returncode == 3, res.stderr
    assert time.monotonic() - t0 < 60
    assert "rank 1 exited with 3" in res.stderr
    assert leftovers(f"test-{RUN}-{tmp_path.name}") == []


def test_bad_arguments_match_determined(tmp_path: Path) -> None:
    with pytest.raises(spec.LaunchArgsError, match="empty script"):
        spec.script_of([])
    with pytest.raises(spec.LaunchArgsError, match="extra arguments to --trial"):
        spec.script_of(["--trial", "m:T", "x"])
    with pytest.raises(spec.LaunchArgsError) as exc:
        spec.script_of(["-u", "t.py"])
    assert exc.value.code == 2


def test_overrides_win_and_dry_run_prints_the_command(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "dettui.launch.torch_distributed", "--dry-run",
         "--master_port=1234", "--", "python3", "t.py", "--", "--x"],
        env={**os.environ, "DET_SLOT_IDS": "[0,1,2]"}, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "--nproc_per_node 3" in out and "--nnodes 1" in out
    assert out.index("--master_port 29400") < out.index("--master_port=1234")
    assert out.rstrip().endswith("python3 t.py -- --x")
    assert "USE_TORCH_DISTRIBUTED=True" in out


def test_split_overrides_table() -> None:
    assert spec.split_overrides(["python3", "train.py", "--lr", "1"]) == (
        [], ["python3", "train.py", "--lr", "1"])
    assert spec.split_overrides(["--nproc_per_node=2", "--", "python3", "t.py", "--", "--x"]) == (
        ["--nproc_per_node=2"], ["python3", "t.py", "--", "--x"])
    assert spec.script_of(["--trial", "m:T"], python="py") == [
        "py", "-m", "dettui.launch.harness", "m:T"]


@pytest.mark.parametrize(("entrypoint", "argv"), [
    ("python3 train.py", ["sh", "-c", "python3 train.py"]),
    ("model_def:MyTrial", ["py", "-m", "determined.launch.torch_distributed", "--trial",
                           "model_def:MyTrial"]),
    # Determined's launchers stay as written: the alias runs ours where the real one is absent
    ("python3 -m determined.launch.torch_distributed python3 t.py",
     ["sh", "-c", "python3 -m determined.launch.torch_distributed python3 t.py"]),
    (["python3", "-m", "determined.launch.deepspeed", "x.py"],
     ["python3", "-m", "determined.launch.deepspeed", "x.py"]),
    (["python3", "my.determined.launch.py"], ["python3", "my.determined.launch.py"]),
])
def test_entrypoints_written_for_determined_run_through_ours(
    entrypoint: str | list[str], argv: list[str]
) -> None:
    assert spec.entrypoint_argv(entrypoint, python="py") == argv


def test_sigkill_of_the_launcher_leaves_no_worker(tmp_path: Path, worker_start: str) -> None:
    """torchrun starts workers in sessions of their own; each worker watches the launcher."""
    (tmp_path / "w.py").write_text("import time\nprint('ready', flush=True)\ntime.sleep(600)\n")
    tag = f"test-{RUN}-{tmp_path.name}"
    env = {**os.environ, "DET_SLOT_IDS": "[0,1]", "DETTUI_C10D_PORT": str(free_port()),
           "DETTUI_ALLOCATION_ID": tag}
    proc = subprocess.Popen([sys.executable, "-m", "dettui.launch.torch_distributed",
                             sys.executable, "w.py"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    ready = [proc.stdout.readline() for _ in range(2)]
    assert all("ready" in line for line in ready), ready
    workers = [p for p in leftovers(tag) if p != proc.pid]
    assert len(workers) >= (2 if worker_start == "fork" else 3), "(torchrun and) two workers"
    lines = [" ".join(psutil.Process(p).cmdline()) for p in workers]
    assert any("torch.distributed.run" in line for line in lines) == (worker_start == "fresh"), \
        lines
    proc.kill()
    proc.wait(5)
    deadline = time.monotonic() + 10
    while leftovers(tag):
        assert time.monotonic() < deadline, f"left behind: {leftovers(tag)}"
        time.sleep(0.1)


def test_the_topology_the_master_writes_is_the_one_the_launcher_reads() -> None:
    from dettui.launch.spec import Topology

    topo = Topology(("10.0.0.1", "10.0.0.2"), 1, (2, 4), 29555)
    env = topo.to_env()
    assert env["DET_CHIEF_IP"] == "10.0.0.1"
    assert Topology.from_env(env) == topo
    assert Topology.from_env(env).nproc == 4 and Topology.from_env(env).nnodes == 2


def test_a_stopped_launcher_does_not_wait_for_a_failure_that_is_not_coming(
        tmp_path: Path, worker_start: str) -> None:
    """SIGTERM from outside (the agent killing one node of a trial whose other node failed):
    the workers' signal codes have no other cause to wait for, so the launcher ends at once
    instead of after SIGNAL_WAIT (set to 120 s here, so waiting could not go unnoticed)."""
    (tmp_path / "w.py").write_text("import time\nprint('ready', flush=True)\ntime.sleep(600)\n")
    tag = f"test-{RUN}-{tmp_path.name}"
    env = {**os.environ, "DET_SLOT_IDS": "[0,1]", "DETTUI_C10D_PORT": str(free_port()),
           "DETTUI_ALLOCATION_ID": tag}
    code = ("import sys; from dettui.launch import torch_distributed as t; "
            "t.SIGNAL_WAIT = 120; sys.exit(t.main(sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-c", code, sys.executable, "w.py"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    ready = [proc.stdout.readline() for _ in range(2)]
    assert all("ready" in line for line in ready), ready
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + 15, err
    assert "exited with" not in err, "an outside stop is not reported as a worker's failure"
    assert leftovers(tag) == []


def test_the_failing_rank_is_named_even_when_torchrun_ends_first(
        capfd: pytest.CaptureFixture[str]) -> None:
    """torchrun may tear the group down and exit before the launcher's next look: the launcher
    still says which rank failed with which code (a user reads that line first)."""
    from dettui.launch import torch_distributed as t

    fake = ("import os, sys, time; d = os.environ['" + t.LAUNCH_DIR + "']; "
            "open(os.path.join(d, 'rank-1.exit'), 'w').write(f'3 {time.time()}'); sys.exit(1)")
    code = t.supervise(spec.Command((sys.executable, "-c", fake)), nproc=2)
    assert code == 3
    assert "rank 1 exited with 3" in capfd.readouterr().err

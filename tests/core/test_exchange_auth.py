"""Who may feed the ranks' collectives pickles, and who may stall them. Off a cluster there
is no session token, so the handshake key alone (public) proves nothing: ranks of one node
meet on a Unix socket in the user's private directory instead of a TCP port, ranks of
several nodes need a real secret (DETTUI_EXCHANGE_KEY or one shared through
torch.distributed's store) or are refused. Idle connections cannot hold up a collective
past the short handshake timeout, and the chief holds its port from the moment it is built."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from dettui import core
from dettui.core._exchange import HANDSHAKE_TIMEOUT, ExchangeError, Hub, Spoke
from tests.core.test_sharded import free_port

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_KEY = b"dettui-core/"  # what anyone reading the source knows


@pytest.fixture(autouse=True)
def off_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DET_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("DETTUI_EXCHANGE_KEY", raising=False)


class Payload:
    """Unpickling this creates `marker`: proof a stranger's pickle was loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.marker), "w"))


def in_thread(fn: Any, *args: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn(*args)), daemon=True)
    t.start()
    return t, out


def test_off_cluster_a_stranger_with_the_public_key_gets_no_pickle_loaded(
        tmp_path: Path) -> None:
    """The issue's repro: ranks 0 and 1 of `DistributedContext(rank=r, size=2, pub_port=P)`
    off a cluster; a stranger reaches 127.0.0.1:P first with the public key and sends a
    pickle whose loading runs code. Nothing listens on P any more (the ranks meet on a Unix
    socket only this user can reach), so the payload is never loaded."""
    port, marker = free_port(), tmp_path / "pwned"
    chief = core.DistributedContext(rank=0, size=2, pub_port=port)
    gathering, got = in_thread(chief.gather, "chief")
    with pytest.raises(ExchangeError):
        stranger = Spoke(socket.AF_INET, ("127.0.0.1", port), 1, PUBLIC_KEY, timeout=1)
        stranger.send(Payload(marker))
    worker = core.DistributedContext(rank=1, size=2, pub_port=port)
    working, _ = in_thread(worker.gather, "worker")
    gathering.join(20)
    working.join(20)
    assert not marker.exists(), "the stranger's pickle was loaded"
    assert got == [["chief", "worker"]]
    chief.close()
    worker.close()


def test_off_cluster_several_nodes_without_a_secret_are_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    layout = {"size": 2, "local_size": 1, "cross_size": 2, "chief_ip": "127.0.0.1",
              "pub_port": free_port()}
    with pytest.raises(ExchangeError, match="DETTUI_EXCHANGE_KEY"):
        core.DistributedContext(rank=0, local_rank=0, cross_rank=0, **layout)
    monkeypatch.setenv("DETTUI_EXCHANGE_KEY", "shared")
    chief = core.DistributedContext(rank=0, local_rank=0, cross_rank=0, **layout)
    t, got = in_thread(chief.allgather, 0)
    with pytest.raises(ExchangeError, match="does not hold its key|did not let this rank in"):
        Spoke(socket.AF_INET, ("127.0.0.1", layout["pub_port"]), 1, PUBLIC_KEY, timeout=3)
    worker = core.DistributedContext(rank=1, local_rank=0, cross_rank=1, **layout)
    assert worker.allgather(1) == [0, 1]
    t.join(10)
    assert got == [[0, 1]]
    chief.close()
    worker.close()


TORCH_RANK = """
import os, sys
import torch.distributed as dist
from dettui import core
rank = int(sys.argv[1])
dist.init_process_group("gloo", rank=rank, world_size=2)
ctx = core.DistributedContext(rank=rank, size=2, local_rank=0, local_size=1,
                              cross_rank=rank, cross_size=2, chief_ip="127.0.0.1",
                              pub_port=int(sys.argv[2]))
print(ctx.allgather(rank * 7))
ctx.close()
dist.destroy_process_group()
"""


def test_off_cluster_torch_distributed_shares_the_secret(tmp_path: Path) -> None:
    """With torch.distributed initialised, the chief's secret travels through its store:
    ranks on "several nodes" meet over TCP with no token in the environment."""
    pytest.importorskip("torch.distributed")
    script = tmp_path / "rank.py"
    script.write_text(textwrap.dedent(TORCH_RANK))
    env = {k: v for k, v in os.environ.items()
           if k not in ("DET_SESSION_TOKEN", "DETTUI_EXCHANGE_KEY")}
    env.update(PYTHONPATH=str(ROOT), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(port)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
        assert out.strip() == "[0, 7]"


def test_idle_strangers_do_not_stall_a_gather() -> None:
    """Thirty connections that never answer the handshake, made before the real rank: the
    gather still ends within the short handshake timeout (it took 30 s per stranger)."""
    port = free_port()
    hub = Hub(socket.AF_INET, ("127.0.0.1", port), 1, b"k")
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(30)]
    gathering, got = in_thread(hub.gather)
    rank1 = Spoke(socket.AF_INET, ("127.0.0.1", port), 1, b"k", timeout=5)
    rank1.send("real")
    gathering.join(HANDSHAKE_TIMEOUT + 10)  # a no-hang bound
    assert got == [["real"]]
    for s in idle:
        s.close()
    rank1.close()
    hub.close()


def test_the_chief_holds_its_port_from_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process cannot take the chief's port between building the context and its
    first collective."""
    monkeypatch.setenv("DETTUI_EXCHANGE_KEY", "shared")
    port = free_port()
    chief = core.DistributedContext(rank=0, size=2, local_rank=0, local_size=1, cross_rank=0,
                                    cross_size=2, chief_ip="127.0.0.1", pub_port=port)
    with socket.socket() as squatter, pytest.raises(OSError):
        squatter.bind(("127.0.0.1", port))
    chief.close()
    with pytest.raises(ExchangeError, match="cannot listen"), socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        core.DistributedContext(rank=0, size=2, local_rank=0, local_size=1, cross_rank=0,
                                cross_size=2, chief_ip="127.0.0.1", pub_port=port)


def test_a_second_run_on_the_same_port_is_named_not_hijacked() -> None:
    port = free_port()
    first = core.DistributedContext(rank=0, size=2, pub_port=port)
    with pytest.raises(ExchangeError, match="another run's ranks already meet"):
        core.DistributedContext(rank=0, size=2, pub_port=port)
    first.close()
    core.DistributedContext(rank=0, size=2, pub_port=port).close()


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory another user owns needs root")
def test_a_squatted_temp_dir_moves_the_ranks_elsewhere(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    """Another user who made `dettui-dist-<uid>` first in a shared temp dir (its name is
    predictable) blocked every local multi-rank run ("is not a private directory"): the ranks
    now meet in the next private directory."""
    shared = tmp_path / "tmp"
    shared.mkdir(mode=0o1777)
    squat = shared / f"dettui-dist-{os.getuid()}"
    squat.mkdir(mode=0o777)
    os.chown(squat, 2_000_100_009, 2_000_100_009)
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)
    monkeypatch.setattr(tempfile, "tempdir", None)
    assert two_ranks_gather(free_port()) == [["chief", "worker"]]
    assert list(squat.iterdir()) == []


def two_ranks_gather(port: int) -> list[Any]:
    """What the chief of two local ranks (this process's threads) gathers from both."""
    chief = core.DistributedContext(rank=0, size=2, pub_port=port)
    gathering, got = in_thread(chief.gather, "chief")
    worker = core.DistributedContext(rank=1, size=2, pub_port=port)
    working, _ = in_thread(worker.gather, "worker")
    gathering.join(20)
    working.join(20)
    chief.close()
    worker.close()
    return got


def test_a_temp_dir_too_deep_for_a_socket_address_moves_the_ranks_elsewhere(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A temp dir whose sockets' paths pass the 108 bytes of a Unix socket address failed the
    run ("AF_UNIX path too long", CI's pytest directories are that deep): the ranks meet in
    the next private directory whose socket paths fit."""
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.setattr(tempfile, "tempdir", None)
    short = Path(tempfile.mkdtemp(prefix="xdg-", dir="/tmp"))  # this test's own
    try:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(short))
        port = free_port()
        path = core._exchange.local_socket_path("127.0.0.1", port, 0)
        assert path.startswith(str(short) + "/dettui-dist/") and len(path) < 108
        assert two_ranks_gather(port) == [["chief", "worker"]]
        assert not (deep / f"dettui-dist-{os.getuid()}").exists()
    finally:
        shutil.rmtree(short, ignore_errors=True)

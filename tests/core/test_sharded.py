"""Sharded checkpoints with 2 real ranks (torchrun, gloo-free: the Core API's TCPStore):
merged metadata, file and metadata conflicts named by rank, restore reads every shard."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = """
import json, sys
from pathlib import Path
from dettui import core

mode, storage = sys.argv[1], sys.argv[2]
dist = core.DistributedContext.from_torch_distributed()
with core.init(distributed=dist, checkpoint_storage=storage) as ctx:
    r = dist.rank
    name = "same.bin" if mode == "files" else f"shard-{r}.bin"
    meta = {"steps_completed": 5, "rank": r} if mode == "meta" else \\
        {"steps_completed": 5, f"rank_{r}": r, "shared": {"lr": 0.1}}
    try:
        with ctx.checkpoint.store_path(meta, shard=True) as (path, uuid):
            (path / name).write_bytes(bytes([r]) * (r + 1))
            (path / "sub").mkdir(exist_ok=True)
            (path / "sub" / f"part-{r}").write_text(str(r))
    except RuntimeError as exc:
        print(f"rank {r} refused: {exc}".replace("\\n", " | "), flush=True)
        sys.exit(0)
    with ctx.checkpoint.restore_path(uuid) as path:
        found = sorted(p.relative_to(path).as_posix() for p in path.rglob("*"))
    print(f"rank {r} uuid {uuid} sees {json.dumps(found)}", flush=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(tmp_path: Path, mode: str) -> str:
    (tmp_path / "ck.py").write_text(textwrap.dedent(SCRIPT))
    storage = tmp_path / "storage"
    res = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_port", str(free_port()), str(tmp_path / "ck.py"), mode, str(storage)],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def test_every_rank_writes_its_shard_into_one_checkpoint(tmp_path: Path) -> None:
    out = run(tmp_path, "ok")
    # Both ranks share the pipe and may write at once (PYTHONUNBUFFERED splits a print into
    # two writes), so the reports are found anywhere in the output, not line by line.
    seen = sorted(re.findall(r"rank (\d) uuid (\S+) sees (\[[^\]]*\])", out))
    assert [r for r, _, _ in seen] == ["0", "1"], out
    uuids = {u for _, u, _ in seen}
    assert len(uuids) == 1, "both ranks share one checkpoint"
    ckpt = tmp_path / "storage" / uuids.pop()
    files = json.loads(seen[0][2])
    assert files == ["metadata.json", "shard-0.bin", "shard-1.bin", "sub", "sub/part-0",
                     "sub/part-1"], "every shard is there and no staging directory is left"
    assert (ckpt / "shard-1.bin").read_bytes() == b"\x01\x01"
    assert json.loads((ckpt / "metadata.json").read_text()) == {
        "steps_completed": 5, "rank_0": 0, "rank_1": 1, "shared": {"lr": 0.1}}


def test_a_file_written_by_two_ranks_is_refused(tmp_path: Path) -> None:
    out = run(tmp_path, "files")
    assert "rank 0 refused: refusing to upload with file conflicts" in out
    assert "rank 1 refused" in out and "same.bin uploaded by ranks [0, 1]" in out
    leftovers = [p for p in (tmp_path / "storage").rglob("*") if p.is_file()]
    assert leftovers == [], "nothing half-written stays behind"


def test_conflicting_metadata_is_refused(tmp_path: Path) -> None:
    out = run(tmp_path, "meta")
    assert "refusing to upload with metadata conflicts" in out
    assert "/rank uploaded by ranks [0, 1]" in out

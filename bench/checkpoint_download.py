"""The master's checkpoint download (`GET /checkpoints/{uuid}`): how fast `checkpoint_files.pack`
turns a checkpoint directory into the tar.gz stream it sends, for two shapes of checkpoint —
weights (a few big files of random bytes, read from the page cache) and many small files (the
per-file cost: opening, stat, a tar header each) — into a sink that only counts bytes.

    .venv/bin/python bench/checkpoint_download.py [--big-mib 256] [--small 5000] [--runs 5]

The response's own queue and socket are left out: they are the same whatever packs, and the
packing thread is what a download costs the master. Medians of `--runs`, after one warm-up.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid as uuidlib
from pathlib import Path

from dettui.master import checkpoint_files

MIB = 1 << 20


class Counter:
    """A sink that counts what pack writes (as the response's pipe would take it)."""

    def __init__(self) -> None:
        self.bytes = 0

    def write(self, data: bytes) -> int:
        self.bytes += len(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def make_big(root: Path, mib: int) -> int:
    """Two files of random bytes, `mib` in all, plus metadata.json."""
    root.mkdir()
    for i in range(2):
        with open(root / f"shard-{i}.bin", "wb") as f:
            for _ in range(mib // 2):
                f.write(os.urandom(MIB))
    (root / "metadata.json").write_text('{"steps_completed": 1}')
    return mib * MIB


def make_small(root: Path, count: int) -> int:
    """`count` files of 2 KiB in 50 directories."""
    root.mkdir()
    for d in range(50):
        (root / f"d{d:02}").mkdir()
    for i in range(count):
        (root / f"d{i % 50:02}" / f"f{i:05}.bin").write_bytes(os.urandom(2048))
    return count * 2048


def time_pack(base: Path, name: str, runs: int) -> list[float]:
    where = checkpoint_files.Location(base, name)
    out = []
    for i in range(runs + 1):
        sink = Counter()
        t0 = time.perf_counter()
        checkpoint_files.pack(where, sink)
        if i:  # the first is a warm-up
            out.append(time.perf_counter() - t0)
        assert sink.bytes > 0
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--big-mib", type=int, default=256)
    parser.add_argument("--small", type=int, default=5000, help="files of 2 KiB")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ckpt-download-") as tmp:
        base = Path(tmp)
        for shape, make, n in (("weights", make_big, args.big_mib),
                               ("small files", make_small, args.small)):
            name = str(uuidlib.uuid4())
            size = make(base / name, n)
            times = time_pack(base, name, args.runs)
            med = statistics.median(times)
            print(f"{shape:12} {size / MIB:8.1f} MiB  median {med:.3f} s  "
                  f"(min {min(times):.3f}, max {max(times):.3f})  {size / MIB / med:7.1f} MiB/s")


if __name__ == "__main__":
    main()

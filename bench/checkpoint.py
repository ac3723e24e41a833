"""A sharded checkpoint of 1 GiB over 2 ranks (512 MiB each) through the Core API
(`checkpoint.store_path(metadata, shard=True)`) against the same bytes written directly to
files by the same 2 processes, and against 2 parallel `dd conv=fsync` of the same size — in one
run, on the same disk, every writer fsyncing its file.

    .venv/bin/python bench/checkpoint.py [--size-mib 1024] [--runs 11] [--quick]

One torchrun job of 2 ranks (off-cluster, `core.init` gives the dummy context with a local
directory as storage; the DistributedContext gathers over torchrun's TCPStore) runs every
writer in turn, rotated each round so none always goes first, timed by rank 0 from a barrier
before to a barrier after both ranks are done; outputs are removed and synced between writers.
One job, not one per writer, so that every writer starts at the same cadence: on this virtual
disk a write that starts after a few idle seconds (a torchrun start-up) is up to twice as slow.
The bytes are random (a file per rank, read into the page cache beforehand), except for
`dd if=/dev/zero`. The Core API's own time — in store_path outside the `with` body: the uuid
broadcast, per-rank staging, the gather of file lists and metadata, the renames into one
directory, metadata.json — is timed apart on the rank whose write ended last.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MIB = 1 << 20
WRITERS = ("direct", "core", "dd-random", "dd-zero")
NAMES = {"core": "Core API store_path(shard=True)", "direct": "direct writes + fsync",
         "dd-random": "dd conv=fsync (random file)", "dd-zero": "dd if=/dev/zero conv=fsync"}


def write_from(source: Path, target: Path) -> None:
    """Copy `source` (in the page cache) to `target` in 1 MiB writes, then fsync."""
    with open(source, "rb") as src, open(target, "wb") as f:
        while chunk := src.read(MIB):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())


def dd(source: str, target: Path, mib: int) -> None:
    subprocess.run(["dd", f"if={source}", f"of={target}", "bs=1M", f"count={mib}",
                    "conv=fsync"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def one_writer(ctx: Any, rank: int, writer: str, source: Path, out: Path,
               mib: int) -> tuple[float, float]:
    """Write this rank's shard with `writer`; return the Core API's own time (the time in
    store_path outside the `with` body; 0 for the other writers) and when the write ended."""
    if writer == "core":
        t0 = time.perf_counter()
        meta = {"steps_completed": 1, f"rank_{rank}": "ok"}
        with ctx.checkpoint.store_path(meta, shard=True) as (path, _uuid):
            t1 = time.perf_counter()
            write_from(source, path / f"shard-{rank}.bin")
            t2 = time.perf_counter()
        return (t1 - t0) + (time.perf_counter() - t2), t2
    out.mkdir(parents=True, exist_ok=True)
    if writer == "direct":
        write_from(source, out / f"shard-{rank}.bin")
    else:
        dd("/dev/zero" if writer == "dd-zero" else str(source), out / f"shard-{rank}.bin", mib)
    return 0.0, time.perf_counter()


def check_core(base: Path, mib: int) -> None:
    """The Core API made one checkpoint with both shards and the merged metadata."""
    (ckpt,) = [p for p in base.iterdir() if p.is_dir()]
    meta = json.loads((ckpt / "metadata.json").read_text())
    assert meta == {"steps_completed": 1, "rank_0": "ok", "rank_1": "ok"}, meta
    for r in (0, 1):
        assert (ckpt / f"shard-{r}.bin").stat().st_size == mib * MIB
    assert sorted(p.name for p in ckpt.iterdir()) == ["metadata.json", "shard-0.bin",
                                                      "shard-1.bin"]


def rank_main(tmp: Path, mib: int, runs: int) -> None:
    """Inside torchrun: every writer, `runs` rounds (after one warm-up round)."""
    from dettui import core

    dist = core.DistributedContext.from_torch_distributed()
    rank = dist.rank
    source = tmp / f"random-{rank}.bin"
    results: dict[str, list[float]] = {w: [] for w in WRITERS}
    api: list[float] = []
    with core.init(distributed=dist, checkpoint_storage=tmp / "core") as ctx:
        for i in range(-1, runs):  # round -1 warms up and is not counted
            for writer in WRITERS[i % 4:] + WRITERS[:i % 4]:
                out = tmp / "core" if writer == "core" else tmp / writer
                dist.allgather(None)  # start together
                t0 = time.perf_counter()
                own = one_writer(ctx, rank, writer, source, out, mib)
                owns = dist.allgather(own)  # both done
                elapsed = time.perf_counter() - t0
                if rank == 0:
                    if writer == "core":
                        check_core(out, mib)
                    shutil.rmtree(out)
                    os.sync()
                    if i >= 0:
                        results[writer].append(elapsed)
                        if writer == "core":
                            # the rank whose write ended last: its time in store_path
                            # is not spent waiting for the other rank's write
                            api.append(max(owns, key=lambda o: o[1])[0])
    if rank == 0:
        print(json.dumps({"results": results, "api": api}), flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(tmp: Path, mib: int, runs: int) -> dict[str, Any]:
    for r in (0, 1):  # the bytes every writer but dd-zero copies, read into the page cache
        with open(tmp / f"random-{r}.bin", "wb") as f:
            for _ in range(mib):
                f.write(os.urandom(MIB))
        subprocess.run(["cat", str(tmp / f"random-{r}.bin")], stdout=subprocess.DEVNULL,
                       check=True)
    os.sync()
    root = Path(__file__).resolve().parents[1]
    res = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_port", str(free_port()), str(Path(__file__).resolve()), "--rank-worker",
         str(tmp), str(mib), str(runs)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root)})
    if res.returncode != 0:
        raise RuntimeError(f"the ranks failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return dict(json.loads([x for x in res.stdout.splitlines() if x.startswith("{")][-1]))


def report(total: int, runs: int, data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    res: dict[str, list[float]] = data["results"]
    med = {w: statistics.median(v) for w, v in res.items()}
    paired = statistics.median(c / d - 1 for c, d in zip(res["core"], res["direct"],
                                                         strict=True)) * 100
    table = Table(title=f"{total} MiB over 2 ranks ({total // 2} MiB each), fsync; median of "
                        f"{runs} rounds")
    for col in ("writer", "seconds (median)", "min / max", "MB/s", "vs direct"):
        table.add_column(col, justify="right")
    for w in ("core", "direct", "dd-random", "dd-zero"):
        table.add_row(NAMES[w], f"{med[w]:.3f}", f"{min(res[w]):.3f} / {max(res[w]):.3f}",
                      f"{total * MIB / 1e6 / med[w]:.0f}",
                      f"{med[w] / med['direct']:.2f}x")
    Console(width=120).print(table)
    api = statistics.median(data["api"])
    overall = (med["core"] / med["direct"] - 1) * 100
    print(f"Core API overhead vs direct writes: {overall:+.1f}% (medians), {paired:+.1f}% "
          f"(median of the {runs} paired rounds); the Core API's own time: "
          f"{api * 1000:.1f} ms = {api / med['direct'] * 100:.2f}% of a direct write")
    spread = (max(res["direct"]) - min(res["direct"])) / med["direct"] * 100
    print(f"target overhead <= 5% (paired rounds): {'met' if paired <= 5 else 'NOT met'} "
          f"(direct writes alone vary by {spread:.0f}% of their median from round to round "
          "on this disk)")


def main() -> None:
    if sys.argv[1:2] == ["--rank-worker"]:
        rank_main(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mib", type=int, default=1024, help="in all, over both ranks")
    parser.add_argument("--runs", type=int, default=11, help="rounds of every writer")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 64 MiB, 2 rounds")
    args = parser.parse_args()
    total, runs = (64, 2) if args.quick else (args.size_mib, args.runs)
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-") as tmp:
        free = shutil.disk_usage(tmp).free // MIB
        if free < 3 * total + 512:
            sys.exit(f"{tmp}: {free} MiB free, {3 * total + 512} MiB needed")
        data = run_ranks(Path(tmp), total // 2, runs)
    report(total, runs, data)


if __name__ == "__main__":
    main()

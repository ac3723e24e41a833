"""`dettui checkpoint list|download|delete` and `dettui e download`: checkpoints back out of the
cluster, straight from storage when this machine reaches it, else streamed by the master (a
tar.gz, as Determined's checkpoint download API), with progress."""

from __future__ import annotations

import asyncio
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich import progress as rich_progress

from dettui import byte_size
from dettui.client import Client
from dettui.commands import output
from dettui.commands.experiment import _size
from dettui.errors import FailedPrecondition, InvalidArgument
from dettui.paths import checkpoint_uuid
from dettui.storage import storage_base


def _progress() -> rich_progress.Progress:
    """A transient bar on stderr, on a console that wraps as the terminal does (so that it is
    erased whole, leaving no blank line)."""
    from rich.console import Console

    rp = rich_progress
    return rp.Progress(rp.TextColumn("{task.description}"), rp.BarColumn(bar_width=20),
                       rp.DownloadColumn(), rp.TransferSpeedColumn(), transient=True,
                       console=Console(stderr=True, highlight=False, markup=False))


async def list_(c: Client, exp_id: int, *, best: int | None, as_json: bool) -> None:
    ckpts = await c.checkpoints(
        exp_id, sort_by="SORT_BY_SEARCHER_METRIC" if best else "SORT_BY_END_TIME", limit=best)
    if as_json:
        output.print_json(ckpts)
        return
    metric = ""
    if ckpts:
        metric = ((ckpts[0]["training"].get("experimentConfig") or {}).get("searcher")
                  or {}).get("metric") or ""
    if best and ckpts and not any(c["training"].get("searcherMetric") is not None
                                  for c in ckpts):
        output.warn(f"no checkpoint of experiment {exp_id} has a validation with its searcher "
                    f"metric '{metric}': none is best, they are listed in no order of merit")
    rows = [[c["training"]["trialId"], c["metadata"].get("steps_completed"),
             output.state(c["state"]), _metric(c, metric), c["uuid"], _size(c),
             output.when(c["reportTime"])] for c in ckpts]
    output.table(f"Checkpoints of experiment {exp_id}",
                 ["Trial", "Batches", "State", metric or "Metric", "UUID", "Size", "Reported"],
                 rows, least_needed=["Reported", "Size", "Batches"])


async def delete(c: Client, uuids: list[str], *, yes: bool) -> None:
    """`dettui checkpoint delete UUID...` (as `det checkpoint delete`): their files out of
    storage and their records DELETED, which frees their bytes of the checkpoint quota."""
    uuids = [checkpoint_uuid(u, "UUID") for u in uuids]
    if not await output.confirmed(
            yes, f"Delete {len(uuids)} checkpoint(s) and their files?",
            "deleting checkpoints removes their files for good: add --yes to confirm"):
        return
    await c.delete_checkpoints(uuids)
    output.console.print(f"Deleted {len(uuids)} checkpoint(s): {', '.join(uuids)}")


def _metric(c: dict[str, Any], metric: str) -> str:
    val = ((c["training"].get("validationMetrics") or {}).get("avgMetrics") or {}).get(metric)
    return "" if val is None else f"{val:.6g}" if isinstance(val, float) else str(val)


Progress = Callable[[int, int | None], None]  # bytes so far, total (None: not known)


async def fetch(c: Client, uuid: str, dest: Path, *, mode: str = "auto",
                progress: Progress | None = None) -> Path:
    """Fetch one checkpoint's files into `dest`: copied from its storage when this machine
    reaches it (mode auto or direct), else streamed by the master as a tar.gz and extracted
    (auto or master). File work runs in a thread; `progress` may be called from it."""
    uuid = checkpoint_uuid(uuid)
    ckpt = await c.checkpoint(uuid)
    if ckpt["state"] not in ("STATE_COMPLETED", "STATE_PARTIALLY_DELETED"):
        raise FailedPrecondition(f"checkpoint {uuid} is {output.state(ckpt['state'])}: only "
                                 "COMPLETED or PARTIALLY_DELETED checkpoints can be downloaded")
    report = progress or (lambda done, total: None)
    source = _local_source(ckpt) if mode in ("auto", "direct") else None
    if mode == "direct" and source is None:
        raise FailedPrecondition(f"checkpoint {uuid}'s storage is not reachable from here; "
                                 "use --mode master (or auto)")
    if source is not None:
        await asyncio.to_thread(_copy, source, dest, _total(ckpt), report)
    else:
        await _via_master(c, uuid, dest, report)
    return dest


async def download(c: Client, uuid: str, output_dir: Path | None, *,
                   mode: str = "auto") -> tuple[Path, int]:
    """`dettui checkpoint download`: one checkpoint into `output_dir` (default
    ./checkpoints/<uuid>, where `det checkpoint download` puts it) with a progress bar; its
    path and the bytes of its files there."""
    dest = Path(output_dir) if output_dir else Path("checkpoints") / uuid
    with _progress() as bar:
        task = bar.add_task(f"Fetching {uuid[:8]}", total=None)
        path = await fetch(c, uuid, dest, mode=mode, progress=lambda done, total: bar.update(
            task, completed=done, total=total))
    return path, await asyncio.to_thread(_bytes_under, path)


def _bytes_under(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def folder_name(exp_id: int, ckpt: dict[str, Any]) -> str:
    """A checkpoint's download folder, readable and unique: exp-1-trial-3-step-400-6b8f2ab8
    (`dettui e download` and the dashboard's `d` name it so)."""
    trial = (ckpt.get("training") or {}).get("trialId")
    steps = (ckpt.get("metadata") or {}).get("steps_completed")
    parts = [f"exp-{exp_id}"] + ([f"trial-{int(trial)}"] if isinstance(trial, int) else [])
    parts += [f"step-{int(steps)}"] if isinstance(steps, int) else []
    return "-".join([*parts, str(ckpt["uuid"])[:8]])


def _say_fetched(uuid: str, path: Path, size: int) -> None:
    """`uuid -> path (59.1 KiB)` on one line, as plain text: a script reads it, and no
    console width breaks it."""
    import sys

    from dettui.terminal_text import message

    sys.stdout.write(message(f"{uuid} -> {path} ({byte_size.human(size)})", cap=4096) + "\n")
    sys.stdout.flush()


def _local_source(ckpt: dict[str, Any]) -> Path | None:
    config = ckpt["training"].get("experimentConfig") or {}
    storage = config.get("checkpoint_storage") or {}
    if storage.get("type") not in ("shared_fs", "directory"):
        return None
    path = storage_base(config) / ckpt["uuid"]
    return path if path.is_dir() else None


def _total(ckpt: dict[str, Any]) -> int:
    return sum(int(v) for v in (ckpt.get("resources") or {}).values() if str(v).isdigit())


def _copy(source: Path, dest: Path, total: int, report: Progress) -> None:
    done = 0

    def copy(src: str, dst: str) -> object:
        nonlocal done
        out = shutil.copy2(src, dst)
        done += Path(src).stat().st_size
        report(done, total or None)
        return out

    shutil.copytree(source, dest, symlinks=True, copy_function=copy, dirs_exist_ok=True)


async def _via_master(c: Client, uuid: str, dest: Path, report: Progress) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile() as tmp:
        got = 0

        def sink(chunk: bytes) -> None:
            nonlocal got
            tmp.write(chunk)
            got += len(chunk)
            report(got, None)

        await c.download_checkpoint(uuid, sink)
        tmp.seek(0)
        await asyncio.to_thread(_extract, tmp, dest, uuid)


def _extract(tmp: Any, dest: Path, uuid: str) -> None:
    """No absolute paths, no links out: Python's 'data' filter, where this Python has it
    (3.11.4 and later; Debian 12's 3.11.2 has not), else only files, directories and links
    that stay inside `dest`."""
    try:
        with tarfile.open(fileobj=tmp, mode="r:gz") as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, filter="data")
            else:
                tar.extractall(dest, members=_inside(tar, dest.resolve()))
    except (tarfile.TarError, OSError) as exc:
        raise FailedPrecondition(f"the master's archive of {uuid} is not valid: {exc}") from exc


def _inside(tar: tarfile.TarFile, dest: Path) -> Iterator[tarfile.TarInfo]:
    for m in tar:
        path = os.path.normpath(dest / m.name)
        link = os.path.normpath(os.path.join(os.path.dirname(path), m.linkname)) \
            if m.issym() else os.path.normpath(dest / m.linkname) if m.islnk() else path
        if not (m.isfile() or m.isdir() or m.issym() or m.islnk()) or os.path.isabs(m.name) \
                or os.path.isabs(m.linkname) or not all(
                    p == str(dest) or p.startswith(str(dest) + os.sep) for p in (path, link)):
            raise tarfile.TarError(f"refusing to extract '{m.name}': outside {dest}")
        m.mode &= 0o755  # no set-id bits
        yield m


async def download_experiment(c: Client, exp_id: int, output_dir: Path, *, top: int,
                              mode: str = "auto") -> list[Path]:
    """The experiment's best `top` checkpoints (by its searcher metric), each in
    `output_dir/exp-<id>-trial-<id>-step-<n>-<uuid8>` (`folder_name`). An experiment with no
    completed checkpoint is an error (FailedPrecondition)."""
    if top < 1:
        raise InvalidArgument("--top must be at least 1")
    best = await c.checkpoints(exp_id, sort_by="SORT_BY_SEARCHER_METRIC",
                               states=("STATE_COMPLETED",), limit=top)
    if best and not any(ck["training"].get("searcherMetric") is not None for ck in best):
        # Ranked by nothing: none has a validation with the searcher metric. Said, and the
        # newest taken instead (not whichever the sort left first).
        name = ((best[0]["training"].get("experimentConfig") or {}).get("searcher")
                or {}).get("metric") or ""
        output.warn(f"no checkpoint of experiment {exp_id} has a validation with its "
                    f"searcher metric '{name}': none is best; downloading the newest "
                    f"{'one' if top == 1 else top} instead")
        best = await c.checkpoints(exp_id, newest_first=True, states=("STATE_COMPLETED",),
                                   limit=top)
    if not best:
        raise FailedPrecondition(f"experiment {exp_id} has no completed checkpoint to "
                                 "download")
    paths = []
    for ck in best:
        path, size = await download(c, ck["uuid"], Path(output_dir) / folder_name(exp_id, ck),
                                    mode=mode)
        _say_fetched(ck["uuid"], path, size)
        paths.append(path)
    return paths


async def download_one(c: Client, uuid: str, output_dir: Path | None, *, mode: str) -> None:
    path, size = await download(c, uuid, output_dir, mode=mode)
    _say_fetched(uuid, path, size)

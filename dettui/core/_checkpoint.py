"""CheckpointContext: checkpoints as uuid directories in shared storage, reported to the master.

Non-sharded: the chief writes. Sharded (`shard=True`): every rank writes into a staging
directory of its own inside the checkpoint; on leaving the `with`, the file lists and metadata
of all ranks are gathered, a file written by two ranks or a metadata key with two values is
refused (naming the ranks), and otherwise each rank renames its files into the one uuid
directory (no copy) and the chief writes metadata.json and reports the merged checkpoint
(SEMANTICS §3.3).

A report the master refuses over its checkpoint storage quota (QuotaExceeded) raises in the
trial with the master's message, after the checkpoint's files are removed: nothing records
them, so nothing else would.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import uuid as uuidlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dettui.core._distributed import DistributedContext
from dettui.core._info import ClusterInfo
from dettui.core._session import Session
from dettui.errors import QuotaExceeded
from dettui.paths import checkpoint_uuid, confined, remove_under

STAGE_PREFIX = ".rank-"  # a rank's own directory inside a sharded checkpoint while it writes
STEPS_MISSING = (
    "metadata for reported checkpoints, in the current implementation, requires a "
    "'steps_completed' item, which has not been provided"
)


def list_resources(root: Path) -> dict[str, str]:
    """Relative path -> size (as a string); directories as `d/` -> "0"."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_dir():
            out[rel + "/"] = "0"
        else:
            out[rel] = str(path.stat().st_size)
    return out


def merge_metadata(per_rank: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """Merge every rank's metadata; return (merged, conflicts {'/key/path': [ranks]})."""
    merged: dict[str, Any] = {}
    owners: dict[str, int] = {}
    conflicts: dict[str, list[int]] = {}

    def walk(dst: dict[str, Any], src: dict[str, Any], prefix: str, rank: int) -> None:
        for key, value in src.items():
            path = f"{prefix}/{key}"
            if key not in dst:
                dst[key] = json.loads(json.dumps(value))
                owners[path] = rank
            elif isinstance(dst[key], dict) and isinstance(value, dict):
                walk(dst[key], value, path, rank)
            elif dst[key] != value:
                conflicts.setdefault(path, [owners.get(path, 0)])
                if rank not in conflicts[path]:
                    conflicts[path].append(rank)

    for rank, md in enumerate(per_rank):
        walk(merged, md, "", rank)
    return merged, conflicts


class CheckpointContext:
    def __init__(self, base: Path, dist: DistributedContext, session: Session | None = None,
                 info: ClusterInfo | None = None) -> None:
        self.base = Path(base)
        self._dist = dist
        self._session = session
        self._info = info

    @contextlib.contextmanager
    def store_path(self, metadata: dict[str, Any],
                   shard: bool = False) -> Iterator[tuple[Path, str]]:
        if not shard and not self._dist.is_chief:
            raise RuntimeError("cannot call CheckpointContext.store_path(shard=False) from "
                               f"non-chief worker (rank={self._dist.rank})")
        storage_id = str(uuidlib.uuid4()) if self._dist.is_chief else None
        if shard:
            storage_id = self._dist.broadcast(storage_id)
        assert storage_id is not None
        path = self.base / storage_id
        path.mkdir(parents=True, exist_ok=True)
        if not shard or self._dist.size == 1:
            yield path, storage_id
            self._finish(path, storage_id, metadata, shard)
            return
        stage = path / f"{STAGE_PREFIX}{self._dist.rank}"
        stage.mkdir(exist_ok=True)
        try:
            yield stage, storage_id
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
        merged = self._merge_shards(path, stage, metadata)
        self._finish(path, storage_id, merged, shard, premerged=True)

    def _merge_shards(self, path: Path, stage: Path, metadata: dict[str, Any]) -> dict[str, Any]:
        """Gather every rank's files and metadata; refuse a file written by two ranks or a
        metadata key with two values (nothing is moved then); move the files in."""
        mine = sorted(p.relative_to(stage).as_posix() for p in stage.rglob("*")
                      if not p.is_dir())
        gathered = self._dist.allgather((mine, dict(metadata)))
        owners: dict[str, list[int]] = {}
        for rank, (files, _) in enumerate(gathered):
            for name in files:
                owners.setdefault(name, []).append(rank)
        problems = [f"    {k} uploaded by ranks {v}" for k, v in sorted(owners.items())
                    if len(v) > 1]
        merged, key_conflicts = merge_metadata([md for _, md in gathered])
        if problems or key_conflicts:
            shutil.rmtree(stage, ignore_errors=True)
            what = "file conflicts" if problems else "metadata conflicts"
            problems += [f"    {k} uploaded by ranks {v}" for k, v in key_conflicts.items()]
            raise RuntimeError(f"refusing to upload with {what}:\n" + "\n".join(problems))
        for name in mine:
            target = path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            (stage / name).replace(target)
        shutil.rmtree(stage, ignore_errors=True)
        self._dist.allgather(None)  # every rank's files are in place
        return merged

    def _finish(self, path: Path, storage_id: str, metadata: dict[str, Any],
                shard: bool, premerged: bool = False) -> None:
        if shard and not premerged:
            merged, conflicts = merge_metadata(self._dist.allgather(dict(metadata)))
            if conflicts:
                listing = "\n".join(f"    {k} uploaded by ranks {v}" for k, v in conflicts.items())
                raise RuntimeError(f"refusing to upload with metadata conflicts:\n{listing}")
            metadata = merged
        if not self._dist.is_chief:
            self._dist.allgather(None)  # wait for the chief's report
            return
        (path / "metadata.json").write_text(json.dumps(metadata, indent=2))
        try:
            self._report(storage_id, metadata, list_resources(path))
        except QuotaExceeded:
            # Not recorded, so nothing would ever delete them: the files go (as the trial's
            # own user, the one that wrote them), and the refusal goes up to the trial.
            remove_under(self.base, storage_id)
            raise
        finally:
            if shard:
                self._dist.allgather(None)

    def _report(self, storage_id: str, metadata: dict[str, Any],
                resources: dict[str, str]) -> None:
        if "steps_completed" not in metadata:
            raise ValueError(STEPS_MISSING)
        if self._session is None or self._info is None:
            return
        self._session.post("/api/v1/checkpoints", {
            "uuid": storage_id, "taskId": self._info.task_id,
            "allocationId": self._info.allocation_id or None,  # None: detached
            "reportTime": datetime.now(UTC).isoformat(), "resources": resources,
            "metadata": metadata, "state": "STATE_COMPLETED", "training": {},
            "storageId": None,
        })

    def upload(self, ckpt_dir: Path | str | None, metadata: dict[str, Any],
               *, shard: bool = False) -> str:
        with self.store_path(metadata, shard=shard) as (path, storage_id):
            if ckpt_dir is not None:
                shutil.copytree(ckpt_dir, path, dirs_exist_ok=True)
        return storage_id

    def _path(self, storage_id: str) -> Path:
        """Where checkpoint `storage_id` lives: a UUID directly under the storage base."""
        return confined(self.base, checkpoint_uuid(storage_id, "storage_id"))

    @contextlib.contextmanager
    def restore_path(self, storage_id: str) -> Iterator[Path]:
        path = self._path(storage_id)
        if not path.is_dir():
            raise FileNotFoundError(f"checkpoint {storage_id} not found under {self.base}")
        yield path

    def download(self, storage_id: str, ckpt_dir: Path | str) -> None:
        with self.restore_path(storage_id) as path:
            shutil.copytree(path, ckpt_dir, dirs_exist_ok=True)

    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        if self._session is not None:
            body = self._session.get(f"/api/v1/checkpoints/{storage_id}")
            return dict(body["checkpoint"]["metadata"])
        return dict(json.loads((self._path(storage_id) / "metadata.json").read_text()))

    def delete(self, storage_id: str) -> None:
        remove_under(self.base, checkpoint_uuid(storage_id, "storage_id"))
        if self._session is not None:
            self._session.request("PATCH", "/api/v1/checkpoints", {"checkpoints": [
                {"uuid": storage_id, "resources": {"resources": {}}}]})

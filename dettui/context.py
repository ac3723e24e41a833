"""Model contexts: pack a directory into Determined's v1File list, and extract one safely.

Packing follows Determined's client (SEMANTICS §8, `common/context.py`, `detignore.py`):
`.detignore` at each root with gitignore syntax plus built-in ignores, `-i` includes, and the
95 MiB cap. The master turns the list into a tar.gz like Go's `archive.ToTarGz` (WIRE §3).
Extraction on the agent refuses absolute paths, `..`, links that escape, writing through links
and special files, and checks every member before writing anything.
"""

from __future__ import annotations

import base64
import binascii
import collections
import gzip
import io
import os
import shutil
import stat
import tarfile
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pathspec

from dettui.errors import ContextError

MAX_CONTEXT_SIZE = 128 * 1024 * 1024 // 8 * 6 - 1024 * 1024  # 99,614,720 bytes, "95.0MB"
MAX_EXTRACTED_BYTES = 1024**3  # refuse archives that would expand beyond 1 GiB
MAX_MEMBERS = 100_000
MAX_LINK_DEPTH = 40
MAX_PATH_BYTES = 1024  # of a path inside a context (the work dir's own path comes on top)
MAX_PATH_DEPTH = 64  # directories deep
MTIME_RANGE = (0, 2**33)  # seconds since the epoch a context file may claim (until year 2242)
DEFAULT_DETIGNORE = [
    "__pycache__/", "*.py[co]", "*$py.class", "terraform", "terraform_data",
    "terraform.tfstate*", "terraform.tfvars*", ".terraform*", ".git/", ".vscode/", ".idea/",
    ".mypy_cache/", "/shared_fs",
]
FILE, DIRECTORY = 48, 53  # ord(tarfile.REGTYPE), ord(tarfile.DIRTYPE)
V1FILE_KEYS: dict[str, type] = {"path": str, "type": int, "content": str, "mtime": str,
                                "mode": int, "uid": int, "gid": int}
Progress = Callable[[int, int], None]
_UNSAFE_PATH = "absolute paths and '..' are not allowed in a model context"


class _Source(NamedTuple):
    """One entry to pack: its path in the archive, where it is on disk, and its kind."""

    path: str
    local: Path
    is_dir: bool


# ---------------------------------------------------------------- packing (client side)


def _spec(root: Path) -> pathspec.PathSpec[Any]:
    lines = list(DEFAULT_DETIGNORE)
    ignore = root / ".detignore"
    if ignore.is_file():
        lines += ignore.read_text(errors="replace").splitlines()
    # "gitignore" is pathspec ≥ 1.0's name for the GitWildMatch patterns Determined uses.
    try:
        pathspec.util.lookup_pattern("gitignore")
        kind = "gitignore"
    except KeyError:
        kind = "gitwildmatch"
    return pathspec.PathSpec.from_lines(kind, lines)


def _walk(root: Path, prefix: str = "") -> Iterator[_Source]:
    """os.walk order (per directory: subdirs, then files; names sorted), ignores applied.

    Symlinked directories get an entry but are not descended into (os.walk's default);
    symlinked files are read through the link.
    """
    spec = _spec(root)
    lead = f"{prefix}/" if prefix else ""
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        rel_base = base.relative_to(root).as_posix()
        rel_base = "" if rel_base == "." else rel_base + "/"
        kept = []
        for d in sorted(dirnames):
            rel = rel_base + d
            if spec.match_file(rel) or spec.match_file(rel + "/"):
                continue
            _check_path(lead + rel, lead + rel)  # before os.walk goes deeper (it recurses)
            kept.append(d)
            yield _Source(lead + rel, base / d, True)
        dirnames[:] = kept
        for f in sorted(filenames):
            rel = rel_base + f
            if f != ".detignore" and not spec.match_file(rel):
                yield _Source(lead + rel, base / f, False)


def _sources(context_dir: Path | None, includes: Sequence[Path]) -> list[_Source]:
    sources: list[_Source] = []
    if context_dir is not None:
        context_dir = Path(context_dir)
        if context_dir.is_file():
            raise ContextError(f"context path '{context_dir}' must be a directory, "
                               "maybe use an include instead?")
        root = context_dir.resolve()
        if not root.exists():
            raise ContextError(f"Path '{root}' doesn't exist")
        if not root.is_dir():
            raise ContextError(f"context path '{context_dir}' must be a directory")
        sources += _walk(root)
    for inc in includes:
        path = Path(inc).resolve()
        if not path.name:
            raise ContextError(f"unable to determine the name of include '{inc}'")
        if not path.exists():
            raise ContextError(f"Path '{path}' doesn't exist")
        sources.append(_Source(path.name, path, path.is_dir()))
        if path.is_dir():
            sources += _walk(path, path.name)
    return sources


def _check_duplicates(sources: list[_Source]) -> None:
    """Includes may clash with the context's top level or with each other."""
    roots = collections.Counter(s.path for s in sources if "/" not in s.path)
    duplicates = [name for name, count in roots.items() if count > 1]
    if len(duplicates) == 1:
        raise ContextError(f"duplicate path detected: '{duplicates[0]}'")
    if duplicates:
        raise ContextError(f"duplicate paths detected: {duplicates}")


def pack(context_dir: Path | None, includes: Sequence[Path] = (), *,
         progress: Progress | None = None) -> list[dict[str, Any]]:
    """The v1File list of a context directory plus includes; ContextError if too large.

    `progress(bytes_read, bytes_expected)` is called after each file is read. The size cap is
    checked after each file, like Determined, so a huge tree fails without being read whole;
    it counts each file as Determined does (`size_of`), up to 2 bytes over its real size.
    """
    sources = _sources(context_dir, includes)
    _check_duplicates(sources)
    if len(sources) > MAX_MEMBERS:
        raise ContextError(f"the model context has {too_many_members()}")
    expected = sum(_size(s.local) for s in sources if not s.is_dir)
    files: list[dict[str, Any]] = []
    total = done = 0
    for source in sources:
        entry = _entry(source, MAX_CONTEXT_SIZE - total)
        if entry is None:
            continue
        files.append(entry)
        total += size_of([entry])
        if total > MAX_CONTEXT_SIZE:
            raise ContextError(_too_large(sources, expected))
        done += len(entry["content"]) // 4 * 3 - entry["content"][-2:].count("=")
        if progress is not None and not source.is_dir:
            progress(done, max(done, expected))
    return files


def _entry(source: _Source, budget: int) -> dict[str, Any] | None:
    """A v1File like Determined's `v1File_from_local_*` (uid/gid 0); None if unreadable or not
    a regular file (a FIFO, socket or device, even behind a symlink, is skipped with a warning,
    never opened for reading: it could block forever or never end). At most `budget` + 1 bytes
    are read, so a file that grows while it is read cannot exhaust memory."""
    _check_path(source.path, source.path)
    try:
        if source.is_dir:
            data, st = b"", source.local.stat()
        else:
            data, st = _read_regular(source.local, budget + 1)
    except _NotRegular:
        warnings.warn(f"'{source.path}' is not a regular file (a FIFO, socket or device?), "
                      "skipping it.", stacklevel=3)
        return None
    except OSError:
        warnings.warn(f"Error reading '{source.path}', skipping this file.", stacklevel=3)
        return None
    mtime = min(max(int(st.st_mtime), MTIME_RANGE[0]), MTIME_RANGE[1])
    return {"path": source.path, "type": DIRECTORY if source.is_dir else FILE,
            "content": base64.b64encode(data).decode(), "mtime": str(mtime),
            "mode": st.st_mode, "uid": 0, "gid": 0}


class _NotRegular(Exception):
    pass


def _read_regular(path: Path, limit: int) -> tuple[bytes, os.stat_result]:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the open
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _NotRegular()
        chunks, size = [], 0
        while size < limit:
            chunk = os.read(fd, min(1024 * 1024, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks), st
    finally:
        os.close(fd)


def _check_path(path: str, where: str) -> None:
    """A context path the agent can recreate: not too long, not too deep."""
    size = len(path.encode("utf-8", "surrogateescape"))
    if size > MAX_PATH_BYTES:
        raise ContextError(f"{where}: the path is {size} bytes long, over the limit of "
                           f"{MAX_PATH_BYTES}; list it in .detignore")
    depth = path.count("/")
    if depth > MAX_PATH_DEPTH:
        raise ContextError(f"{where}: the path is {depth} directories deep, over the limit of "
                           f"{MAX_PATH_DEPTH}; list it in .detignore")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def human(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _too_large(sources: list[_Source], expected: int) -> str:
    largest = sorted(((_size(s.local), s.path) for s in sources if not s.is_dir),
                     key=lambda pair: (-pair[0], pair[1]))[:5]
    listing = "\n".join(f"  {human(size):>10}  {path}" for size, path in largest)
    return (
        "The total size of context directory and included files and directories "
        f"(about {human(expected)}) exceeds the maximum allowed size 95.0MB. "
        f"The largest files:\n{listing}\n"
        "List data, checkpoints and build output in a .detignore file (gitignore syntax) at the "
        "top of the context or include directory, and load data sets from outside the context."
    )


def too_many_members() -> str:
    """One limit, one sentence, wherever a context's entries are counted: packing, the
    master's create and the agent's extraction (a context the master takes, its agent runs)."""
    return (f"more than {MAX_MEMBERS} members (files and directories); list some in "
            ".detignore")


def size_of(files: list[dict[str, Any]]) -> int:
    """Decoded size, counted like Determined's `v1File_size`: len(base64) // 4 * 3."""
    return sum(len(f.get("content") or "") // 4 * 3 for f in files)


# ---------------------------------------------------------------- master side


def validate_v1files(files: object) -> list[dict[str, Any]]:
    """Check a request's modelDefinition, naming the bad index and field."""
    if not isinstance(files, list):
        raise ContextError("modelDefinition: must be a list of files")
    if len(files) > MAX_MEMBERS:
        raise ContextError(f"refusing the model context: {too_many_members()}")
    for i, f in enumerate(files):
        _check_v1file(f, f"modelDefinition[{i}]")
    return files


def _check_v1file(f: object, where: str) -> None:
    if not isinstance(f, dict):
        raise ContextError(f"{where}: must be an object")
    for key, kind in V1FILE_KEYS.items():
        value = f.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            word = "an integer" if kind is int else "a string"
            raise ContextError(f"{where}.{key}: must be {word}")
        if isinstance(value, int) and value < 0:
            raise ContextError(f"{where}.{key}: must be ≥ 0")
    if not _is_safe_relative(f["path"]):
        raise ContextError(f"{where}.path: must be a relative path without '..'")
    if f["type"] not in (FILE, DIRECTORY):
        raise ContextError(f"{where}.type: must be 48 (file) or 53 (directory)")
    try:
        base64.b64decode(f["content"], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ContextError(f"{where}.content: not valid base64") from exc
    mtime = f["mtime"]
    if not (len(mtime) <= 20 and mtime.isascii() and mtime.removeprefix("-").isdigit()) or not (
            MTIME_RANGE[0] <= int(mtime) <= MTIME_RANGE[1]):
        raise ContextError(f"{where}.mtime: must be a decimal string of seconds from "
                           f"{MTIME_RANGE[0]} to {MTIME_RANGE[1]}")
    _check_path(f["path"], f"{where}.path")


def _is_safe_relative(path: str) -> bool:
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return bool(parts) and ".." not in parts and not path.startswith("/") and "\x00" not in path


def to_targz(files: list[dict[str, Any]]) -> bytes:
    """Like Determined's archive.ToTarGz: one header per item in list order, then gzip."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for f in files:
            data = base64.b64decode(f["content"]) if f["type"] == FILE else b""
            info = tarfile.TarInfo(f["path"])
            info.type = tarfile.DIRTYPE if f["type"] == DIRECTORY else tarfile.REGTYPE
            info.mode = int(f["mode"]) & 0o7777
            info.size = len(data)
            info.uid, info.gid = int(f["uid"]), int(f["gid"])
            info.mtime = int(f["mtime"])
            tar.addfile(info, io.BytesIO(data) if data else None)
    return gzip.compress(buf.getvalue(), compresslevel=6, mtime=0)


# ---------------------------------------------------------------- agent side


def extract(targz: bytes, dest: Path) -> list[Path]:
    """Safely extract a context into `dest`; every member is checked before anything is written.

    Returns the written paths in archive order. An empty archive (b"") writes nothing.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    dest = dest.resolve()
    if not targz:
        return []
    try:
        with tarfile.open(fileobj=io.BytesIO(targz), mode="r:*") as tar:
            plan = _plan(_members(tar), dest)
            written = [_write(tar, name, m, dest) for name, m in plan]
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise ContextError(f"the model context is not a valid tar.gz archive: {exc}") from exc
    _finish_dirs(plan, dest)
    return written


def _members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """All headers, read lazily so that a bomb is refused before its data is inflated."""
    members: list[tarfile.TarInfo] = []
    total = 0
    for m in tar:
        members.append(m)
        total += m.size if m.isreg() else 0
        if len(members) > MAX_MEMBERS:
            raise ContextError(f"refusing to extract the model context: {too_many_members()}")
        if total > MAX_EXTRACTED_BYTES:
            raise ContextError("refusing to extract the model context: it expands beyond "
                               f"{human(MAX_EXTRACTED_BYTES)}")
    return members


def _refuse(m: tarfile.TarInfo, why: str) -> ContextError:
    return ContextError(f"refusing to extract '{m.name}': {why}")


def _clean(m: tarfile.TarInfo, name: str) -> str:
    """'./a//b' -> 'a/b'; refuses absolute paths and '..'."""
    if name.startswith("/") or "\x00" in name:
        raise _refuse(m, _UNSAFE_PATH)
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise _refuse(m, _UNSAFE_PATH)
    return "/".join(parts)


def _index(members: list[tarfile.TarInfo]) -> dict[str, tarfile.TarInfo]:
    """Final name -> member; refuses special files and ambiguous duplicates."""
    index: dict[str, tarfile.TarInfo] = {}
    for m in members:
        name = _clean(m, m.name)
        if not (m.isreg() or m.isdir() or m.issym() or m.islnk()):
            raise _refuse(m, "device, fifo and special files are not allowed in a model context")
        if not name:
            if not m.isdir():
                raise _refuse(m, "it would replace the work dir")
            continue
        old = index.get(name)
        if old is not None and not (old.isdir() and m.isdir()):
            raise _refuse(m, "the archive holds this path more than once")
        index[name] = m
    return index


def _plan(members: list[tarfile.TarInfo], dest: Path) -> list[tuple[str, tarfile.TarInfo]]:
    index = _index(members)
    plan: list[tuple[str, tarfile.TarInfo]] = []
    seen: set[str] = set()
    for m in members:
        name = _clean(m, m.name)
        if not name:
            continue
        _check_parents(m, name, index, dest)
        if m.issym():
            _check_symlink(m, name, index, dest)
        if m.islnk():
            _check_hardlink(m, index, seen)
        _stdlib_filter(m, dest)
        seen.add(name)
        plan.append((name, m))
    return plan


def _check_parents(m: tarfile.TarInfo, name: str, index: dict[str, tarfile.TarInfo],
                   dest: Path) -> None:
    """Nothing may be written through a link or under a file, in the archive or on disk."""
    parts = name.split("/")
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        leaf = depth == len(parts)
        above = index.get(prefix)
        if not leaf and above is not None and not above.isdir():
            raise _refuse(m, f"'{prefix}' in the archive is not a directory")
        on_disk = dest / prefix
        if on_disk.is_symlink() and (not leaf or m.isdir()):
            raise _refuse(m, f"'{prefix}' is a symbolic link in the work dir")


def _check_symlink(m: tarfile.TarInfo, name: str, index: dict[str, tarfile.TarInfo],
                   dest: Path) -> None:
    if m.linkname.startswith("/"):
        raise _refuse(m, f"its link to '{m.linkname}' points outside the work dir "
                         "(absolute link targets are not allowed)")
    start = name.split("/")[:-1]
    if not _resolves_inside(start, m.linkname, index, dest):
        raise _refuse(m, f"its link to '{m.linkname}' points outside the work dir")


def _resolves_inside(start: list[str], target: str, index: dict[str, tarfile.TarInfo],
                     dest: Path) -> bool:
    """Follow `target` from directory `start` through the archive's (and dest's) symlinks."""
    parts = list(start)
    pending = collections.deque(target.split("/"))
    hops = 0
    while pending:
        part = pending.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return False
            parts.pop()
            continue
        parts.append(part)
        link = _link_at("/".join(parts), index, dest)
        if link is None:
            continue
        hops += 1
        if hops > MAX_LINK_DEPTH or link.startswith("/"):
            return False
        parts.pop()
        pending.extendleft(reversed(link.split("/")))
    return True


def _link_at(path: str, index: dict[str, tarfile.TarInfo], dest: Path) -> str | None:
    member = index.get(path)
    if member is not None:
        return member.linkname if member.issym() else None
    on_disk = dest / path
    return os.readlink(on_disk) if on_disk.is_symlink() else None


def _check_hardlink(m: tarfile.TarInfo, index: dict[str, tarfile.TarInfo],
                    seen: set[str]) -> None:
    if m.linkname.startswith("/") or ".." in m.linkname.split("/"):
        raise _refuse(m, f"its link to '{m.linkname}' points outside the work dir")
    target = _clean(m, m.linkname)
    source = index.get(target)
    if source is None or not source.isreg() or target not in seen:
        raise _refuse(m, f"its link to '{m.linkname}' does not name a file earlier in the "
                         "archive")


def _stdlib_filter(m: tarfile.TarInfo, dest: Path) -> None:
    """Belt and braces: Python's own 'data' filter, where this Python has it."""
    data_filter = getattr(tarfile, "data_filter", None)
    if data_filter is None:
        return
    try:
        data_filter(m, str(dest))
    except tarfile.FilterError as exc:
        raise _refuse(m, str(exc)) from exc


def _write(tar: tarfile.TarFile, name: str, m: tarfile.TarInfo, dest: Path) -> Path:
    target = dest / name
    if m.isdir():
        target.mkdir(parents=True, exist_ok=True)
        target.chmod(0o700 | (m.mode & 0o777))  # writable until _finish_dirs
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() or target.is_file():
        target.unlink()
    if m.issym():
        os.symlink(m.linkname, target)
    elif m.islnk():
        os.link(dest / _clean(m, m.linkname), target, follow_symlinks=False)
    else:
        src = tar.extractfile(m)
        if src is None:
            raise _refuse(m, "its data cannot be read")
        with src, open(target, "xb") as out:
            shutil.copyfileobj(src, out)
        os.chmod(target, m.mode & 0o777)
        os.utime(target, (m.mtime, m.mtime))
    return target


def _finish_dirs(plan: list[tuple[str, tarfile.TarInfo]], dest: Path) -> None:
    """Directory modes and mtimes last, deepest first, so writing files doesn't undo them."""
    for name, m in sorted(plan, key=lambda item: item[0], reverse=True):
        if m.isdir():
            os.chmod(dest / name, m.mode & 0o777)
            os.utime(dest / name, (m.mtime, m.mtime))

"""dettui.context on real temp dirs: ignore rules, includes, the cap, tar.gz, safe extract."""

from __future__ import annotations

import base64
import gzip
import io
import os
import stat
import tarfile
from pathlib import Path
from typing import Any

import pytest

from dettui import context
from dettui.errors import ContextError

MiB = 1024 * 1024


def tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, body in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(body, bytes):
            path.write_bytes(body)
        else:
            path.write_text(body)
    return root


def paths(files: list[dict[str, Any]]) -> list[str]:
    return [f["path"] for f in files]


def sparse(path: Path, size: int) -> None:
    """A file of `size` zero bytes that costs no disk; pack still reads every byte."""
    with open(path, "wb") as f:
        f.truncate(size)


# ---------------------------------------------------------------- ignore rules


def test_detignore_patterns_negation_and_dir_patterns(tmp_path: Path) -> None:
    root = tree(tmp_path / "ctx", {
        ".detignore": "# comment\n*.bin\n!keep.bin\ndata/\n/top.txt\nlogs/*.log\n",
        "train.py": "t", "w.bin": "w", "keep.bin": "k", "sub/w.bin": "w", "sub/keep.bin": "k",
        "data/a.csv": "a", "sub/data/b.csv": "b", "top.txt": "t", "sub/top.txt": "t",
        "logs/x.log": "x", "logs/readme.md": "r",
    })
    assert paths(context.pack(root)) == [
        "logs", "sub", "keep.bin", "train.py", "logs/readme.md", "sub/keep.bin", "sub/top.txt",
    ]


def test_a_reinclude_inside_an_ignored_directory_is_not_walked(tmp_path: Path) -> None:
    root = tree(tmp_path / "ctx", {".detignore": "cache/\n!cache/keep.txt\n",
                                   "cache/keep.txt": "k", "m.py": "m"})
    assert paths(context.pack(root)) == ["m.py"]


def test_only_the_root_detignore_is_read_and_all_are_excluded(tmp_path: Path) -> None:
    root = tree(tmp_path / "ctx", {
        ".detignore": "*.tmp\n", "a.tmp": "x", "sub/.detignore": "util.py\n*.py\n",
        "sub/util.py": "u", "sub/b.tmp": "x", "sub/deeper/.detignore": "*\n",
    })
    assert paths(context.pack(root)) == ["sub", "sub/deeper", "sub/util.py"]


def test_default_ignores(tmp_path: Path) -> None:
    root = tree(tmp_path / "ctx", {
        "__pycache__/m.cpython-311.pyc": "c", "pkg/__pycache__/x.pyc": "c", "pkg/m.py": "m",
        "a.pyc": "c", "b.pyo": "o", "c$py.class": "j", ".git/HEAD": "h", "pkg/.git/HEAD": "h",
        ".vscode/s.json": "{}", ".idea/w.xml": "x", "pkg/.mypy_cache/x": "m",
        "terraform/main.tf": "t", "terraform.tfstate.backup": "s", ".terraform.lock.hcl": "l",
        "terraform.tfvars.json": "v", "shared_fs/f": "f", "pkg/shared_fs/f": "f",
    })
    assert paths(context.pack(root)) == ["pkg", "pkg/shared_fs", "pkg/m.py", "pkg/shared_fs/f"]


def test_v1file_shape(tmp_path: Path) -> None:
    root = tree(tmp_path / "ctx", {"run.sh": b"\x00\xffbin", "d/x.py": "x"})
    os.chmod(root / "run.sh", 0o755)
    os.utime(root / "run.sh", (1_700_000_000, 1_700_000_000))
    d, f = context.pack(root)[:2]
    assert d == {"path": "d", "type": 53, "content": "", "mtime": d["mtime"],
                 "mode": os.stat(root / "d").st_mode, "uid": 0, "gid": 0}
    assert stat.S_ISDIR(d["mode"]) and d["mtime"].isdigit()
    assert f == {"path": "run.sh", "type": 48, "content": base64.b64encode(b"\x00\xffbin").decode(),
                 "mtime": "1700000000", "mode": 0o100755, "uid": 0, "gid": 0}
    assert context.size_of([d, f]) == 6


# ---------------------------------------------------------------- includes and errors


def test_includes_use_their_basename_and_their_own_detignore(tmp_path: Path) -> None:
    root = tree(tmp_path / "ctx", {".detignore": "*.csv\n", "t.py": "t"})
    lib = tree(tmp_path / "src" / "lib", {".detignore": "secret.txt\n", "m.py": "m",
                                          "secret.txt": "s", "rows.csv": "1"})
    one = tree(tmp_path / "extra", {"conf.yaml": "c"}) / "conf.yaml"
    files = context.pack(root, [lib, one])
    assert paths(files) == ["t.py", "lib", "lib/m.py", "lib/rows.csv", "conf.yaml"]
    assert files[1]["type"] == 53 and files[4]["type"] == 48


def test_includes_without_a_context(tmp_path: Path) -> None:
    one = tree(tmp_path, {"conf.yaml": "c"}) / "conf.yaml"
    assert paths(context.pack(None, [one])) == ["conf.yaml"]


def test_duplicate_root_names(tmp_path: Path) -> None:
    root = tree(tmp_path / "ctx", {"lib/other.py": "o", "conf.yaml": "c"})
    lib = tree(tmp_path / "lib", {"m.py": "m"})
    with pytest.raises(ContextError, match=r"^duplicate path detected: 'lib'$"):
        context.pack(root, [lib])
    a = tree(tmp_path / "a", {"conf.yaml": "1"}) / "conf.yaml"
    b = tree(tmp_path / "b", {"conf.yaml": "2"}) / "conf.yaml"
    with pytest.raises(ContextError, match=r"^duplicate path detected: 'conf.yaml'$"):
        context.pack(tmp_path / "a", [b])
    with pytest.raises(ContextError, match=r"duplicate paths detected: \['lib', 'conf.yaml'\]"):
        context.pack(root, [lib, a])


def test_context_must_be_a_directory(tmp_path: Path) -> None:
    f = tree(tmp_path, {"f.py": "x"}) / "f.py"
    with pytest.raises(ContextError, match=(
            rf"^context path '{f}' must be a directory, maybe use an include instead\?$")):
        context.pack(f)
    with pytest.raises(ContextError, match="doesn't exist"):
        context.pack(tmp_path / "missing")
    with pytest.raises(ContextError, match="doesn't exist"):
        context.pack(tmp_path, [tmp_path / "nope"])


def test_unreadable_files_are_skipped_with_a_warning(tmp_path: Path) -> None:
    root = tree(tmp_path / "ctx", {"ok.py": "o"})
    (root / "broken.txt").symlink_to(tmp_path / "gone")
    with pytest.warns(UserWarning, match=r"Error reading 'broken.txt', skipping this file\."):
        assert paths(context.pack(root)) == ["ok.py"]


def test_symlinks_are_read_through_but_linked_dirs_not_walked(tmp_path: Path) -> None:
    outside = tree(tmp_path / "outside", {"big.dat": "x" * 100, "note.txt": "hello"})
    root = tree(tmp_path / "ctx", {"m.py": "m"})
    (root / "linked_dir").symlink_to(outside, target_is_directory=True)
    (root / "note.txt").symlink_to(outside / "note.txt")
    files = context.pack(root)
    assert paths(files) == ["linked_dir", "m.py", "note.txt"]
    assert base64.b64decode(files[2]["content"]) == b"hello"
    assert files[0]["type"] == 53 and stat.S_ISREG(files[2]["mode"])


def test_progress_reports_bytes_read(tmp_path: Path) -> None:
    root = tree(tmp_path / "ctx", {"a.txt": "x" * 300, "b/c.txt": "y" * 600})
    calls: list[tuple[int, int]] = []
    context.pack(root, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(300, 900), (900, 900)]


# ---------------------------------------------------------------- the 95 MiB cap


def test_the_cap_fails_early_and_lists_the_five_largest_files(tmp_path: Path) -> None:
    root = tmp_path / "ctx"
    root.mkdir()
    for name, size in (("a_weights.pt", 50 * MiB), ("b_data.npy", 30 * MiB),
                       ("c_more.npy", 20 * MiB), ("z_late.bin", 10 * MiB),
                       ("y1.txt", 2048), ("y2.txt", 1)):
        sparse(root / name, size)
    calls: list[int] = []
    with pytest.raises(ContextError) as exc:
        context.pack(root, progress=lambda done, total: calls.append(done))
    msg = str(exc.value)
    assert "exceeds the maximum allowed size 95.0MB" in msg and ".detignore" in msg
    listed = ["a_weights.pt", "b_data.npy", "c_more.npy", "z_late.bin", "y1.txt"]
    assert [msg.index(n) for n in listed] == sorted(msg.index(n) for n in listed)
    assert "y2.txt" not in msg
    assert "50.0 MiB" in msg and "2.0 KiB" in msg
    assert calls == [50 * MiB, 80 * MiB], "stops at the file that crosses the cap"


def test_the_cap_counts_like_determined(tmp_path: Path) -> None:
    """len(base64) // 4 * 3 per file: a 1-byte file counts 3, like Determined's v1File_size."""
    root = tmp_path / "ctx"
    root.mkdir()
    sparse(root / "w.bin", context.MAX_CONTEXT_SIZE - 2)  # a multiple of 3: counted exactly
    assert context.size_of(context.pack(root)) == context.MAX_CONTEXT_SIZE - 2
    (root / "x").write_bytes(b"x")
    with pytest.raises(ContextError, match="95.0MB"):
        context.pack(root)


# ---------------------------------------------------------------- master side


def test_to_targz_writes_list_order_and_headers(tmp_path: Path) -> None:
    files = [
        {"path": "z", "type": 53, "content": "", "mtime": "1700000000", "mode": 0o40755,
         "uid": 0, "gid": 0},
        {"path": "z/run.sh", "type": 48, "content": base64.b64encode(b"#!/bin/sh\n").decode(),
         "mtime": "1700000001", "mode": 0o104755, "uid": 7, "gid": 8},
        {"path": "a.py", "type": 48, "content": "", "mtime": "5", "mode": 0o100644,
         "uid": 0, "gid": 0},
    ]
    blob = context.to_targz(files)
    assert blob == context.to_targz(files), "deterministic"
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob))) as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == ["z", "z/run.sh", "a.py"]
        assert members[0].isdir() and members[0].mode == 0o755
        run = members[1]
        assert (run.mode, run.uid, run.gid, run.mtime, run.size) == (0o4755, 7, 8, 1700000001, 10)
        assert tar.extractfile(run).read() == b"#!/bin/sh\n"  # type: ignore[union-attr]


V1 = {"path": "a.py", "type": 48, "content": "eAo=", "mtime": "1", "mode": 33188, "uid": 0,
      "gid": 0}


@pytest.mark.parametrize(("files", "message"), [
    ({"path": "a"}, r"^modelDefinition: must be a list of files$"),
    ([V1, "x"], r"^modelDefinition\[1\]: must be an object$"),
    ([{**V1, "type": None}], r"^modelDefinition\[0\]\.type: must be an integer$"),
    ([{k: v for k, v in V1.items() if k != "gid"}], r"^modelDefinition\[0\]\.gid: must be an"),
    ([{**V1, "uid": True}], r"^modelDefinition\[0\]\.uid: must be an integer$"),
    ([{**V1, "mode": "33188"}], r"^modelDefinition\[0\]\.mode: must be an integer$"),
    ([{**V1, "mtime": 1}], r"^modelDefinition\[0\]\.mtime: must be a string$"),
    ([{**V1, "uid": -1}], r"^modelDefinition\[0\]\.uid: must be ≥ 0$"),
    ([V1, V1, V1, {**V1, "path": "../a"}],
     r"^modelDefinition\[3\]\.path: must be a relative path without '\.\.'$"),
    ([{**V1, "path": "/etc/passwd"}], r"^modelDefinition\[0\]\.path: must be a relative path"),
    ([{**V1, "path": "a/../../b"}], r"^modelDefinition\[0\]\.path: must be a relative path"),
    ([{**V1, "path": "./"}], r"^modelDefinition\[0\]\.path: must be a relative path"),
    ([{**V1, "content": "!!"}], r"^modelDefinition\[0\]\.content: not valid base64$"),
    ([{**V1, "type": 50}], r"^modelDefinition\[0\]\.type: must be 48 \(file\) or 53"),
    ([{**V1, "mtime": "soon"}], r"^modelDefinition\[0\]\.mtime: must be a decimal string of"),
    ([{**V1, "mtime": "9" * 30}], r"^modelDefinition\[0\]\.mtime: must be a decimal string of"),
    ([{**V1, "mtime": "9" * 5000}], r"^modelDefinition\[0\]\.mtime: must be a decimal string"),
    ([{**V1, "path": "a/" * 2000 + "x"}], r"^modelDefinition\[0\]\.path: the path is"),
    ([{**V1, "path": "x" * 1500}], r"^modelDefinition\[0\]\.path: the path is 1500 bytes"),
])
def test_validate_v1files_names_the_index_and_field(files: object, message: str) -> None:
    with pytest.raises(ContextError, match=message):
        context.validate_v1files(files)


def test_validate_v1files_accepts_a_packed_context(tmp_path: Path) -> None:
    files = context.pack(tree(tmp_path / "ctx", {"a/b/...c": "x", "d.py": "y"}))
    assert context.validate_v1files(files) is files


# ---------------------------------------------------------------- round trip


def test_round_trip_gives_the_same_tree(tmp_path: Path) -> None:
    root = tree(tmp_path / "ctx", {
        "run.sh": "#!/bin/sh\necho hi\n", "pkg/m.py": "m = 1\n", "pkg/deep/data.bin": b"\0\1\2",
        "secret.key": "k", ".detignore": "*.key\n", "pkg/__pycache__/m.pyc": "c",
    })
    (root / "empty").mkdir()
    os.chmod(root / "run.sh", 0o755)
    os.chmod(root / "pkg/deep", 0o750)
    os.chmod(root / "pkg/m.py", 0o600)
    lib = tree(tmp_path / "lib", {"u.py": "u"})
    files = context.validate_v1files(context.pack(root, [lib]))
    out = tmp_path / "out"
    written = context.extract(context.to_targz(files), out)
    assert [p.relative_to(out).as_posix() for p in written] == paths(files)
    assert snapshot(out) == snapshot(root, skip={"secret.key", ".detignore", "pkg/__pycache__",
                                                 "pkg/__pycache__/m.pyc"}) | snapshot(lib, "lib")
    assert os.stat(out / "run.sh").st_mtime == int(os.stat(root / "run.sh").st_mtime)


def snapshot(root: Path, prefix: str = "", skip: frozenset[str] | set[str] = frozenset()
             ) -> set[tuple[str, int, bytes]]:
    """(relative path, permission bits, content) of everything under root."""
    out = {(prefix, stat.S_IMODE(root.stat().st_mode), b"")} if prefix else set()
    for p in root.rglob("*"):
        rel = p.relative_to(root).as_posix()
        if rel in skip:
            continue
        body = p.read_bytes() if p.is_file() else b""
        out.add((f"{prefix}/{rel}" if prefix else rel, stat.S_IMODE(p.stat().st_mode), body))
    return out


# ---------------------------------------------------------------- safe extraction


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    m = tarfile.TarInfo(name)
    m.type = kind
    m.linkname = link
    return m


def craft(*members: tarfile.TarInfo) -> bytes:
    """A tar.gz that starts with a harmless file, then the given members."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        for m in (member("fine.txt"), *members):
            data = f"data of {m.name}".encode() if m.isreg() else b""
            m.size = len(data)
            tar.addfile(m, io.BytesIO(data) if data else None)
    return buf.getvalue()


UNSAFE = "absolute paths and '..' are not allowed"
OUTSIDE = "points outside the work dir"
SPECIAL = "device, fifo and special files are not allowed"


@pytest.mark.parametrize(("bad", "message"), [
    ([member("../evil.txt")], UNSAFE),
    ([member("a/../../evil.txt")], UNSAFE),
    ([member("/tmp/abs-evil.txt")], UNSAFE),
    ([member("../evil_dir", tarfile.DIRTYPE)], UNSAFE),
    ([member("etc", tarfile.SYMTYPE, "/etc")], OUTSIDE),
    ([member("up", tarfile.SYMTYPE, "../../outside")], OUTSIDE),
    ([member("s", tarfile.SYMTYPE, "."), member("x", tarfile.SYMTYPE, "s/..")], OUTSIDE),
    ([member("t", tarfile.SYMTYPE, "s/s/s/.."), member("s", tarfile.SYMTYPE, ".")], OUTSIDE),
    ([member("loop", tarfile.SYMTYPE, "loop/x")], OUTSIDE),
    ([member("in", tarfile.SYMTYPE, "."), member("in/evil.txt")], "is not a directory"),
    ([member("hard", tarfile.LNKTYPE, "../outside")], OUTSIDE),
    ([member("hard", tarfile.LNKTYPE, "/etc/passwd")], OUTSIDE),
    ([member("hard", tarfile.LNKTYPE, "not-in-archive")], "does not name a file earlier"),
    ([member("hard", tarfile.LNKTYPE, "later.txt"), member("later.txt")],
     "does not name a file earlier"),
    ([member("tty", tarfile.CHRTYPE)], SPECIAL),
    ([member("sda", tarfile.BLKTYPE)], SPECIAL),
    ([member("pipe", tarfile.FIFOTYPE)], SPECIAL),
    ([member("fine.txt", tarfile.SYMTYPE, "x")], "more than once"),
    ([member("a"), member("a/b.txt")], "'a' in the archive is not a directory"),
])
def test_unsafe_archives_are_refused_before_anything_is_written(
    tmp_path: Path, bad: list[tarfile.TarInfo], message: str
) -> None:
    dest = tmp_path / "work" / "alloc"
    with pytest.raises(ContextError, match=message) as exc:
        context.extract(craft(*bad), dest)
    assert exc.value.message.startswith("refusing to extract '")
    assert list(dest.iterdir()) == [], "checked before anything is written"
    assert [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")] == [
        "work", "work/alloc"], "nothing outside dest"


def test_writing_through_an_existing_symlink_in_dest_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "work"
    dest.mkdir()
    (dest / "data").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ContextError, match="'data' is a symbolic link in the work dir"):
        context.extract(craft(member("data/evil.txt")), dest)
    assert list(outside.iterdir()) == []
    assert not (dest / "fine.txt").exists()


def test_a_link_through_an_existing_absolute_symlink_in_dest_is_refused(tmp_path: Path) -> None:
    dest = tmp_path / "work"
    dest.mkdir()
    (dest / "host").symlink_to("/etc", target_is_directory=True)
    with pytest.raises(ContextError, match="its link to 'host/passwd' points outside"):
        context.extract(craft(member("cfg", tarfile.SYMTYPE, "host/passwd")), dest)
    assert sorted(p.name for p in dest.iterdir()) == ["host"]


def test_links_inside_the_work_dir_are_fine(tmp_path: Path) -> None:
    blob = craft(member("sub", tarfile.DIRTYPE), member("sub/real.txt"),
                 member("sub/rel", tarfile.SYMTYPE, "real.txt"),
                 member("top", tarfile.SYMTYPE, "sub/../fine.txt"),
                 member("hard", tarfile.LNKTYPE, "./sub/real.txt"))
    dest = tmp_path / "work"
    written = context.extract(blob, dest)
    assert [p.name for p in written] == ["fine.txt", "sub", "real.txt", "rel", "top", "hard"]
    assert (dest / "sub/rel").read_text() == "data of sub/real.txt"
    assert (dest / "top").read_text() == "data of fine.txt"
    assert os.stat(dest / "hard").st_ino == os.stat(dest / "sub/real.txt").st_ino


def test_extraction_strips_setuid_and_keeps_exec_bits(tmp_path: Path) -> None:
    run = member("run.sh")
    run.mode = 0o4755
    ro = member("ro", tarfile.DIRTYPE)
    ro.mode = 0o555
    inner = member("ro/f.txt")
    dest = tmp_path / "work"
    context.extract(craft(run, ro, inner), dest)
    assert stat.S_IMODE(os.stat(dest / "run.sh").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(dest / "ro").st_mode) == 0o555
    assert (dest / "ro/f.txt").read_text() == "data of ro/f.txt"
    os.chmod(dest / "ro", 0o755)  # let tmp_path clean up


def test_a_size_bomb_is_refused_from_its_header(tmp_path: Path) -> None:
    huge = tarfile.TarInfo("huge.bin")
    huge.size = 2 * 1024**3
    blob = gzip.compress(huge.tobuf(tarfile.GNU_FORMAT) + b"\0" * 4096)
    with pytest.raises(ContextError, match="expands beyond 1.0 GiB"):
        context.extract(blob, tmp_path / "work")
    assert list((tmp_path / "work").iterdir()) == []


def test_too_many_members_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(context, "MAX_MEMBERS", 5)
    blob = craft(*(member(f"f{i}") for i in range(5)))
    with pytest.raises(ContextError, match="more than 5 members"):
        context.extract(blob, tmp_path / "work")


def test_not_an_archive_and_empty(tmp_path: Path) -> None:
    with pytest.raises(ContextError, match="not a valid tar.gz"):
        context.extract(b"definitely not gzip", tmp_path / "x")
    with pytest.raises(ContextError, match="not a valid tar.gz"):
        context.extract(gzip.compress(b"\x01" * 1024), tmp_path / "x")
    assert context.extract(b"", tmp_path / "y") == []


@pytest.mark.timeout(30)
def test_packing_skips_fifos_and_devices_instead_of_hanging(tmp_path: Path) -> None:
    """A FIFO (open blocks forever) and a symlink to /dev/zero (never ends) are skipped with a
    warning; a file that grows while it is read is read at most up to the cap."""
    import os
    import warnings

    (tmp_path / "train.py").write_text("print(1)\n")
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "zero").symlink_to("/dev/zero")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        files = context.pack(tmp_path)
    assert [f["path"] for f in files] == ["train.py"]
    assert sum("not a regular file" in str(w.message) for w in caught) == 2


def test_packing_refuses_a_too_deep_tree_and_clamps_mtimes(tmp_path: Path) -> None:
    import os
    import subprocess

    deep = tmp_path / "ctx" / "/".join(["d"] * 70)
    deep.mkdir(parents=True)
    (deep / "x.py").write_text("x")
    with pytest.raises(ContextError, match="directories deep, over the limit of 64"):
        context.pack(tmp_path / "ctx")
    # 2,000 levels: os.walk recurses once per level (RecursionError) unless the walk stops
    # where the limit is passed. Made a level at a time (a 4 KiB path is over PATH_MAX).
    here = os.getcwd()
    try:
        os.chdir(tmp_path)
        os.mkdir("huge")
        os.chdir("huge")
        for _ in range(2000):
            os.mkdir("d")
            os.chdir("d")
    finally:
        os.chdir(here)
    try:
        with pytest.raises(ContextError, match="directories deep, over the limit of 64"):
            context.pack(tmp_path / "huge")
    finally:  # shutil.rmtree (pytest's clean-up) recurses per level too; rm(1) does not
        subprocess.run(["rm", "-rf", str(tmp_path / "huge")], check=True)
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "f.py").write_text("x")
    os.utime(flat / "f.py", (2**40, 2**40))
    [entry] = context.pack(flat)
    assert int(entry["mtime"]) == context.MTIME_RANGE[1]
    context.validate_v1files([entry])

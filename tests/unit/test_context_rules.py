"""Model contexts: .detignore rules, includes, the 95 MiB cap, and safe extraction."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from dettui import context
from dettui.errors import ContextError


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def paths(files: list[dict]) -> list[str]:
    return [f["path"] for f in files]


def test_detignore_and_builtin_ignores(tmp_path: Path) -> None:
    root = tree(tmp_path / "ctx", {
        "train.py": "x", "model.bin": "weights", "keep.bin": "k",
        ".detignore": "*.bin\n!keep.bin\ndata/\n",
        "data/big.csv": "1", "sub/data/nested.csv": "2", "sub/util.py": "u",
        "sub/.detignore": "util.py\n", "__pycache__/a.pyc": "c", "b.pyc": "c",
        ".git/config": "g", "notes/.mypy_cache/x": "m",
    })
    got = paths(context.pack(root))
    assert got == ["notes", "sub", "keep.bin", "train.py", "sub/util.py"]


def test_walk_order_and_v1file_shape(tmp_path: Path) -> None:
    root = tree(tmp_path / "ctx", {"b.py": "b", "a/x.py": "x"})
    os.chmod(root / "b.py", 0o755)
    files = context.pack(root)
    assert paths(files) == ["a", "b.py", "a/x.py"]
    d, f = files[0], files[1]
    assert d["type"] == 53 and d["content"] == "" and stat.S_ISDIR(d["mode"])
    assert f["type"] == 48 and f["content"] == "Yg==" and f["mode"] & 0o777 == 0o755
    assert f["mtime"].isdigit() and set(f) == set(context.V1FILE_KEYS)


def test_includes(tmp_path: Path) -> None:
    root = tree(tmp_path / "ctx", {"t.py": "t"})
    lib = tree(tmp_path / "lib", {"m.py": "m", "__pycache__/z.pyc": "z"})
    one = tree(tmp_path / "extra", {"conf.yaml": "c"}) / "conf.yaml"
    assert paths(context.pack(root, [lib, one])) == ["t.py", "lib", "lib/m.py", "conf.yaml"]
    tree(root, {"lib/other.py": "o"})
    with pytest.raises(ContextError, match="duplicate path detected: 'lib'"):
        context.pack(root, [lib])


def test_context_must_be_a_directory(tmp_path: Path) -> None:
    f = tree(tmp_path, {"f.py": "x"}) / "f.py"
    with pytest.raises(ContextError, match=r"must be a directory, maybe use an include instead\?"):
        context.pack(f)


def test_size_cap_lists_the_largest_files(tmp_path: Path) -> None:
    root = tmp_path / "ctx"
    root.mkdir()
    (root / "small.py").write_text("x")
    for name, mib in (("weights.bin", 60), ("data.npy", 40)):
        with open(root / name, "wb") as f:
            f.write(b"\0" * mib * 1024 * 1024)
    with pytest.raises(ContextError) as exc:
        context.pack(root)
    msg = str(exc.value)
    assert "exceeds the maximum allowed size 95.0MB" in msg
    assert msg.index("weights.bin") < msg.index("data.npy")
    assert "60.0 MiB" in msg and ".detignore" in msg
    (root / ".detignore").write_text("*.bin\n")
    assert paths(context.pack(root)) == ["data.npy", "small.py"]


def test_round_trip_keeps_content_and_modes(tmp_path: Path) -> None:
    root = tree(tmp_path / "ctx", {"run.sh": "#!/bin/sh\necho hi\n", "pkg/m.py": "m = 1\n"})
    os.chmod(root / "run.sh", 0o755)
    files = context.validate_v1files(context.pack(root))
    out = tmp_path / "out"
    written = context.extract(context.to_targz(files), out)
    assert {p.relative_to(out).as_posix() for p in written} == {"pkg", "run.sh", "pkg/m.py"}
    assert (out / "pkg/m.py").read_text() == "m = 1\n"
    assert os.stat(out / "run.sh").st_mode & 0o777 == 0o755


def targz(*members: tarfile.TarInfo, data: bytes = b"evil") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        ok = tarfile.TarInfo("fine.txt")
        ok.size = 2
        tar.addfile(ok, io.BytesIO(b"ok"))
        for m in members:
            if m.isfile():
                m.size = len(data)
                tar.addfile(m, io.BytesIO(data))
            else:
                tar.addfile(m)
    return buf.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    m = tarfile.TarInfo(name)
    m.type = kind
    m.linkname = link
    return m


@pytest.mark.parametrize(("bad", "message"), [
    (member("../evil.txt"), "absolute paths and '..' are not allowed"),
    (member("a/../../evil.txt"), "absolute paths and '..' are not allowed"),
    (member("/tmp/evil.txt"), "absolute paths and '..' are not allowed"),
    (member("link", tarfile.SYMTYPE, "/etc"), "points outside the work dir"),
    (member("link", tarfile.SYMTYPE, "../../outside"), "points outside the work dir"),
    (member("hard", tarfile.LNKTYPE, "../outside"), "absolute paths|points outside"),
    (member("dev", tarfile.CHRTYPE), "device, fifo and special files are not allowed"),
    (member("fifo", tarfile.FIFOTYPE), "device, fifo and special files are not allowed"),
])
def test_unsafe_archives_are_refused_and_nothing_is_written(
    tmp_path: Path, bad: tarfile.TarInfo, message: str
) -> None:
    dest = tmp_path / "work" / "alloc"
    with pytest.raises(ContextError, match=message):
        context.extract(targz(bad), dest)
    assert list(dest.iterdir()) == [], "checked before anything is written"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]


def test_not_an_archive(tmp_path: Path) -> None:
    with pytest.raises(ContextError, match="not a valid tar.gz"):
        context.extract(b"definitely not gzip", tmp_path / "x")


@pytest.mark.parametrize(("files", "message"), [
    ("nope", "modelDefinition: must be a list"),
    ([1], r"modelDefinition\[0\]: must be an object"),
    ([{"path": "a"}], r"modelDefinition\[0\].type: must be an integer"),
    ([{"path": "../a", "type": 48, "content": "", "mtime": "1", "mode": 1, "uid": 0, "gid": 0}],
     r"modelDefinition\[0\].path: must be a relative path without '..'"),
    ([{"path": "a", "type": 48, "content": "!!", "mtime": "1", "mode": 1, "uid": 0, "gid": 0}],
     r"modelDefinition\[0\].content: not valid base64"),
    ([{"path": "a", "type": 7, "content": "", "mtime": "1", "mode": 1, "uid": 0, "gid": 0}],
     r"modelDefinition\[0\].type: must be 48"),
])
def test_validate_v1files(files: object, message: str) -> None:
    with pytest.raises(ContextError, match=message):
        context.validate_v1files(files)

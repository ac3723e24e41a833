"""`dettui checkpoint download --mode master` extracts the master's tar.gz on any Python 3.11:
Debian 12's 3.11.2 (the venv's interpreter where trial users must run it) lacks tarfile's
`filter=`, and the download then failed with a TypeError; without it, only members that stay
inside the destination are written."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from dettui.commands import checkpoint
from dettui.errors import FailedPrecondition


def _targz(*members: tuple[str, str | None, bytes]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, link, data in members:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
            info.size = len(data) if link is None else 0
            tar.addfile(info, io.BytesIO(data) if link is None else None)
    buf.seek(0)
    return buf


@pytest.mark.parametrize("stdlib_filter", [True, False])
def test_a_checkpoint_archive_extracts_inside_its_directory_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stdlib_filter: bool) -> None:
    if not stdlib_filter:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    elif not hasattr(tarfile, "data_filter"):
        pytest.skip("this Python's tarfile has no 'data' filter")
    good = tmp_path / "good"
    checkpoint._extract(_targz(("model/w.pt", None, b"weights"), ("latest", "model/w.pt", b"")),
                        good, "u")
    assert (good / "model" / "w.pt").read_bytes() == b"weights"
    assert (good / "latest").read_bytes() == b"weights"
    bad_ones = [("../escape", None, b"x"), ("out", "../../etc", b""), ("abs", "/etc", b"")]
    for bad in bad_ones + ([] if stdlib_filter else [("/abs", None, b"x")]):
        with pytest.raises(FailedPrecondition, match="not valid"):
            checkpoint._extract(_targz(bad), tmp_path / "bad", "u")
    assert not (tmp_path / "escape").exists()

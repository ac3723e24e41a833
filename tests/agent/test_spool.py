"""The log spool: numbered lines, kept until acknowledged, spilled to its file past the memory
bound and read back, and left for the agent to ship when the master was away at the end."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dettui.agent import spool
from dettui.agent.logship import Line


def line(i: int) -> Line:
    return Line(float(i), "stdout", f"line {i}\n", None, None)


def test_lines_stay_until_acknowledged_and_spill_to_the_file(tmp_path: Path,
                                                             monkeypatch: object) -> None:
    import pytest

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.setattr(spool, "MAX_MEMORY", 10)
    s = spool.Spool(tmp_path, "a.1")
    for i in range(1, 26):
        s.append(line(i))
    got: list[int] = []
    while batch := s.batch(4):
        assert batch == s.batch(4), "a batch stays until it is acknowledged"
        got += [b["seq"] for b in batch]
        assert [b["log"] for b in batch] == [f"line {n}\n" for n in got[-len(batch):]]
        s.ack(batch[-1]["seq"])
    assert got == list(range(1, 26))
    s.close(shipped=True)
    assert not (tmp_path / "a.1.jsonl").exists()


def test_what_is_left_is_shipped_later(tmp_path: Path) -> None:
    ended = spool.Spool(tmp_path, "a.1")  # ended while the master was away
    for i in range(1, 4):
        ended.append(line(i))
    ended.ack(1)
    ended.close(shipped=False)
    killed = spool.Spool(tmp_path, "b.1")  # its agent was killed: the file stays as it was
    killed.append(line(1))
    killed.sync()
    left = dict((p.name, lines) for p, lines in spool.leftovers(tmp_path, running=set()))
    assert [x["seq"] for x in left["a.1.unshipped.jsonl"]] == [1, 2, 3]  # the master dedups
    assert [x["seq"] for x in left["b.1.jsonl"]] == [1, 2]
    # when its lines may stop, in the user's words (not "after line 1": a sequence number)
    kept = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(left["b.1.jsonl"][0]["timestamp"]))
    assert left["b.1.jsonl"][-1]["log"] == ("the agent was killed while this allocation ran: "
                                            f"its log lines after {kept} UTC may be missing\n")
    assert spool.leftovers(tmp_path, running={"a.1", "b.1"}) == []
    # b.1 started in this agent process (it runs, or is about to be counted as running): its
    # open spool is no killed agent's; a.1's unshipped lines still go
    assert [p.name for p, _ in spool.leftovers(tmp_path, running=set(),
                                                started={"a.1", "b.1"})] == ["a.1.unshipped.jsonl"]


def _full_disk_after(monkeypatch: pytest.MonkeyPatch, nbytes: int) -> None:
    """The spool's file takes `nbytes` more bytes, then fails with ENOSPC (part of the write
    that crosses the line lands, as on a real disk)."""
    import errno
    import os

    room = [nbytes]
    real = os.write

    def write(fd: int, data: bytes) -> int:
        if room[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real(fd, bytes(data[:room[0]]))
        room[0] -= n
        return n

    monkeypatch.setattr(spool.os, "write", write)


def _drain(s: spool.Spool) -> list[int]:
    got: list[int] = []
    while batch := s.batch(7):
        got += [b["seq"] for b in batch]
        s.ack(batch[-1]["seq"])
    return got


@pytest.mark.parametrize("spilled", [False, True])
def test_a_full_disk_keeps_the_lines_in_memory_in_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spilled: bool) -> None:
    """Issue 29, attack 6: the spool's write raised ENOSPC into the allocation, which ended
    "crashed in the agent". Now lines the file cannot take stay in memory, after the whole
    lines the file has, and each is delivered once, in order; what is left at the end is
    written to the unshipped file once there is room."""
    monkeypatch.setattr(spool, "MAX_MEMORY", 10 if spilled else 1000)
    monkeypatch.setattr(spool, "FLUSH_BYTES", 300)
    s = spool.Spool(tmp_path, "a.1")
    for i in range(1, 16):
        s.append(line(i))
    s.sync()
    _full_disk_after(monkeypatch, 500)  # half a line lands: the file keeps whole ones
    for i in range(16, 61):
        s.append(line(i))
    s.sync()
    assert s.memory_only
    assert (tmp_path / "a.1.jsonl").read_bytes().endswith(b"\n")
    first = s.batch(20)
    s.ack(first[-1]["seq"])
    assert [b["seq"] for b in first] + _drain(s) == list(range(1, 61))
    for i in range(61, 66):
        s.append(line(i))
    monkeypatch.undo()  # room again
    s.close(shipped=False)
    left = dict((p.name, lines) for p, lines in spool.leftovers(tmp_path, running=set()))
    assert [x["seq"] for x in left["a.1.unshipped.jsonl"]] == list(range(61, 66))
    assert not (tmp_path / "a.1.jsonl").exists()


def test_past_its_memory_bound_a_full_disk_counts_what_it_lost(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spool, "MAX_MEMORY", 5)
    monkeypatch.setattr(spool, "MAX_HELD", 5)
    monkeypatch.setattr(spool, "FLUSH_BYTES", 1)  # each line is written as it comes
    _full_disk_after(monkeypatch, 0)
    s = spool.Spool(tmp_path, "a.1")
    for i in range(1, 15):
        s.append(line(i))
    assert s.memory_only and s.dropped == 4
    kept = s.batch(100)
    s.ack(kept[-1]["seq"])
    s.append(line(15))
    after = s.batch(100)
    assert [b["seq"] for b in kept] == list(range(1, 11))
    assert [b["seq"] for b in after] == [14, 15]  # the note under the last lost line's number
    assert "4 log lines before this one were lost" in after[0]["log"]

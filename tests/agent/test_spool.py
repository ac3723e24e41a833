"""The log spool: numbered lines, kept until acknowledged, spilled to its file past the memory
bound and read back, and left for the agent to ship when the master was away at the end."""

from __future__ import annotations

from pathlib import Path

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
    assert "may be missing" in left["b.1.jsonl"][-1]["log"]
    assert spool.leftovers(tmp_path, running={"a.1", "b.1"}) == []
    # b.1 started in this agent process (it runs, or is about to be counted as running): its
    # open spool is no killed agent's; a.1's unshipped lines still go
    assert [p.name for p, _ in spool.leftovers(tmp_path, running=set(),
                                                started={"a.1", "b.1"})] == ["a.1.unshipped.jsonl"]

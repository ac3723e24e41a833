"""Turning a process's output into log lines: split, tag rank and level, batch for shipping."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

MAX_LINE = 8191
RANK_RE = re.compile(rb"^\[rank=(\d+)\] ")
LEVEL_RE = re.compile(rb"^ ?(DEBUG|INFO|WARNING|ERROR|CRITICAL): ?")  # ship_logs.py's


@dataclass(frozen=True)
class Line:
    timestamp: float
    stdtype: str
    text: str
    rank: int | None
    level: str | None

    def wire(self, allocation_id: str) -> dict[str, object]:
        return {"allocationId": allocation_id, "timestamp": self.timestamp,
                "rankId": self.rank, "stdtype": self.stdtype, "level": self.level,
                "log": self.text}


def split_chunks(buffer: bytes) -> tuple[list[bytes], bytes]:
    r"""Split on \n and \r like Determined's ship_logs; return complete pieces and the rest."""
    pieces = re.split(rb"[\r\n]", buffer)
    rest = pieces.pop()
    out: list[bytes] = []
    for piece in pieces:
        while len(piece) > MAX_LINE:
            out.append(piece[:MAX_LINE])
            piece = piece[MAX_LINE:]
        out.append(piece)
    return out, rest


def parse(raw: bytes, stdtype: str, now: float | None = None) -> Line:
    rank = None
    level = None
    m = RANK_RE.match(raw)
    if m:
        rank = int(m.group(1))
        raw = raw[m.end():]
    m = LEVEL_RE.match(raw)
    if m:
        level = m.group(1).decode()
        raw = raw[m.end():]
    text = raw.decode("utf-8", errors="replace") + "\n"
    return Line(time.time() if now is None else now, stdtype, text, rank, level)

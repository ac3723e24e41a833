"""The report of `bench/scale.py`: every figure next to its target from issue 13."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Row:
    section: str
    what: str
    value: str
    target: str = ""
    met: bool | None = None  # None: no target, or not measured

    @property
    def verdict(self) -> str:
        return {True: "met", False: "NOT met", None: ""}[self.met]


def ms(seconds: float) -> str:
    if math.isnan(seconds):
        return "n/a"
    return f"{seconds * 1000:.1f} ms" if seconds < 0.1 else f"{seconds * 1000:.0f} ms"


@dataclass
class Report:
    title: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, section: str, what: str, value: str, target: str = "",
            met: bool | None = None) -> None:
        self.rows.append(Row(section, what, value, target, met))
        mark = f"  [{Row(section, what, value, target, met).verdict}]" if met is not None else ""
        print(f"  {what}: {value}{'   target ' + target if target else ''}{mark}", flush=True)

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"  note: {text}", flush=True)

    def text(self) -> str:
        width = min(max(len(r.what) for r in self.rows), 72)
        lines = [self.title, ""]
        sections = list(dict.fromkeys(r.section for r in self.rows))
        for section in sections:
            lines.append(section)
            lines.extend(self._line(r, width) for r in self.rows if r.section == section)
        met = [r for r in self.rows if r.met is not None]
        lines.append("")
        lines.append(f"targets met: {sum(bool(r.met) for r in met)} of {len(met)}")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)

    @staticmethod
    def _line(r: Row, width: int) -> str:
        target = f"   [target {r.target}: {r.verdict}]" if r.target else ""
        return f"  {r.what:<{width}}  {r.value}{target}"

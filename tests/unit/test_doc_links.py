"""Every relative link of README.md and docs/*.md leads to a file of this repository (and an
anchor to a heading of it): the README pointed at a design file outside the repo
(`../shared/DESIGN.md`), there on the machine it was written on, missing in a fresh clone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
NAMED_FILE = re.compile(r"`([\w./-]+\.md)`")  # a document named in backticks


def anchors(doc: Path) -> set[str]:
    """The anchors GitHub makes of a document's headings: lower case, punctuation dropped,
    spaces as hyphens."""
    heads = re.findall(r"^#+\s+(.*)$", doc.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def targets(doc: Path) -> list[str]:
    text = doc.read_text()
    return [t for t in LINK.findall(text) + NAMED_FILE.findall(text)
            if not re.match(r"[a-z][a-z0-9+.-]*:", t)]  # http:, mailto:: not files


def broken(doc: Path, target: str) -> str | None:
    path, _, anchor = target.partition("#")
    if path:
        bases = [doc.parent, REPO]  # a link is relative to its file; a name in backticks, too,
        found = [(b / path).resolve() for b in bases if (b / path).exists()]  # or the repo's
        inside = [f for f in found if f.is_relative_to(REPO)]
        if not inside:
            return f"{doc.name}: {target}: no such file in the repository"
        dest = inside[0]
    else:
        dest = doc
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"{doc.name}: {target}: no heading makes #{anchor}"
    return None


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_relative_links_resolve(doc: Path) -> None:
    problems = [p for t in targets(doc) if (p := broken(doc, t)) is not None]
    assert not problems, problems


def test_the_checks_find_a_broken_link(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text("# Top\nsee [a](missing.md), [b](#top), [c](#nowhere), `../../x.md`\n")
    assert broken(doc, "missing.md") is not None
    assert broken(doc, "#top") is None and broken(doc, "#nowhere") is not None

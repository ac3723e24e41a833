"""A watch for gaps in the API: every compat test fails if a `dettui serve` it ran answered 404
to the real determined package on /api/v1/ (a route dettui lacks, or an object it cannot find
where Determined would), unless the test declares that 404 with
`@pytest.mark.expect_404("METHOD /path/regex")`. The master logs each 404 on one line
(`dettui.master.http.middleware.not_found`); the real package's clients (the `det` CLI, the SDK, the
Core API in trials) send requests' User-Agent, dettui's own clients do not."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import STARTED

NOT_FOUND = re.compile(r" dettui\.master: 404 (\S+) (\S+) \((.*)\)$")
REAL_CLIENT = "python-requests/"


def real_404s(log: Path) -> list[str]:
    """`METHOD PATH` of each 404 the master of `log` answered to the real package."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        m = NOT_FOUND.search(line)
        if m and m.group(3).startswith(REAL_CLIENT):
            found.append(f"{m.group(1)} {m.group(2)}")
    return found


@pytest.fixture(autouse=True)
def no_404_to_the_real_package(request: pytest.FixtureRequest) -> Iterator[None]:
    first = len(STARTED)
    yield  # autouse: set up first, so torn down after the masters stopped (logs complete)
    expected = [re.compile(m.args[0]) for m in request.node.iter_markers("expect_404")]
    unexpected = [f"{s.log_path}: {seen}" for s in STARTED[first:] if s.log_path is not None
                  and s.log_path.exists() for seen in real_404s(s.log_path)
                  if not any(p.fullmatch(seen) for p in expected)]
    assert not unexpected, ("the master answered 404 to the real determined package (a "
                            "missing route?):\n" + "\n".join(unexpected))

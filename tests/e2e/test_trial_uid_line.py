"""The local agent's start-up line about unlinked users' trials is true (review of issue 31,
N11): on a root agent each unlinked user's trials run as a uid of their own (dettui-N,
2000000000 + N), which the line says, rather than naming dettui-0 as if it were everyone's."""

from __future__ import annotations

import os

import pytest

from tests.conftest import Served

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="per-user uids need a root agent")]


def test_the_agent_says_unlinked_users_run_as_uids_of_their_own(served: Served) -> None:
    assert served.log_path is not None
    log = served.log_path.read_text()
    assert ("trials of unlinked users run as per-user uids dettui-N (2000000000+N, N the "
            "user's id)") in log, log[-3000:]
    assert "run as dettui-0" not in log

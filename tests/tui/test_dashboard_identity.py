"""One identity (issue 31, item 3): the dashboard acts as the CLI's user, the saved login of
`dettui user login` (Determined's default `determined` on a fresh master), also on the master
of its own state dir, where it used to be `admin`. An experiment created with `n` in the
dashboard is paused from the CLI, and one created by the CLI is controlled from the
dashboard; the header names the master and the user."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dettui import statedir
from dettui.commands.dashboard import Dashboard
from dettui.widgets.rowtable import RowTable
from tests.conftest import SAMPLE, Served
from tests.poll import until_async

pytestmark = pytest.mark.slow


def rows(app: Dashboard, selector: str, n: int) -> Callable[[], bool]:
    def check() -> bool:
        found = app.screen.query(selector)
        return bool(found) and found.first(RowTable).row_count >= n
    return check


def state(s: Served, exp_id: int) -> str:
    return str(s.api("GET", f"/api/v1/experiments/{exp_id}")["experiment"]["state"])


@pytest.fixture
def own_master(served: Served, monkeypatch: pytest.MonkeyPatch) -> statedir.Holder:
    """The served master, found as a dashboard finds its own: through the state dir."""
    monkeypatch.setenv("DETTUI_CONFIG_DIR", str(served.config_dir))
    for name in ("DET_USER", "DET_PASS", "DET_MASTER"):
        monkeypatch.delenv(name, raising=False)
    local = statedir.holder(served.state_dir)
    assert local is not None and local.mode == statedir.SERVE
    return local


async def test_created_in_the_dashboard_controlled_from_the_cli_and_back(
        served: Served, own_master: statedir.Holder) -> None:
    app = Dashboard(own_master.url, served.state_dir, local=own_master)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("2")
        await until_async(lambda: type(app.screen).__name__ == "ExperimentsScreen", "section 2")
        await pilot.press("n")
        await pilot.pause()
        app.screen.query_one("#answer").value = str(SAMPLE / "single.yaml")  # type: ignore
        await pilot.press("enter")
        await pilot.pause()
        app.screen.query_one("#answer").value = str(SAMPLE)  # type: ignore[attr-defined]
        await pilot.press("enter")
        await until_async(rows(app, "#experiments", 1), "the experiment made with n")
        made = served.api("GET", "/api/v1/experiments/1")["experiment"]
        assert made["username"] == "determined", made["username"]
        paused = served.cli("e", "pause", "1", check=False)  # the CLI, as its saved user
        assert paused.returncode == 0, paused.stderr
        assert state(served, 1) == "STATE_PAUSED"
        assert app.sub_title == f"{own_master.url} (pid {own_master.pid}) as determined"
        # And the other way: made by the CLI, activated and paused from the dashboard.
        served.cli("e", "create", "--paused", str(SAMPLE / "single.yaml"), str(SAMPLE))
        await until_async(rows(app, "#experiments", 2), "the CLI's experiment")
        exps = app.screen.query_one("#experiments", RowTable)
        exps.move_cursor_to_key("2")
        await pilot.press("a")
        await until_async(lambda: state(served, 2) != "STATE_PAUSED", "activated")
        await pilot.press("p")
        await until_async(lambda: state(served, 2) == "STATE_PAUSED", "paused")
        assert not any(n.severity == "error" for n in app._notifications), [
            str(n.message) for n in app._notifications]
        await pilot.press("q")
        await pilot.pause(0.5)
    assert app.errors == []
    assert served.proc is not None and served.proc.poll() is None, "serve's master goes on"


async def test_the_cli_login_decides_who_the_dashboard_is(served: Served,
                                                          own_master: statedir.Holder) -> None:
    """`dettui user login admin` makes the dashboard admin as well (E/D on the cluster work);
    without it, the cluster refuses `determined`, as the CLI is refused."""
    refused = served.cli("agent", "disable", served.api("GET", "/api/v1/agents")["agents"][0][
        "id"], check=False)
    assert refused.returncode == 1, refused.stdout
    served.cli("user", "login", "admin", "--password", "")
    app = Dashboard(own_master.url, served.state_dir, local=own_master)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        await until_async(rows(app, "#agents", 1), "the agent")
        assert app.sub_title.endswith(" as admin"), app.sub_title
        await pilot.press("D")
        await until_async(lambda: not served.api("GET", "/api/v1/agents")["agents"][0][
            "enabled"], "agent disabled")
        await pilot.press("E")
        await until_async(lambda: served.api("GET", "/api/v1/agents")["agents"][0]["enabled"],
                          "agent enabled")
    assert app.errors == []

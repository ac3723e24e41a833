"""The dashboard against a real master on 127.0.0.1: every screen's keys act through the same
API as the CLI, tables fill from the master's push stream."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from dettui.commands.dashboard import Dashboard
from dettui.widgets.rowtable import RowTable
from tests.conftest import SAMPLE, Served
from tests.poll import until_async

pytestmark = pytest.mark.slow


def table(app: Dashboard, selector: str) -> RowTable:
    return app.screen.query_one(selector, RowTable)


def has_rows(app: Dashboard, selector: str, n: int) -> Callable[[], bool]:
    def check() -> bool:
        found = app.screen.query(selector)
        return bool(found) and found.first(RowTable).row_count >= n
    return check


def job_ids(s: Served) -> list[str]:
    return [j["jobId"] for j in json.loads(s.cli("job", "list", "--json").stdout)]


@pytest.fixture
def dashboard(served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Dashboard:
    monkeypatch.setenv("DETTUI_CONFIG_DIR", str(served.config_dir))
    return Dashboard(served.url, tmp_path / "unused")


def create_paused(s: Served, n: int) -> None:
    for _ in range(n):
        s.cli("e", "create", "--paused", str(SAMPLE / "single.yaml"), str(SAMPLE))


async def test_queue_keys_reorder_set_priority_and_control(served: Served,
                                                           dashboard: Dashboard) -> None:
    create_paused(served, 3)
    app = dashboard
    async with app.run_test(size=(160, 50)) as pilot:
        await until_async(has_rows(app, "#jobs", 3), "three jobs")
        jobs = table(app, "#jobs")
        first, second, third = job_ids(served)
        assert jobs.keys_in_view_order == [first, second, third]
        # Move the last job up twice: it goes ahead of both others, as `job list` reports.
        jobs.move_cursor_to_key(third)
        await pilot.press("K")
        await until_async(lambda: job_ids(served)[1] == third, "third job moved up")
        await until_async(lambda: jobs.keys_in_view_order[1] == third, "the table follows")
        await pilot.press("K")
        await until_async(lambda: job_ids(served)[0] == third, "third job at the head")
        # And down again, behind its neighbour.
        await pilot.press("J")
        await until_async(lambda: job_ids(served) == [first, third, second], "moved down")
        # Priority through the dialog.
        jobs.move_cursor_to_key(second)
        await pilot.press("P")
        await pilot.pause()
        answer = app.screen.query_one("#answer")
        answer.value = "7"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await until_async(lambda: next(j for j in json.loads(served.cli(
            "job", "list", "--json").stdout) if j["jobId"] == second)["priority"] == 7,
            "priority 7")
        await until_async(lambda: jobs.keys_in_view_order[0] == second, "priority 7 runs first")
        # A bad value is a notification, not a crash.
        await pilot.press("P")
        await pilot.pause()
        app.screen.query_one("#answer").value = "soon"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await pilot.pause()
        # Activate the selected job's experiment from the queue.
        await pilot.press("a")
        exp_id = int(next(j for j in json.loads(served.cli("job", "list", "--json").stdout)
                          if j["jobId"] == second)["entityId"])
        await until_async(lambda: served.api("GET", f"/api/v1/experiments/{exp_id}")["experiment"][
            "state"] != "STATE_PAUSED", "activated")
        await pilot.press("x")  # kill asks first, saying what will happen
        await until_async(lambda: type(app.screen).__name__ == "ConfirmScreen", "the kill dialog")
        assert "without waiting for a checkpoint" in str(
            app.screen.query_one("#consequence").render())
        await pilot.press("y")
        await until_async(lambda: served.api("GET", f"/api/v1/experiments/{exp_id}")["experiment"][
            "state"] in ("STATE_CANCELED", "STATE_STOPPING_KILLED"), "killed", timeout=60)
        # Sort and filter.
        await pilot.press("s")
        assert jobs.sort_column == "pos"
        await pilot.press("slash")
        app.screen.query_one("#filter").value = first[:8]  # type: ignore[attr-defined]
        await pilot.press("enter")
        await until_async(lambda: jobs.keys_in_view_order == [first], "filtered to one job")
        await pilot.press("escape")
        await until_async(lambda: jobs.row_count >= 2, "filter cleared")
        await pilot.press("slash")  # a column term with text: state:paused and an id
        app.screen.query_one("#filter").value = f"State:PAUSED {third[:8]}"  # type: ignore
        await pilot.press("enter")
        await until_async(lambda: jobs.keys_in_view_order == [third], "filtered by column")
        assert "filter 'state:paused" in str(app.screen.query_one("#title").render())


async def test_open_an_experiment_follow_logs_and_search(served: Served,
                                                         dashboard: Dashboard) -> None:
    served.cli("e", "create", str(SAMPLE / "single.yaml"), str(SAMPLE))
    served.wait_experiment(1, timeout=120)
    create_paused(served, 1)
    app = dashboard
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("2")
        await until_async(has_rows(app, "#experiments", 2), "two experiments")
        exps = table(app, "#experiments")
        exps.move_cursor_to_key("1")
        await pilot.press("enter")
        await until_async(has_rows(app, "#trials", 1), "the trial")
        trials = table(app, "#trials")
        assert trials.row("1")["state"] == "COMPLETED"  # type: ignore[index]
        await until_async(has_rows(app, "#checkpoints", 1), "checkpoints")
        await pilot.press("m")
        await pilot.press("g")
        await pilot.press("l")
        await until_async(lambda: type(app.screen).__name__ == "LogsScreen", "logs screen")
        await until_async(lambda: len(app.screen.lines) > 5,  # type: ignore[attr-defined]
                          "log lines")
        await pilot.press("slash")
        app.screen.query_one("#search").value = "validation_loss"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await until_async(lambda: app.screen.position >= 0, "a match")  # type: ignore[attr-defined]
        await pilot.press("n")
        await pilot.press("e")
        await pilot.press("f")
        await pilot.press("escape")
        await pilot.press("escape")
        await until_async(lambda: type(app.screen).__name__ == "ExperimentsScreen", "back")
        # Archive the finished one: it leaves the list until archived ones are shown.
        await pilot.press("z")
        await until_async(lambda: exps.row("1") is None, "archived experiment hidden")
        await pilot.press("A")
        await until_async(lambda: exps.row("1") is not None, "shown with archived")
        # Delete it: only after `y` in a dialog that says what goes; then it is gone from the
        # master and the list.
        exps.move_cursor_to_key("1")
        await pilot.press("D")
        await until_async(lambda: type(app.screen).__name__ == "ConfirmScreen", "the delete dialog")
        await pilot.press("n")
        await until_async(notified(app, "kept"), "kept without y")
        assert served.api("GET", "/api/v1/experiments/1")["experiment"]["id"] == 1
        await pilot.press("D")
        await until_async(lambda: type(app.screen).__name__ == "ConfirmScreen", "the delete dialog")
        await pilot.press("y")
        await until_async(lambda: exps.row("1") is None, "deleted experiment leaves the list")
        assert all(e["id"] != 1 for e in served.api("GET", "/api/v1/experiments")["experiments"])


async def test_cluster_help_and_command_palette(served: Served, dashboard: Dashboard) -> None:
    app = dashboard
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("3")
        await until_async(has_rows(app, "#agents", 1), "the embedded agent")
        agents = table(app, "#agents")
        key = agents.keys_in_view_order[0]
        await until_async(lambda: "No NVIDIA GPU" in " ".join(
            str(w.render()) for w in app.screen.query("#detail Static")), "the no-GPU note")
        await pilot.press("D")  # as `determined`: refused, shown as a notification
        await until_async(lambda: any("admin" in str(n.message).lower() or "permission" in
                                str(n.message).lower() for n in app._notifications),
                    "a permission notification")
        assert served.api("GET", "/api/v1/agents")["agents"][0]["enabled"]
        assert app.client is not None
        await app.client.login("admin", "")
        await pilot.press("D")
        await until_async(lambda: not served.api("GET", "/api/v1/agents")["agents"][0]["enabled"],
                    "agent disabled")
        await pilot.press("E")
        await until_async(lambda: served.api("GET", "/api/v1/agents")["agents"][0]["enabled"],
                    "agent enabled")
        assert key
        await pilot.press("question_mark")
        await pilot.pause()
        text = str(app.screen.query_one("#help-text").render())
        for words in ("Disable agent", "Enable agent", "Queue", "Experiments", "Quit",
                      "Command palette"):
            assert words in text, words
        await pilot.press("escape")
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"go to exp")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await until_async(lambda: type(app.screen).__name__ == "ExperimentsScreen",
                    "palette switched screens")
        await pilot.press("q")


def notified(app: Dashboard, *words: str) -> Callable[[], bool]:
    return lambda: any(all(w.lower() in str(n.message).lower() for w in words)
                       for n in app._notifications)


async def test_every_other_binding_acts_through_the_api(served: Served, dashboard: Dashboard,
                                                        tmp_path: Path) -> None:
    create_paused(served, 2)
    app = dashboard
    async with app.run_test(size=(160, 50)) as pilot:
        await until_async(has_rows(app, "#jobs", 2), "two jobs")
        # Weight on a priority pool and an unknown pool are refused with a clear notification.
        await pilot.press("W")
        await pilot.pause()
        app.screen.query_one("#answer").value = "2"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await until_async(notified(app, "weight"), "weight refused")
        await pilot.press("o")
        await pilot.pause()
        app.screen.query_one("#answer").value = "nowhere"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await until_async(notified(app, "nowhere"), "unknown pool refused")
        refusal = next(n for n in app._notifications if "nowhere" in str(n.message))
        assert refusal.title.startswith("cannot move job "), refusal.title  # not "pool gpu"
        await pilot.press("r")
        assert table(app, "#jobs").sort_reverse
        await pilot.press("c", "y")  # cancel the selected job's experiment
        await until_async(lambda: any(e["state"] == "STATE_CANCELED" for e in served.api(
            "GET", "/api/v1/experiments")["experiments"]), "canceled")
        # Experiments: create one from the dialog, then control it by key.
        await pilot.press("2")
        await until_async(has_rows(app, "#experiments", 2), "experiments")
        await pilot.press("n")
        await pilot.pause()
        app.screen.query_one("#answer").value = str(SAMPLE / "single.yaml")  # type: ignore
        await pilot.press("enter")
        await pilot.pause()
        app.screen.query_one("#answer").value = str(SAMPLE)  # type: ignore[attr-defined]
        await pilot.press("enter")
        await until_async(has_rows(app, "#experiments", 3), "the created experiment")
        exps = table(app, "#experiments")
        exps.move_cursor_to_key("3")
        await pilot.press("p")
        await until_async(lambda: served.api("GET", "/api/v1/experiments/3")["experiment"]["state"]
                    == "STATE_PAUSED", "paused from the experiments screen")
        await pilot.press("a")
        await until_async(lambda: served.api("GET", "/api/v1/experiments/3")["experiment"]["state"]
                    != "STATE_PAUSED", "activated")
        await pilot.press("s")
        assert exps.sort_column == "id"
        await pilot.press("enter")  # open experiment 3
        await until_async(has_rows(app, "#trials", 1), "its trial")
        await pilot.press("s")
        assert table(app, "#trials").sort_column == "id"
        await pilot.press("l")
        await until_async(lambda: type(app.screen).__name__ == "LogsScreen", "logs")
        await until_async(lambda: len(app.screen.lines) > 0,  # type: ignore[attr-defined]
                          "log lines")
        await pilot.press("R")  # these logs carry no rank: said so
        await pilot.press("g")
        await pilot.press("G")
        await pilot.press("escape")
        await until_async(lambda: type(app.screen).__name__ == "ExperimentScreen", "back")
        await pilot.press("x")  # a dialog, unless it has already completed (then: said so)
        await until_async(lambda: type(app.screen).__name__ == "ConfirmScreen"
                    or notified(app, "already ended")(), "the kill dialog")
        if type(app.screen).__name__ == "ConfirmScreen":
            await pilot.press("y")
        await until_async(lambda: served.api("GET", "/api/v1/experiments/3")["experiment"]["state"]
                    in ("STATE_CANCELED", "STATE_COMPLETED"), "killed", timeout=60)
        await until_async(lambda: any(w in str(app.screen.query_one("#title").render())
                                for w in ("CANCELED", "COMPLETED")),
                    "the header follows the experiment's state")
        await pilot.press("escape")
        await pilot.press("3")
        await until_async(has_rows(app, "#agents", 1), "agents")
        await pilot.press("s")
        assert table(app, "#agents").sort_column == "id"


async def test_escape_then_a_key_in_a_filter_never_acts_on_a_row(served: Served,
                                                                   dashboard: Dashboard) -> None:
    """The accident of issue 12: typing in the filter, Escape, then `x` killed whatever row
    the cursor was on. Now Escape clears the box and stays in it, so `x` is typed there; and
    on the table, `x` only opens a dialog that `n` (or anything but `y`) leaves."""
    create_paused(served, 2)
    app = dashboard
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("2")
        await until_async(has_rows(app, "#experiments", 2), "two experiments")
        exps = table(app, "#experiments")
        await pilot.press("slash", *"spir", "escape", "x")
        await pilot.pause(0.3)
        box = app.screen.query_one("#filter")
        assert box.has_focus and box.value == "x"  # type: ignore[attr-defined]
        await pilot.press("escape", "escape")  # clear, then close: the table has the focus
        await pilot.pause(0.2)
        assert exps.has_focus and exps.filter_text == ""
        await pilot.press("x")  # on the table: a dialog, not a kill
        await until_async(lambda: type(app.screen).__name__ == "ConfirmScreen", "the kill dialog")
        await pilot.press("escape")
        await pilot.pause(0.5)
        states = {e["state"] for e in served.api("GET", "/api/v1/experiments")["experiments"]}
        assert states == {"STATE_PAUSED"}, states
        assert app.errors == []

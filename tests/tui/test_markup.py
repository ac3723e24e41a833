"""Markup fuzz: text that looks like Rich/Textual markup (`[/]`, `[bold]`, `[link=x]`,
`[@click=app.quit]`), terminal escape sequences, undecodable bytes and very long lines in every
field the master sends, in every search and filter box, every dialog's answer, every error
message and the command palette's query. The app must show them as they are and go on: no
exception reaches the app (`app.errors` stays empty) and the text shows up literally."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DirectoryTree, Input, Static
from textual_plotext import PlotextPlot

from dettui.errors import DettuiError
from dettui.screens.quit import QuitScreen
from tests.tui.fixed import FixedClient, FixedDashboard

MARKUP = "[/][bold]b[link=x]l[@click=app.quit]q[/] [b"
ANSI = "\x1b[31mred\x1b[0m\x1b]0;title\x07\x1b[2J"
BAD = "bad \udcff\udcfe bytes"
H = f"{MARKUP} {ANSI} {BAD}"
LONG = "[/]" * 3000
SIZE = (120, 40)


def _job(i: int) -> dict[str, Any]:
    return {"jobId": f"{i:08d}-{H}", "type": "TYPE_EXPERIMENT", "name": f"{H}-{i}",
            "entityId": str(i), "priority": 42, "weight": 1, "submissionTime": H,
            "allocatedSlots": 0, "requestedSlots": 1, "username": H, "resourcePool": H,
            "summary": {"state": f"STATE_{MARKUP}", "jobsAhead": i - 1},
            "unschedulableReason": H, "experimentState": "STATE_ACTIVE"}


EXPERIMENT = {"id": 1, "name": H, "state": "STATE_ACTIVE", "progress": 0.5, "numTrials": 1,
              "searcherType": H, "bestTrialSearcherMetric": 0.5, "resourcePool": H,
              "username": H, "archived": False, "description": H, "labels": [H],
              "config": {"searcher": {"metric": H},
                         "checkpoint_storage": {"save_experiment_best": H}}}
TRIAL = {"id": 1, "state": f"STATE_{MARKUP}", "totalBatchesProcessed": 10, "restarts": 0,
         "hparams": {H: H, "lr": LONG},
         "bestValidation": {"metrics": {"avgMetrics": {H: 0.5}}},
         "latestValidation": {"metrics": {"avgMetrics": {H: 0.6}}}}
AGENT = {"id": H, "hostname": H, "resourcePools": [H], "enabled": True, "noGpuReason": H,
         "slots": {"0": {"device": {"type": H}, "container": {"id": H}}},
         "telemetry": {"cpuPercent": 5.0, "memUsed": 1, "memTotal": 2,
                       "gpus": [{"index": 0, "name": H, "util": 1.0, "memUsed": 1,
                                 "memTotal": 2, "temperature": 30.0, "power": 10.0,
                                 "processes": []}],
                       "allocations": {H: {"cpuPercent": 1.0, "rss": 1}},
                       "history": {"cpu": [1, 2], "mem": [1, 2], "gpuUtil": {"0": [1]}}}}


class Hostile(FixedClient):
    """Every string the master sends is hostile; every action fails with a hostile message."""

    async def changes(self, topics: list[str], **_: Any) -> AsyncIterator[dict[str, Any]]:
        data = {"jobs": ([_job(1), _job(2)], "jobId"), "experiments": ([EXPERIMENT], "id"),
                "agents": ([AGENT], "id"), "experiment:1": ([TRIAL], "id")}
        for topic in topics:  # a windowed topic (`jobs?limit=500`) is the list's first rows
            objs, key = data[topic.partition("?")[0]]
            yield {"topic": topic, "kind": "snapshot", "upsert": objs, "remove": [],
                   "order": [str(o[key]) for o in objs], "total": len(objs)}
        yield {"error": H}
        await asyncio.Event().wait()

    async def experiment(self, exp_id: int) -> dict[str, Any]:
        return EXPERIMENT

    async def metrics(self, trial_id: int, group: str | None = None,
                      after_steps: int | None = None) -> list[dict[str, Any]]:
        return [{"stepsCompleted": s, "metrics": {"avgMetrics": {H: v, LONG: v}}}
                for s, v in [(5, 0.7), (10, 0.5), (15, 0.4)] if s > (after_steps or 0)]

    async def metric_series(self, trial_id: int, group: str, max_points: int,
                            after_steps: int | None = None) -> dict[str, Any]:
        """The chart's first read: series named with markup, escapes and 3,000 `[/]`."""
        return {"series": [{"name": name, "steps": [5, 10], "values": [0.7, 0.5]}
                           for name in (H, LONG)], "lastSteps": 10}

    async def checkpoints(self, exp_id: int) -> list[dict[str, Any]]:
        return [{"uuid": H, "state": H, "metadata": {"steps_completed": H},
                 "training": {"trialId": H, "searcherMetric": H}}]

    async def trial_logs(self, trial_id: int, **_: Any) -> AsyncIterator[dict[str, Any]]:
        for text in (H, LONG, MARKUP, ANSI, BAD, "\x00\x07\x08\x7f\x9b31m", "plain"):
            yield {"rankId": 0, "message": text}
        yield {"rankId": H, "message": H}
        await asyncio.Event().wait()

    async def pools(self) -> list[dict[str, Any]]:
        return [{"name": H, "slotsUsed": 0, "slotsAvailable": 1, "schedulerType": H}]

    async def experiment_action(self, exp_id: int, action: str) -> None:
        raise DettuiError(H)

    async def update_job(self, job_id: str, **change: Any) -> None:
        raise DettuiError(H)

    async def set_agent_enabled(self, agent_id: str, enabled: bool, **_: Any) -> None:
        raise DettuiError(H)

    async def delete_experiment(self, exp_id: int) -> None:
        raise DettuiError(H)

    async def tasks(self) -> list[dict[str, Any]]:  # what runs, for the quit dialog
        return [{"resources": [{"agentId": H}]}]

    async def request(self, method: str, path: str, **_: Any) -> Any:
        raise DettuiError(H)

    async def jobs(self, pool: str | None = None) -> list[dict[str, Any]]:
        return [_job(1), {**_job(2), "summary": {"state": "STATE_QUEUED"}}]

    async def agents(self) -> list[dict[str, Any]]:
        return [AGENT, {**AGENT, "id": f"{H}-local"}]

    async def create_experiment(self, config_text: str, files: list[dict[str, Any]],
                                **_: Any) -> Any:
        self.actions.append(("create", len(files)))
        raise DettuiError(H)


class HostileDashboard(FixedDashboard):
    async def connect(self) -> Any:
        self.sub_title = H
        return Hostile()


def shown(app: HostileDashboard) -> str:
    """Everything the current screen's text widgets, text boxes and the toasts show."""
    parts = [str(w.render()) for w in app.screen.query(Static)]
    parts += [box.value for box in app.screen.query(Input)]
    parts += [str(n.message) for n in app._notifications]
    return "\n".join(parts)


def plot(app: HostileDashboard) -> str:
    """The experiment screen's chart: its title and plot as drawn."""
    return (f"{app.screen.query_one('#chart-title').render()}\n"
            f"{app.screen.query_one('#chart', PlotextPlot).render().plain}")


async def answer(pilot: Pilot[None], text: str) -> None:
    await pilot.pause(0.2)
    given = shown(pilot.app)  # type: ignore[arg-type]  # the dialog's value (a pool's name)
    assert "\x1b" not in given and "\udcff" not in given, given
    pilot.app.screen.query_one("#answer", Input).value = text
    await pilot.press("enter")
    await pilot.pause(0.2)


async def type_into(pilot: Pilot[None], selector: str, text: str, typed: str = "") -> None:
    await pilot.press(*typed)  # typed keys reach the box, not the table
    box = pilot.app.screen.query_one(selector, Input)
    box.value = box.value[:len(typed)] + text
    await pilot.press("enter")
    await pilot.pause(0.2)


async def test_hostile_text_everywhere_is_shown_as_it_is() -> None:
    app = HostileDashboard()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.5)
        assert MARKUP in shown(app) or "Job queue" in shown(app)
        await pilot.press("slash")
        await type_into(pilot, "#filter", H, typed="[b]")
        assert "filter '[b][/][bold]" in shown(app), shown(app)
        assert "\x1b" not in shown(app) and "\udcff" not in shown(app), shown(app)
        await pilot.press("escape")
        await pilot.press("P")
        await answer(pilot, H)  # not a number: said so, with the answer as typed
        await pilot.press("o")
        await answer(pilot, H)  # the pool: the master refuses with a hostile message
        await pilot.press("x", "y")  # kill, confirmed: refused with a hostile message
        await pilot.pause(0.3)
        assert "[@click=app.quit]" in shown(app)
        await pilot.press("2")
        await pilot.pause(0.3)
        await pilot.press("slash")
        await type_into(pilot, "#filter", MARKUP)
        await pilot.press("escape", "escape", "D", "y")
        await pilot.pause(0.3)
        await pilot.press("enter")  # the experiment: title, trials, chart, checkpoints
        await pilot.pause(0.6)
        assert "[link=x]" in str(app.screen.query_one("#title").render())
        assert f"trial 1: {MARKUP}" in plot(app), plot(app)  # the metric's name, as it is
        await pilot.press("m")  # the other metric: 3,000 `[/]`
        await pilot.pause(0.2)
        assert "trial 1: [/][/][/]" in plot(app), plot(app)
        await pilot.press("g", "p", "c", "y")
        await pilot.pause(0.3)
        await pilot.press("l")  # its logs
        await pilot.pause(0.6)
        await pilot.press("slash")
        await type_into(pilot, "#search", MARKUP)  # an invalid regular expression: said so
        await pilot.press("slash")
        await type_into(pilot, "#search", "link=x")  # a match: the title names its line
        assert "match: line" in str(app.screen.query_one("#title").render())
        await pilot.press("e", "R", "R", "f", "g", "G")
        await pilot.pause(0.3)
        text = shown(app)
        view = app.screen.log_widget
        drawn = "\n".join(view.render_line(y).text for y in range(view.size.height))
        assert "[/][bold]" in drawn and "[link=x]" in drawn, drawn  # the lines as they are
        assert "\x1b" not in text + drawn and "\udcff" not in text + drawn
        await pilot.press("escape", "escape", "3")  # the cluster: every detail line
        await pilot.pause(0.5)
        assert "[@click=app.quit]" in shown(app)
        await pilot.press("E", "D", "question_mark", "escape")
        await pilot.press("ctrl+p")
        await pilot.pause(0.2)
        await pilot.press(*"[/]", "[", "@")  # the palette's own query
        await pilot.pause(0.5)
        await pilot.press("escape")
        await pilot.pause(0.3)
        assert app.is_running
    assert app.errors == [], app.errors


def test_no_screen_shows_a_string_as_markup() -> None:
    """By construction: screens and widgets build their text widgets through `Plain` (never
    markup) and their text boxes through `PlainInput` (never an escape sequence), and nothing
    asks for markup."""
    paths = sorted([*Path("dettui/screens").glob("*.py"), *Path("dettui/widgets").glob("*.py"),
                    Path("dettui/commands/dashboard.py")])
    assert len(paths) > 15, paths
    for path in paths:
        source = path.read_text()
        assert not re.search(r"(?<![\w.])(Static|Label)\(", source), f"{path}: use Plain"
        assert not re.search(r"(?<![\w.])Input\(", source), f"{path}: use PlainInput"
        assert "markup=True" not in source and "from_markup" not in source, path
        assert ".update(f\"" not in source, f"{path}: use self.show()"


@pytest.mark.parametrize("steps", [["2"], ["2", "enter"], ["2", "enter", "l"], ["3"]],
                         ids=["experiments", "experiment", "logs", "cluster"])
def test_hostile_snapshots(snap_compare: Any, steps: list[str]) -> None:
    async def run(pilot: Pilot[None]) -> None:
        for key in steps:
            await pilot.press(key)
            await pilot.pause(0.5)

    assert snap_compare(HostileDashboard(), terminal_size=(80, 24), run_before=run)


NAME = "[bold]b[link=x]l[@click=app.quit]q[\\] [b \x1b[31mred\x1b[0m \udcff"  # no `/` in a name
SAMPLE = Path(__file__).parents[2] / "sample_ctx"


def labels(app: HostileDashboard) -> list[str]:
    return [str(node.label) for node in app.screen.query_one(DirectoryTree).root.children]


async def pick(pilot: Pilot[None], ending: str) -> None:
    """Pick the entry of the path dialog's tree whose name ends so."""
    tree = pilot.app.screen.query_one(DirectoryTree)
    tree.focus()
    tree.move_cursor(next(n for n in tree.root.children if str(n.label).endswith(ending)))
    await pilot.press("enter")
    await pilot.pause(0.2)


async def test_hostile_file_names_in_the_path_picker(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`n` on the experiments list: names of files and directories with markup, escapes and
    undecodable bytes are listed as they are (printable), picked (the box shows them printable,
    the answer is the file itself), and named as they are in the errors of creating an
    experiment from them (a create the master refuses; a config that is not valid)."""
    (tmp_path / f"{NAME}.yaml").write_text((SAMPLE / "single.yaml").read_text())
    (tmp_path / f"{NAME} bad.yml").write_text("searcher: {name: '[@click=app.quit]'}\n")
    (tmp_path / f"{NAME} dir").mkdir()
    (tmp_path / "train.py").write_text((SAMPLE / "train.py").read_text())
    monkeypatch.chdir(tmp_path)
    app = HostileDashboard()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await pilot.pause(0.3)
        await pilot.press("n")  # the config: directories and YAML files
        await pilot.pause(0.5)
        name = "[bold]b[link=x]l[@click=app.quit]q[\\] [b red \ufffd"
        assert sorted(labels(app)) == [f"{name} bad.yml", f"{name} dir", f"{name}.yaml"]
        await pick(pilot, ".yaml")
        assert app.screen.query_one("#answer", Input).value == f"{tmp_path}/{name}.yaml"
        assert "\x1b" not in shown(app) and "\udcff" not in shown(app), shown(app)
        await pilot.press("enter")
        await pilot.pause(0.5)  # the context: directories only
        assert labels(app) == [f"{name} dir"], labels(app)
        await pilot.press("enter")  # this directory: the file read and packed, then refused
        await pilot.pause(1.0)
        assert [a[0] for a in app.client.actions] == ["create"]  # type: ignore[union-attr]
        text = shown(app)
        assert "[@click=app.quit]q[/] [b" in text, text  # the master's message
        await pilot.press("n")
        await pilot.pause(0.5)
        await pick(pilot, " bad.yml")
        await pilot.press("enter")
        await pilot.pause(0.5)
        await pilot.press("enter")  # its directory: the config is read, and refused
        await pilot.pause(0.5)
        text = shown(app)
        assert f"invalid experiment configuration ({tmp_path}/{name} bad.yml)" in text, text
        assert "[@click=app.quit]" in text, text
        assert "\x1b" not in text and "\udcff" not in text
        assert app.is_running
    assert app.errors == [], app.errors


async def test_hostile_agent_ids_in_the_quit_dialog() -> None:
    """Quitting with work running names the other machines trials run on: as they are."""
    app = HostileDashboard()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        work = await app.work()
        assert work.remote == (H,)
        await app.push_screen(QuitScreen(work, H, 4242))
        await pilot.pause(0.3)
        text = shown(app)
        assert f"1 trial running (1 of them on other machines: {MARKUP} red" in text, text
        assert "1 job waiting" in text and f"(pid 4242, {MARKUP}" in text, text
        assert "\x1b" not in text and "\udcff" not in text
        await pilot.press("escape")
        await pilot.pause(0.2)
        assert not isinstance(app.screen, QuitScreen)
    assert app.errors == [], app.errors

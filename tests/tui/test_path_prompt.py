"""The path dialog: a typed path or one picked in a tree that shows only what can be chosen."""

from __future__ import annotations

from pathlib import Path

from textual.app import App
from textual.widgets import DirectoryTree, Input

from dettui.screens.base import PathPrompt


class Asker(App[None]):
    def __init__(self, prompt: PathPrompt) -> None:
        super().__init__()
        self.prompt = prompt
        self.answers: list[str | None] = []

    def on_mount(self) -> None:
        self.push_screen(self.prompt, self.answers.append)


def labels(tree: DirectoryTree) -> list[str]:
    return sorted(str(child.label) for child in tree.root.children)


async def test_pick_a_yaml_file_in_the_tree(tmp_path: Path) -> None:
    (tmp_path / "exp.yaml").write_text("name: x\n")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / ".hidden.yaml").write_text("")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "ctx").mkdir()
    app = Asker(PathPrompt("config?", str(tmp_path / "missing.yaml"), files=True,
                           want=lambda p: p.suffix == ".yaml"))
    async with app.run_test(size=(100, 40)) as pilot:
        tree = app.screen.query_one(DirectoryTree)
        await pilot.pause(0.3)
        assert labels(tree) == ["ctx", "exp.yaml"], "directories and YAML only"
        await pilot.press("tab")  # into the tree
        assert app.focused is tree
        await pilot.press("down", "down", "enter")  # ctx, then exp.yaml
        await pilot.pause()
        box = app.screen.query_one("#answer", Input)
        assert box.value == str(tmp_path / "exp.yaml") and app.focused is box
        await pilot.press("enter")
        await pilot.pause()
    assert app.answers == [str(tmp_path / "exp.yaml")]


async def test_pick_a_directory_or_type_one(tmp_path: Path) -> None:
    (tmp_path / "ctx").mkdir()
    (tmp_path / "exp.yaml").write_text("")
    app = Asker(PathPrompt("context?", str(tmp_path), files=False))
    async with app.run_test(size=(100, 40)) as pilot:
        tree = app.screen.query_one(DirectoryTree)
        await pilot.pause(0.3)
        assert labels(tree) == ["ctx"], "directories only"
        await pilot.press("tab", "down", "enter")
        await pilot.pause()
        assert app.screen.query_one("#answer", Input).value == str(tmp_path / "ctx")
        app.screen.query_one("#answer", Input).value = "/typed/instead"
        app.screen.query_one("#answer", Input).focus()
        await pilot.press("enter")
        await pilot.pause()
    assert app.answers == ["/typed/instead"]

"""YAML with bounded cost: bombs, deep nesting and huge texts are refused before they are built;
ordinary documents (anchors and merge keys included) load exactly as yaml.safe_load does."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from dettui.config import load_config, yamlsafe
from dettui.errors import ConfigError, TooLarge

SAMPLES = sorted((Path(__file__).resolve().parents[2] / "sample_ctx").glob("*.yaml"))


def bomb(levels: int) -> str:
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    names = "abcdefghij"
    for prev, name in zip(names, names[1:levels], strict=False):
        text += f"{name}: &{name} [" + ",".join([f"*{prev}"] * 10) + "]\n"
    return text


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_ordinary_documents_load_as_safe_load_does(path: Path) -> None:
    assert yamlsafe.load(path.read_text()) == yaml.safe_load(path.read_text())


def test_anchors_and_merge_keys_still_work() -> None:
    text = "base: &b {lr: 0.1, n: 2}\nx:\n  <<: *b\n  n: 3\ny: [*b, *b]\n"
    assert yamlsafe.load(text) == yaml.safe_load(text)
    assert yamlsafe.load(bomb(4)) == yaml.safe_load(bomb(4))  # 10^4 leaves is fine


def test_an_alias_bomb_is_refused_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(yamlsafe.YamlTooBig, match="alias bomb"):
        yamlsafe.load(bomb(7))  # 10^7 leaves: 40 s and 2 GB with yaml.safe_load
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize("text", [
    "a: " + "{b: " * 80 + "1" + "}" * 80,
    "a:\n" + "".join(" " * i + "b:\n" for i in range(1, 80)),
    "[" * 20_000 + "]" * 20_000,
])
def test_deep_nesting_is_refused(text: str) -> None:
    with pytest.raises((yamlsafe.YamlTooBig, yaml.YAMLError)):
        yamlsafe.load(text)


def test_a_recursive_document_is_refused() -> None:
    with pytest.raises(yamlsafe.YamlTooBig, match="recursive"):
        yamlsafe.load("&a [1, *a]")


def test_load_config_reports_the_caps() -> None:
    with pytest.raises(TooLarge, match="over the limit of 1.0 MiB"):
        load_config("name: x\ndescription: " + "x" * (2 * 1024 * 1024))
    with pytest.raises(ConfigError, match="alias bomb"):
        load_config(bomb(7) + "name: x\nentrypoint: x\nsearcher: {name: single, metric: m}\n")
